//! The report's figures as CSV (`run --csv FILE`): one record per strategy x backend x
//! level x op kind, with the row's verdict and throughput beside the op's counts and
//! latency quantiles (µs), for spreadsheets and CI dashboards.

use crate::{Report, StrategyReport};

/// The header, in record order.
pub const CSV_HEADER: [&str; 17] = [
    "scenario",
    "strategy",
    "backend",
    "isolation",
    "read_from",
    "verdict",
    "matches_guarantee",
    "ops_per_s",
    "op",
    "count",
    "errors",
    "retries",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
];

fn records<'a>(r: &'a Report, s: &'a StrategyReport) -> impl Iterator<Item = [String; 17]> + 'a {
    s.ops.iter().filter(|(_, o)| o.count > 0).map(move |(op, o)| {
        let l = &o.latency_us;
        [
            r.scenario.clone(),
            s.strategy.clone(),
            s.backend.name(),
            s.isolation.name().into(),
            s.read_from.name().into(),
            s.check.label(),
            s.check.matches_guarantee.to_string(),
            format!("{:.1}", s.throughput_ops_per_s),
            op.clone(),
            o.count.to_string(),
            o.errors.to_string(),
            o.retries.to_string(),
            l.p50.to_string(),
            l.p90.to_string(),
            l.p99.to_string(),
            l.p999.to_string(),
            l.max.to_string(),
        ]
    })
}

/// The report as CSV (RFC 4180 quoting, by the csv crate).
pub fn render_csv(r: &Report) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER).expect("write to memory");
    for s in &r.strategies {
        for rec in records(r, s) {
            w.write_record(&rec).expect("write to memory");
        }
    }
    String::from_utf8(w.into_inner().expect("flush to memory")).expect("CSV of UTF-8 fields")
}
