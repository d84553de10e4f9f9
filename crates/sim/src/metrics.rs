//! Per-operation counters and latency histograms, one set per worker, merged at the end
//! (histograms merge exactly; percentiles would not).

use counterlab_core::{ErrorClass, OpError, Outcome};
use hdrhistogram::Histogram;

/// Significant digits of every latency histogram.
const LATENCY_SIGFIG: u8 = 3;

/// Microsecond histogram at 3 significant digits that starts at its smallest range (2048
/// counts, 16 KiB) and grows as larger values arrive (callers clamp values to their
/// bound). Its buckets depend only on the lowest value and the digits, never on the
/// range, so a value records the same as in a histogram sized for it up front; sizing
/// every worker's histograms for a second cost 96 KiB each (13 a worker).
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new(LATENCY_SIGFIG).expect("valid histogram bounds")
}

/// Records `us` (at least 1), growing the histogram as needed; callers bound `us`.
pub fn record_us(h: &mut Histogram<u64>, us: u64) {
    record_us_n(h, us, 1);
}

/// `record_us` for `n` values of `us` at once (a batch's ops share one latency).
pub fn record_us_n(h: &mut Histogram<u64>, us: u64, n: u64) {
    if h.record_n(us.max(1), n).is_err() {
        h.saturating_record_n(us.max(1), n);
    }
}

/// Retry accounting for one op (all K calls of a duplicate group together).
#[derive(Clone, Debug, Default)]
pub struct Tries {
    pub retries: u64,
    pub gave_up: bool,
    /// Classes of the failed attempts that were retried.
    pub retried_errors: [u64; ErrorClass::COUNT],
    /// Attempts with an unknown outcome that were run again (retry on unknown).
    pub unknown_retried: u32,
}

impl Tries {
    pub(crate) fn absorb(&mut self, other: &Tries) {
        self.retries += other.retries;
        self.gave_up |= other.gave_up;
        self.unknown_retried += other.unknown_retried;
        for (a, b) in self.retried_errors.iter_mut().zip(other.retried_errors) {
            *a += b;
        }
    }
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
    pub errors_by_class: [u64; ErrorClass::COUNT],
    /// Attempts that failed on a conflict and were run again.
    pub retries: u64,
    /// Ops whose last allowed attempt still failed on a conflict.
    pub give_ups: u64,
    /// Latency of every issued op, ok or not (skipped ops are not timed), from its
    /// intended start: the actual start in a closed loop, the schedule's in an open one.
    pub latency_us: Histogram<u64>,
    /// From the actual start (service time); equals `latency_us` in a closed loop.
    pub service_us: Histogram<u64>,
}

impl Default for OpStats {
    fn default() -> OpStats {
        OpStats::new()
    }
}

impl OpStats {
    pub fn new() -> OpStats {
        OpStats {
            count: 0,
            ok: 0,
            fail: 0,
            unknown: 0,
            skipped: 0,
            transitioned: 0,
            errors_by_class: [0; ErrorClass::COUNT],
            retries: 0,
            give_ups: 0,
            latency_us: new_latency_histogram(),
            service_us: new_latency_histogram(),
        }
    }

    /// A closed-loop stage's ops: their service time is their latency.
    pub(crate) fn service_is_latency(&mut self) {
        self.service_us = self.latency_us.clone();
    }

    pub fn errors(&self) -> u64 {
        self.fail + self.unknown
    }

    /// Records one op: its latency, final result, and the retries it took. Every failed
    /// attempt (retried or final) is counted in `errors_by_class`. `service_us` None: a
    /// closed loop's op, whose service time is its latency (`service_is_latency` once
    /// per stage, so a worker holds one growing histogram per kind, not two).
    pub(crate) fn record(
        &mut self,
        latency_us: u64,
        service_us: Option<u64>,
        result: &Result<bool, OpError>,
        tries: &Tries,
    ) {
        self.count_result(result, tries);
        record_us(&mut self.latency_us, latency_us);
        if let Some(us) = service_us {
            record_us(&mut self.service_us, us);
        }
    }

    /// `n` ops of one batch in a closed loop: one latency, recorded `n` times (each op's
    /// result is counted by `count_result`).
    pub(crate) fn record_latency_n(&mut self, latency_us: u64, n: u64) {
        record_us_n(&mut self.latency_us, latency_us, n);
    }

    /// Counts one op's final result and the retries it took (its latency aside).
    pub(crate) fn count_result(&mut self, result: &Result<bool, OpError>, tries: &Tries) {
        self.count += 1;
        self.retries += tries.retries;
        self.give_ups += tries.gave_up as u64;
        for c in ErrorClass::ALL {
            self.errors_by_class[c.index()] += tries.retried_errors[c.index()];
        }
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
        self.retries += other.retries;
        self.give_ups += other.give_ups;
        for c in ErrorClass::ALL {
            self.errors_by_class[c.index()] += other.errors_by_class[c.index()];
        }
        self.latency_us.add(&other.latency_us).expect("auto-resizing histograms merge");
        self.service_us.add(&other.service_us).expect("auto-resizing histograms merge");
    }
}
