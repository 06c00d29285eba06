//! colibrid: the colibri daemon. Runs in the foreground; daemon(8) (or any
//! supervisor) detaches it. See colibrid(8).
//!
//! Exit status: 0 after an orderly stop (or a good `--check-config`),
//! 1 when the daemon could not start or failed while running, 2 for a bad
//! command line or configuration.

use std::process::ExitCode;

use clap::Parser;

use colibri::config::{self, DaemonArgs};
use colibri::daemon::diag::{self, Level};
use colibri::daemon::{Daemon, Settings};

fn main() -> ExitCode {
    if let Err(e) = colibri::platform::ensure_std_fds() {
        eprintln!("colibrid: cannot open /dev/null for a closed standard descriptor: {e}");
        return ExitCode::from(1);
    }
    let args = DaemonArgs::parse();
    let cfg = match config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("colibrid: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        print!("{}", config::render_effective(&cfg));
        return ExitCode::SUCCESS;
    }
    diag::set_level(Level::parse(cfg.daemon.log_level.name()).unwrap_or(Level::Info));
    let settings = Settings::from_config(&cfg);
    let reload_args = args.clone();
    let reloader: colibri::daemon::Reloader = Box::new(move || {
        config::load(&reload_args)
            .map(|c| Settings::from_config(&c))
            .map_err(|e| e.to_string())
    });
    let daemon = match Daemon::start(settings, reloader) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("colibrid: {e}");
            return ExitCode::from(1);
        }
    };
    match daemon.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("colibrid: {e}");
            ExitCode::from(1)
        }
    }
}
