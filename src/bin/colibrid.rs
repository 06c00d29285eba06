//! colibrid: the colibri daemon. Runs in the foreground; daemon(8) (or any
//! supervisor) detaches it. See colibrid(8).
//!
//! Exit status: 0 after an orderly stop (or a good `--check-config`),
//! 1 when the daemon could not start or failed while running, 2 for a bad
//! command line or configuration (every error found is printed).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use colibri::config::{self, Config, ConfigError, DaemonArgs};
use colibri::daemon::{diag, Daemon, Reload, Reloader, Settings};

fn main() -> ExitCode {
    if let Err(e) = colibri::platform::ensure_std_fds() {
        eprintln!("colibrid: cannot open /dev/null for a closed standard descriptor: {e}");
        return ExitCode::from(1);
    }
    let args = DaemonArgs::parse();
    let cfg = match config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            for one in e.each() {
                eprintln!("colibrid: {one}");
            }
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        print!("{}", config::render_effective(&cfg));
        return ExitCode::SUCCESS;
    }
    diag::set_level(cfg.daemon.log_level);
    // A panic of the loop still gets the lines queued before it written
    // (they say what led to it), then goes on as a panic.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(args, cfg)));
    let drained = diag::finish(STDERR_DRAIN);
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            // Unless stderr is stuck, where this write would wait for ever.
            if drained {
                let _ = writeln!(std::io::stderr(), "colibrid: {e}");
            }
            ExitCode::from(1)
        }
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// How long colibrid waits, when it exits, for its queued diagnostics.
const STDERR_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

fn run(args: DaemonArgs, cfg: Config) -> Result<(), String> {
    let settings = Settings::from_config(&cfg);
    let daemon = Daemon::start(settings, reloader(args, cfg)).map_err(|e| e.to_string())?;
    // The loop must never wait on a stderr pipe that is read slowly. Started
    // after the daemon has taken its signals (they are blocked on Linux and
    // a thread inherits the mask): a thread started before would take a
    // SIGTERM with its default action.
    if let Err(e) = diag::start_writer() {
        diag::log(
            diag::Level::Warn,
            format_args!("cannot start the stderr thread (writing diagnostics directly): {e}"),
        );
    }
    daemon.run().map_err(|e| e.to_string())
}

/// Reads the configuration again for SIGHUP and plans the reload against
/// the configuration colibrid started with and the one loaded last. The log
/// level is applied here; the loop applies the rest of the plan.
fn reloader(args: DaemonArgs, started: Config) -> Reloader {
    let mut previous = started.clone();
    Box::new(move || {
        let new = config::load(&args).map_err(|e| one_line(&e))?;
        let plan = config::plan(&started, &previous, &new);
        diag::set_level(new.daemon.log_level);
        let settings = Settings::from_config(&new);
        previous = new;
        Ok(Reload { settings, plan })
    })
}

fn one_line(e: &ConfigError) -> String {
    e.each()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
