//! The daemon's own diagnostics on stderr, filtered by level.
//!
//! These are for whoever runs colibrid (daemon(8) sends them to syslog);
//! operator alerts about agents go through `alert` instead. A plain
//! `eprintln!` is enough: stderr is unbuffered and lines are short.

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            _ => None,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

pub fn log(level: Level, args: std::fmt::Arguments<'_>) {
    if enabled(level) {
        eprintln!("colibrid: {}: {}", level.tag(), args);
    }
}

macro_rules! log_error { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Error, format_args!($($t)*)) } }
macro_rules! log_warn { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Warn, format_args!($($t)*)) } }
macro_rules! log_info { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Info, format_args!($($t)*)) } }
macro_rules! log_debug { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Debug, format_args!($($t)*)) } }
pub(crate) use {log_debug, log_error, log_info, log_warn};
