//! The daemon's own diagnostics on stderr, filtered by level.
//!
//! These are for whoever runs colibrid (daemon(8) sends them to syslog);
//! operator alerts about agents go through `alert` instead. The loop never
//! writes them itself: once [`start_writer`] has run, each line is handed
//! to the `colibrid-stderr` thread through a queue of [`QUEUE`] lines, and
//! a line that finds the queue full is dropped and counted (the next line
//! written says how many). A stderr that is read slowly, or not at all (a
//! stalled pipe under daemon(8)), so holds that thread, never the loop.
//! Each line is cut at [`MAX_LINE`] bytes (an `activity` message of a
//! megabyte is quoted in part), and a failed write is dropped, never a
//! panic (`eprintln!` panics when stderr is gone).

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

/// The same levels `--log-level` and `[daemon] log_level` name.
pub use crate::config::LogLevel as Level;

/// The longest diagnostic line written, in bytes (the rest is cut).
pub const MAX_LINE: usize = 2048;
/// Lines waiting for the stderr thread at most (2 MiB at the longest).
pub const QUEUE: usize = 1024;

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);
/// Lines dropped since the last one written.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The stderr thread's queue, once started.
static SINK: Mutex<Option<SyncSender<String>>> = Mutex::new(None);
/// The stderr thread and its "done" signal, for [`finish`].
static WRITER: Mutex<Option<(Receiver<()>, JoinHandle<()>)>> = Mutex::new(None);

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
    let sink = SINK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(tx) = sink.as_ref() else {
        drop(sink);
        write_line(&line);
        return;
    };
    match tx.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Disconnected(line)) => {
            drop(sink);
            write_line(&line);
        }
    }
}

/// Starts the `colibrid-stderr` thread: from now on no caller writes to
/// stderr itself.
pub fn start_writer() -> std::io::Result<()> {
    let (tx, rx) = mpsc::sync_channel::<String>(QUEUE);
    let (done_tx, done) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("colibrid-stderr".into())
        .spawn(move || {
            while let Ok(line) = rx.recv() {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    write_line(&format!(
                        "colibrid: warn: {dropped} diagnostic line(s) dropped: stderr was not read fast enough\n"
                    ));
                }
                write_line(&line);
            }
            let _ = done_tx.send(());
        })?;
    *SINK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
    *WRITER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((done, thread));
    Ok(())
}

/// Writes what is queued and stops the thread, waiting at most `wait`
/// (a stderr nobody reads would hold it for ever). Lines logged after it
/// are written directly. False if the thread did not finish in time: it
/// holds stderr, and a write now could wait for ever too.
pub fn finish(wait: Duration) -> bool {
    SINK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let writer = WRITER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some((done, thread)) = writer else {
        return true;
    };
    if done.recv_timeout(wait).is_err() {
        return false;
    }
    let _ = thread.join();
    true
}

fn write_line(line: &str) {
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `colibrid: LEVEL: TEXT\n`, cut at [`MAX_LINE`] on a character boundary.
fn line(level: Level, args: std::fmt::Arguments<'_>) -> String {
    // Messages quote agents (names, activity texts): what a terminal would
    // act on is shown escaped.
    let message = args.to_string();
    let message = crate::terminal_text::escape_controls(&message);
    let mut line = format!("colibrid: {}: {}", level.name(), message);
    if line.len() > MAX_LINE {
        let cut = line.len() - MAX_LINE;
        let mut end = MAX_LINE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        let cut = cut + (MAX_LINE - end);
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
