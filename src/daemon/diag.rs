//! The daemon's own diagnostics on stderr, filtered by level.
//!
//! These are for whoever runs colibrid (daemon(8) sends them to syslog);
//! operator alerts about agents go through `alert` instead. A plain
//! `eprintln!` is enough: stderr is unbuffered and lines are short.

use std::sync::atomic::{AtomicU8, Ordering};

/// The same levels `--log-level` and `[daemon] log_level` name.
pub use crate::config::LogLevel as Level;

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

pub fn log(level: Level, args: std::fmt::Arguments<'_>) {
    if enabled(level) {
        eprintln!("colibrid: {}: {}", level.name(), args);
    }
}

macro_rules! log_error { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Error, format_args!($($t)*)) } }
macro_rules! log_warn { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Warn, format_args!($($t)*)) } }
macro_rules! log_info { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Info, format_args!($($t)*)) } }
macro_rules! log_debug { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Debug, format_args!($($t)*)) } }
pub(crate) use {log_debug, log_error, log_info, log_warn};
