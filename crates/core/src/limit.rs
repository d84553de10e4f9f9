//! What a check did not cover (`Limit`): said after the verdict's label in brackets, in
//! its sentence and in the JSON, and read back from a report's text.

use std::fmt;

/// One thing the check did not cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The history was full: `dropped` calls were not recorded, so no read was checked.
    HistoryCapped { recorded: u64, dropped: u64 },
    /// Settled reads that errored twice and were not compared with the truth.
    SettledReadsLeftOut { left_out: u64, sampled: u64 },
    /// A text no check of this version writes (a report from another version).
    Other(String),
}

impl Limit {
    /// The words reports print, e.g. `history capped at 4000000 calls (12 not recorded):
    /// reads not checked`.
    pub fn text(&self) -> String {
        match self {
            Limit::HistoryCapped { recorded, dropped } => {
                format!("history capped at {recorded} calls ({dropped} not recorded): reads not checked")
            }
            Limit::SettledReadsLeftOut { left_out, sampled } => {
                format!("{left_out} of {sampled} settled reads errored twice and were not compared")
            }
            Limit::Other(text) => text.clone(),
        }
    }

    /// A text as `text()` writes it; any other text is kept as `Other`.
    pub fn parse(text: &str) -> Limit {
        Limit::history_capped(text).or_else(|| Limit::settled_left_out(text)).unwrap_or(Limit::Other(text.into()))
    }

    /// A few words for a decision line: `reads not checked: history capped`.
    pub fn short(&self) -> String {
        match self {
            Limit::HistoryCapped { .. } => "reads not checked: history capped".into(),
            Limit::SettledReadsLeftOut { left_out, sampled } => {
                format!("{left_out} of {sampled} settled reads not compared")
            }
            Limit::Other(text) => text.clone(),
        }
    }

    /// `a; b`: the texts of `limits`, for a label or a sentence.
    pub fn joined(limits: &[Limit]) -> String {
        limits.iter().map(Limit::text).collect::<Vec<_>>().join("; ")
    }

    /// True when no read was judged against its bounds.
    pub fn leaves_reads_unchecked(&self) -> bool {
        matches!(self, Limit::HistoryCapped { .. })
    }

    fn history_capped(text: &str) -> Option<Limit> {
        let rest = text.strip_prefix("history capped at ")?.strip_suffix(" not recorded): reads not checked")?;
        let (recorded, dropped) = rest.split_once(" calls (")?;
        Some(Limit::HistoryCapped { recorded: recorded.parse().ok()?, dropped: dropped.parse().ok()? })
    }

    fn settled_left_out(text: &str) -> Option<Limit> {
        let rest = text.strip_suffix(" settled reads errored twice and were not compared")?;
        let (left_out, sampled) = rest.split_once(" of ")?;
        Some(Limit::SettledReadsLeftOut { left_out: left_out.parse().ok()?, sampled: sampled.parse().ok()? })
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_reads_back_from_its_text() {
        for l in [
            Limit::HistoryCapped { recorded: 4_000_000, dropped: 12 },
            Limit::SettledReadsLeftOut { left_out: 2, sampled: 1000 },
            Limit::Other("something else".into()),
        ] {
            assert_eq!(Limit::parse(&l.text()), l);
        }
        assert_eq!(Limit::parse("history capped at x calls"), Limit::Other("history capped at x calls".into()));
        assert!(!Limit::SettledReadsLeftOut { left_out: 1, sampled: 2 }.leaves_reads_unchecked());
    }
}
