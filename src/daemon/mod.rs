//! colibrid: the single-threaded event loop and everything it owns.
//!
//! Entry point: [`Daemon::start`] then [`Daemon::run`] (see
//! `src/bin/colibrid.rs`). Code map (docs/ARCHITECTURE.md has the whole
//! picture): `event_loop` (the loop and its dispatch), `server` (listeners,
//! connections), `proc` (spawning, PTY reads and writes, exits), `life`
//! (applies `core::lifecycle` and the per-pane deadlines of `timers`),
//! `commands/` (the command table and one file per group), `bus` (the one
//! way out for events: seq, watchers, alerts), `panes` (the one owner of
//! per-pane state), `agent` (per-pane process state), `views` (snapshots,
//! status), `recovery`, `conn` (one client), `source` (the token slab),
//! `store` (session logs), `compaction` (`compact-session`'s deferred
//! replies), `alert` (syslog), `settings`, `publish` (the bus's entry),
//! `signals`, `reload`, `shutdown`, `hostops` (declared host operations
//! run for `hostop`), `heartbeat` (the agents' heartbeat prompts),
//! `dispatch` (the orchestrator hands pending tasks to idle agents),
//! `escalation` (stuck agents climb the escalation ladder), `plan_source`
//! (a plan file's checkbox items as tasks). Owners
//! (the types `Daemon` stores)
//! never name `Daemon`; `tests/tidy.rs` keeps it so.

pub(crate) mod activity;
pub(crate) mod agent;
pub(crate) mod alert;
pub(crate) mod approvals;
pub(crate) mod attach;
pub(crate) mod bus;
mod classify;
pub(crate) mod commands;
pub(crate) mod compaction;
pub(crate) mod conn;
pub(crate) mod control_plane;
pub mod diag;
mod dispatch;
mod escalation;
pub(crate) mod event_loop;
mod fleet;
mod govern;
mod heartbeat;
pub(crate) mod hostops;
pub(crate) mod journal;
mod life;
mod listener;
mod log_flow;
pub(crate) mod notify;
pub(crate) mod pane_text;
pub(crate) mod panes;
mod plan_source;
mod proc;
mod publish;
pub(crate) mod recovery;
mod reload;
mod runners;
mod sched;
mod server;
mod session_stream;
pub(crate) mod settings;
mod shutdown;
mod signals;
mod snapshot_stream;
pub(crate) mod source;
pub(crate) mod store;
pub(crate) mod supervise;
pub(crate) mod timers;
pub(crate) mod views;

pub use event_loop::{now, Daemon, DaemonError};
pub use settings::{Reload, Settings};
// What colibrid, the integration tests and the benches use; the rest of
// the daemon is the crate's own, so the compiler reports its dead code.
/// The session log's write-then-read oracle, for `fuzz/` (built with
/// `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub use store::check_log_roundtrip;
pub use store::{LineRecord, SessionStore, StoreConfig, MAX_OPEN_LOGS};
pub use supervise::{write_records, RECORDS_FILE};

/// Re-reads the configuration for SIGHUP; set by the binary at start.
pub type Reloader = Box<dyn FnMut() -> Result<Reload, String>>;
