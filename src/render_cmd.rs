//! `counterlab report <report.json>`: re-renders a saved report (report.md, report.html
//! and the terminal view) with this build's renderers, without running anything.

use crate::exit::Exit;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use counterlab_report::{render_html, render_markdown, render_terminal};

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The report.json to render.
    report: PathBuf,
    /// Folder for report.md and report.html [default: the folder holding report.json].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Reads the report, writes report.md and report.html, prints the terminal view.
/// Exit 0, or 2 when the file cannot be read or written.
pub fn report_cmd(args: ReportArgs) -> ExitCode {
    match render(&args) {
        Ok(out) => {
            println!("\nreport: {}", out.join("report.md").display());
            Exit::Ok.into()
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::BadInput.into()
        }
    }
}

fn render(args: &ReportArgs) -> anyhow::Result<PathBuf> {
    let report = crate::read_report(&args.report)?;
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => args.report.parent().map(PathBuf::from).unwrap_or_default(),
    };
    let out = if out.as_os_str().is_empty() { PathBuf::from(".") } else { out };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    for (name, text) in [("report.md", render_markdown(&report)), ("report.html", render_html(&report))] {
        let path = out.join(name);
        crate::atomic::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    print!("{}", render_terminal(&report));
    Ok(out)
}
