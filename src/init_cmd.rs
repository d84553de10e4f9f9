//! `counterlab init [DIR]`: writes a commented, working scenario (`counterlab.toml`) and
//! the strategy file it runs (`strategies/my-counter.toml`) beside two built-ins, never
//! over an existing file, then says what to run next.

use crate::exit::Exit;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct InitArgs {
    /// Folder to write into (made when missing) [default: the current folder].
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// The scenario's file name.
pub const SCENARIO: &str = "counterlab.toml";

/// What init writes: each path under DIR, its text and what it is.
const FILES: [(&str, &str, &str); 2] = [
    (SCENARIO, include_str!("init/counterlab.toml"), "the scenario: my-counter beside two built-ins"),
    (
        "strategies/my-counter.toml",
        include_str!("init/strategies/my-counter.toml"),
        "your strategy as SQL steps: change it into your design",
    ),
];

/// A path as the user would type it: `counterlab.toml` rather than `./counterlab.toml`.
fn shown(path: &Path) -> String {
    path.strip_prefix(".").unwrap_or(path).display().to_string()
}

pub fn init(args: InitArgs) -> ExitCode {
    match write_all(&args.dir) {
        Ok(()) => {
            let scenario = shown(&args.dir.join(SCENARIO));
            println!("next:");
            println!("  counterlab validate {scenario}   # parse, then prepare every step on the servers (no load)");
            println!("  counterlab run {scenario}        # the load, the checks, the report");
            Exit::Ok.into()
        }
        Err(e) => {
            eprintln!("error: {e}");
            Exit::BadInput.into()
        }
    }
}

/// Refuses before writing anything when a file is there already; then writes each file
/// new (`create_new`: one made meanwhile is refused too) and says so.
fn write_all(dir: &Path) -> Result<(), String> {
    let paths: Vec<PathBuf> = FILES.iter().map(|(name, _, _)| dir.join(name)).collect();
    if let Some(p) = paths.iter().find(|p| p.exists() || p.is_symlink()) {
        return Err(format!("{} exists: init writes new files only (move it away or give another DIR)", shown(p)));
    }
    for (path, (_, text, what)) in paths.iter().zip(FILES) {
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", shown(parent)))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| format!("cannot write {}: {e}", shown(path)))?;
        f.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", shown(path)))?;
        println!("wrote {} ({what})", shown(path));
    }
    Ok(())
}
