//! colibrid: the single-threaded event loop and everything it owns.
//!
//! Entry point: [`Daemon::start`] then [`Daemon::run`] (see
//! `src/bin/colibrid.rs`). Code map: `event_loop` (the loop, PTY reads,
//! exits, timers, shutdown), `commands` (socket commands, recovery),
//! `conn` (one client), `source` (the token slab), `panes` (the one
//! owner of per-pane state), `agent` (per-pane process state), `store` (session logs), `alert` (syslog), `settings`.

pub mod agent;
pub mod alert;
pub mod bus;
pub(crate) mod commands;
pub mod conn;
pub mod diag;
pub mod event_loop;
pub mod panes;
pub mod settings;
pub mod source;
pub mod store;
pub mod timers;

pub use event_loop::{now, Daemon, DaemonError};
pub use settings::Settings;

/// Re-reads the configuration for SIGHUP; set by the binary at start.
pub type Reloader = Box<dyn Fn() -> Result<Settings, String>>;
