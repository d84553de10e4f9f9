//! The top of the HTML page, the decision view: one sentence per backend x isolation,
//! then every row's verdict where a 1280x800 window shows it without scrolling (one
//! ranked table for a single group; a strategy x group grid for several, with the
//! ranked tables further down). Every verdict element carries `data-row` (the row's
//! label) and the class `verdict`, every sentence the class `decision-sentence`.

use std::fmt::Write as _;

use super::svg::esc;
use super::verdict_class;
use crate::Report;
use crate::decision::{Group, Ranked, Standing, cost_column, decide, noise_note, relative_text};

/// The decision view: sentences, then the ranked table (one group) or the grid.
pub(super) fn decision(w: &mut String, r: &Report) {
    let groups = decide(r);
    writeln!(w, "<section id=\"decision\">").unwrap();
    let held = if r.all_guarantees_held { "good" } else { "bad" };
    let said = if r.all_guarantees_held { "every declared guarantee held" } else { "a declared guarantee was broken" };
    writeln!(
        w,
        "<p class=\"overall\"><span class=\"{held}\">{said}</span> <span class=\"muted\">{}</span></p>",
        esc(&noise_note(r))
    )
    .unwrap();
    if groups.is_empty() {
        writeln!(w, "<p class=\"muted\">no strategy ran</p>").unwrap();
    }
    writeln!(w, "<ul class=\"sentences\">").unwrap();
    for g in &groups {
        writeln!(w, "<li class=\"decision-sentence\">{}</li>", esc(&g.sentence)).unwrap();
    }
    writeln!(w, "</ul>").unwrap();
    match groups.as_slice() {
        [one] => ranked_table(w, one, true),
        _ => grid(w, &groups),
    }
    writeln!(w, "</section>").unwrap();
}

/// The ranked rows of the groups, one table each, for a report with several groups.
pub(super) fn ranked_tables(w: &mut String, r: &Report) {
    let groups = decide(r);
    if groups.len() < 2 {
        return;
    }
    writeln!(w, "<h2>Ranked per backend and level</h2>").unwrap();
    for g in &groups {
        writeln!(w, "<h3>{} at {}</h3>", esc(g.backend.name()), esc(g.isolation.name())).unwrap();
        ranked_table(w, g, false);
    }
}

/// A verdict cell's content: its label, coloured, then the words.
fn verdict_html(x: &Ranked<'_>, top: bool) -> String {
    let data = if top { format!(" data-row=\"{}\"", esc(&x.row.label())) } else { String::new() };
    let (class, label) = (verdict_class(&x.row.check.verdict), x.row.check.label());
    format!("<span class=\"verdict {class}\"{data}>{}</span> {}", esc(&label), esc(&x.verdict))
}

/// One group's rows: rank, strategy, verdict, throughput vs best, p99, retries/give-ups,
/// moving parts, then the cost figures that differ most (`cost_column`).
fn ranked_table(w: &mut String, g: &Group<'_>, top: bool) {
    let heads: String = g.cost_figures.iter().map(|f| format!("<th>{}</th>", esc(&f.heading()))).collect();
    writeln!(w, "<div class=\"scroll\"><table class=\"ranked\">\n<thead><tr><th>#</th><th>strategy</th><th>verdict</th><th>throughput vs best</th><th>p99</th><th>retries / give-ups</th><th>moving parts</th>{heads}</tr></thead>\n<tbody>").unwrap();
    for (i, x) in g.rows.iter().enumerate() {
        let costs: String = g
            .cost_figures
            .iter()
            .map(|f| format!("<td class=\"num cost\">{}</td>", esc(&cost_column::cell(f, x))))
            .collect();
        writeln!(
            w,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"wide\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} / {}</td><td class=\"wide\">{}</td>{costs}</tr>",
            i + 1,
            esc(&x.row.display_name()),
            verdict_html(x, top),
            esc(&relative_text(x)),
            esc(&x.p99),
            x.row.retries,
            x.row.give_ups,
            esc(&x.cost)
        )
        .unwrap();
    }
    writeln!(w, "</tbody></table></div>").unwrap();
    if let Some(l) = cost_column::legend(&g.cost_figures) {
        writeln!(w, "<p class=\"muted\">{}</p>", esc(&l)).unwrap();
    }
}

/// A short verdict for a grid cell (the ranked tables below have the words).
fn short(x: &Ranked<'_>) -> String {
    match x.standing {
        Standing::Held if x.row.guarantee == counterlab_core::Guarantee::Eventual => "converged".into(),
        Standing::Held => "exact".into(),
        Standing::NoDriftSeen => "no drift seen".into(),
        Standing::Drifted => format!("lost {}/{}", x.row.check.users_mismatched, x.row.check.users_checked),
        Standing::NotJudged => "not judged".into(),
        Standing::Failed => "FAILED".into(),
    }
}

/// Strategies down, backend x isolation across: each cell the short verdict and the
/// throughput relative to the group's best design that kept its guarantee.
fn grid(w: &mut String, groups: &[Group<'_>]) {
    let mut names: Vec<String> = Vec::new();
    for x in groups.iter().flat_map(|g| &g.rows) {
        if !names.contains(&x.row.display_name()) {
            names.push(x.row.display_name());
        }
    }
    write!(w, "<div class=\"scroll\"><table class=\"grid\">\n<thead><tr><th>strategy</th>").unwrap();
    for g in groups {
        write!(w, "<th>{}<br>{}</th>", esc(g.backend.name()), esc(g.isolation.name())).unwrap();
    }
    writeln!(w, "</tr></thead>\n<tbody>").unwrap();
    for name in names {
        write!(w, "<tr><td>{}</td>", esc(&name)).unwrap();
        for g in groups {
            match g.rows.iter().find(|x| x.row.display_name() == name) {
                None => write!(w, "<td class=\"muted\">-</td>").unwrap(),
                Some(x) => write!(
                    w,
                    "<td><span class=\"verdict {}\" data-row=\"{}\" title=\"{}\">{}</span> <span class=\"rel\">{}</span></td>",
                    verdict_class(&x.row.check.verdict),
                    esc(&x.row.label()),
                    esc(&format!("{}: {}", x.row.check.label(), x.verdict)),
                    esc(&short(x)),
                    esc(&relative_text(x))
                )
                .unwrap(),
            }
        }
        writeln!(w, "</tr>").unwrap();
    }
    writeln!(w, "</tbody></table></div>").unwrap();
}
