//! Per-operation counters and latency histograms, one set per worker, merged at the end
//! (histograms merge exactly; percentiles would not).

use counterlab_core::{ErrorClass, OpError, Outcome};
use hdrhistogram::Histogram;

/// Microsecond histogram covering 1 us up to `max_us` at 3 significant digits.
pub fn new_latency_histogram(max_us: u64) -> Histogram<u64> {
    Histogram::new_with_bounds(1, max_us.max(2), 3).expect("valid histogram bounds")
}

/// What happened to one kind of operation.
#[derive(Clone, Debug)]
pub struct OpStats {
    pub count: u64,
    pub ok: u64,
    pub fail: u64,
    pub unknown: u64,
    /// Ops that found no target (the user had no live notification) and did nothing.
    pub skipped: u64,
    /// Ok ops that changed something (a read transition, a deletion, rows marked read).
    pub transitioned: u64,
    pub errors_by_class: [u64; 5],
    /// Latency of every issued op, ok or not (skipped ops are not timed).
    pub latency_us: Histogram<u64>,
}

impl OpStats {
    pub fn new(max_us: u64) -> OpStats {
        OpStats {
            count: 0,
            ok: 0,
            fail: 0,
            unknown: 0,
            skipped: 0,
            transitioned: 0,
            errors_by_class: [0; 5],
            latency_us: new_latency_histogram(max_us),
        }
    }

    pub fn errors(&self) -> u64 {
        self.fail + self.unknown
    }

    pub(crate) fn record(&mut self, latency_us: u64, result: &Result<bool, OpError>) {
        self.count += 1;
        self.latency_us.saturating_record(latency_us.max(1));
        match result {
            Ok(changed) => {
                self.ok += 1;
                self.transitioned += *changed as u64;
            }
            Err(e) => {
                match e.outcome {
                    Outcome::Unknown => self.unknown += 1,
                    _ => self.fail += 1,
                }
                self.errors_by_class[e.class.index()] += 1;
            }
        }
    }

    pub fn merge(&mut self, other: &OpStats) {
        self.count += other.count;
        self.ok += other.ok;
        self.fail += other.fail;
        self.unknown += other.unknown;
        self.skipped += other.skipped;
        self.transitioned += other.transitioned;
        for c in ErrorClass::ALL {
            self.errors_by_class[c.index()] += other.errors_by_class[c.index()];
        }
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms share bounds");
    }
}
