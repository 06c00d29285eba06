//! `colibri-bridge`: one host's colibrid watch stream into NATS JetStream,
//! exactly once per host `seq` (docs/FLEET.md).
//!
//! A satellite, never part of colibrid: it reads `watch` over the Unix
//! socket like any client and is the only colibri process that links a NATS
//! client. The stream is the cursor: at start, and after any NATS error,
//! the bridge asks JetStream for the host's last stored message and
//! resumes `watch since` after it, so it keeps no cursor file and a
//! restart neither loses nor repeats an event. `Nats-Msg-Id` makes a
//! re-publish inside the duplicate window a no-op.

mod args;
mod cmd;
mod fleet;
mod gateway;
mod hosts;
mod nats;
mod panes;
mod replies;
mod watch;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cmd = match args::parse(std::env::args().skip(1)) {
        Ok(cmd) => cmd,
        Err(msg) => {
            eprintln!("colibri-bridge: {msg}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("colibri-bridge: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cmd {
        args::Cmd::Help => {
            println!("{}", args::USAGE);
            Ok(())
        }
        args::Cmd::Init(opts) => runtime.block_on(nats::init(&opts)),
        args::Cmd::Run(opts) => runtime.block_on(nats::run(&opts)),
        args::Cmd::Gateway(opts) => runtime.block_on(gateway::run(&opts)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("colibri-bridge: {msg}");
            ExitCode::FAILURE
        }
    }
}
