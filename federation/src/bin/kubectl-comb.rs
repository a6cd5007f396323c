//! `kubectl comb ...`: kubectl runs any `kubectl-<name>` on PATH as the plugin `<name>`, so
//! this second name of the `comb` binary makes every command a kubectl plugin
//! (`cargo install --path federation` installs both).

use std::process::ExitCode;

fn main() -> ExitCode {
    comb_federation::cli::main()
}
