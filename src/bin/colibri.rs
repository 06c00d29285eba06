//! `colibri`, the operator CLI. Everything lives in `colibri::cli`; this
//! file only hands the process over to it.

fn main() -> std::process::ExitCode {
    colibri::cli::main()
}
