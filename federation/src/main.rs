use std::process::ExitCode;

fn main() -> ExitCode {
    comb_federation::cli::main()
}
