//! `counterlab completions <shell>` and `counterlab man`: the shell completions
//! (clap_complete) and the man page (clap_mangen), both generated from the one CLI
//! definition, printed on stdout.

use crate::exit::Exit;
use std::io::Write as _;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

/// Prints the completions of `C` for the shell asked.
pub fn completions<C: clap::CommandFactory>(args: CompletionsArgs) -> ExitCode {
    let mut cmd = C::command();
    let name = cmd.get_name().to_string();
    clap_complete::generate(args.shell, &mut cmd, name, &mut std::io::stdout());
    Exit::Ok.into()
}

/// Prints the man page of `C` (roff), e.g. `counterlab man > counterlab.1`.
pub fn man<C: clap::CommandFactory>() -> ExitCode {
    let mut page = Vec::new();
    match clap_mangen::Man::new(C::command()).render(&mut page) {
        Ok(()) if std::io::stdout().write_all(&page).is_ok() => Exit::Ok.into(),
        Ok(()) => Exit::BadInput.into(),
        Err(e) => {
            eprintln!("error: cannot render the man page: {e}");
            Exit::BadInput.into()
        }
    }
}
