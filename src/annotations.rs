//! GitHub Actions workflow commands (`::error ...`), printed when `GITHUB_ACTIONS=true`:
//! one line per row that fails the run or is INCOMPLETE, by the rule the exit code and
//! `--junit` follow (`row_outcome`), so a job's summary names them.

use counterlab_report::{Report, RowOutcome, case_name, row_outcome};

/// Whether the run is a GitHub Actions job.
pub fn enabled() -> bool {
    std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true")
}

/// The workflow commands for `report`'s rows (none for rows that pass).
pub fn lines(report: &Report, strict: bool) -> Vec<String> {
    report
        .strategies
        .iter()
        .filter_map(|s| {
            let (level, why) = match row_outcome(s, strict) {
                RowOutcome::Passed => return None,
                RowOutcome::Failed(why) => ("error", why),
                RowOutcome::Incomplete(why) => ("warning", why),
            };
            let title = escape_property(&format!("counterlab: {}", case_name(s)));
            Some(format!("::{level} title={title}::{}", escape_data(&format!("{why}\n{}", s.check.summary))))
        })
        .collect()
}

/// A command's message: `%`, CR and LF escaped (GitHub's toolkit rule).
fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A command's property value: the message's escapes, and `:` and `,` too.
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_titles_are_escaped() {
        assert_eq!(escape_data("50%\nnext"), "50%25%0Anext");
        assert_eq!(escape_property("a: b, c"), "a%3A b%2C c");
    }
}
