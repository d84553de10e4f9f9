//! `counterlab list`: the built-in strategies in two sections, the designs and the
//! mutants (the bug zoo's deliberately wrong variants), one line each.

use counterlab_strategies::{BUILTINS, Builtin};

/// The heading of the second section.
pub const MUTANTS_HEADING: &str = "mutants (bug zoo, deliberately wrong):";

/// The listing as printed: `designs:`, their lines, a blank line, the mutants' heading
/// and their lines; each line starts with the strategy's name.
pub fn render() -> String {
    let line = |row: &Builtin| {
        let s = row.info;
        format!("{:<29} guarantee: {:<8} needs: {:<14} {}\n", s.name, s.guarantee.name(), row.family(), s.summary)
    };
    let (mutants, designs): (Vec<&Builtin>, Vec<&Builtin>) = BUILTINS.iter().partition(|r| r.is_mutant());
    let mut out = String::from("designs:\n");
    designs.into_iter().for_each(|r| out += &line(r));
    out += &format!("\n{MUTANTS_HEADING}\n");
    mutants.into_iter().for_each(|r| out += &line(r));
    out
}
