//! The daemon's own diagnostics on stderr, filtered by level.
//!
//! These are for whoever runs colibrid (daemon(8) sends them to syslog);
//! operator alerts about agents go through `alert` instead. They are
//! written on the event loop, so each line is cut at [`MAX_LINE`] bytes: a
//! line quoting what a client or an agent sent (an `activity` message of a
//! megabyte) would otherwise hold the loop for as long as the reader of a
//! stderr pipe takes to drain it. A failed write is dropped, never a panic
//! (`eprintln!` panics when stderr is gone).

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The same levels `--log-level` and `[daemon] log_level` name.
pub use crate::config::LogLevel as Level;

/// The longest diagnostic line written, in bytes (the rest is cut).
pub const MAX_LINE: usize = 2048;

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

pub fn log(level: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = line(level, args);
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `colibrid: LEVEL: TEXT\n`, cut at [`MAX_LINE`] on a character boundary.
fn line(level: Level, args: std::fmt::Arguments<'_>) -> String {
    let mut line = format!("colibrid: {}: {}", level.name(), args);
    if line.len() > MAX_LINE {
        let cut = line.len() - MAX_LINE;
        let mut end = MAX_LINE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str(&format!(" … ({cut} bytes cut)"));
    }
    line.push('\n');
    line
}

macro_rules! log_error { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Error, format_args!($($t)*)) } }
macro_rules! log_warn { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Warn, format_args!($($t)*)) } }
macro_rules! log_info { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Info, format_args!($($t)*)) } }
macro_rules! log_debug { ($($t:tt)*) => { $crate::daemon::diag::log($crate::daemon::diag::Level::Debug, format_args!($($t)*)) } }
pub(crate) use {log_debug, log_error, log_info, log_warn};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_on_a_character_boundary_and_says_so() {
        let text = "é".repeat(MAX_LINE);
        let l = line(Level::Info, format_args!("{text}"));
        assert!(l.len() < MAX_LINE + 40, "{}", l.len());
        assert!(l.ends_with(" bytes cut)\n"), "{l}");
        assert!(l.starts_with("colibrid: info: éé"));
        let short = line(Level::Warn, format_args!("disk full"));
        assert_eq!(short, "colibrid: warn: disk full\n");
    }
}
