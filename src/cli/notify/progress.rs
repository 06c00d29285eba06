//! How far every sink got, and the cursor file that says so.
//!
//! Each sink delivers on its own worker, so events finish out of step
//! across sinks. The cursor is the newest `seq` that no sink still owes:
//! a sink with nothing queued owes nothing, one with events queued owes
//! everything after the last it finished. A restart resumes `watch` from
//! there, so whatever a sink had not finished is sent again (at least
//! once), and what every sink finished is not.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

#[derive(Clone, Copy, Default)]
struct SinkProgress {
    /// The last event given to the sink's queue.
    queued: u64,
    /// The sink owes nothing up to here: the last event it finished
    /// (delivered, refused or given up), or the stream's position when it
    /// was last given one while owing nothing.
    done: u64,
}

struct State {
    /// The last event the stream handed over.
    seen: u64,
    /// What the cursor file holds.
    written: Option<u64>,
    sinks: Vec<SinkProgress>,
}

impl State {
    fn safe(&self) -> u64 {
        self.sinks
            .iter()
            .map(|s| {
                if s.done >= s.queued {
                    self.seen
                } else {
                    s.done
                }
            })
            .min()
            .unwrap_or(self.seen)
    }
}

pub(super) struct Progress {
    path: PathBuf,
    state: Mutex<State>,
}

impl Progress {
    pub(super) fn new(path: PathBuf, sinks: usize) -> Progress {
        Progress {
            path,
            state: Mutex::new(State {
                seen: 0,
                written: None,
                sinks: vec![SinkProgress::default(); sinks],
            }),
        }
    }

    /// The cursor to resume from: the file's, once; after that what this
    /// process knows (a reconnect must not skip what a sink still owes, nor
    /// replay what every sink finished).
    pub(super) fn resume_from(&self) -> Result<Option<u64>, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.written.is_none() {
            state.written = std::fs::read_to_string(&self.path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            if let Some(seq) = state.written {
                state.seen = seq;
            }
        }
        Ok(state.written.map(|_| state.safe()))
    }

    /// The stream handed over event `seq`, queued for the sinks `queued`.
    pub(super) fn record(&self, seq: u64, queued: &[usize]) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let before = state.seen;
        for &i in queued {
            if let Some(s) = state.sinks.get_mut(i) {
                // A sink that owed nothing had finished all it was given
                // up to the events before this one.
                if s.done >= s.queued {
                    s.done = s.done.max(before);
                }
                s.queued = s.queued.max(seq);
            }
        }
        state.seen = state.seen.max(seq);
        self.write(&mut state)
    }

    /// Sink `sink` finished event `seq` (its worker's call).
    pub(super) fn finished(&self, sink: usize, seq: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = state.sinks.get_mut(sink) {
            s.done = s.done.max(seq);
        }
        if let Err(e) = self.write(&mut state) {
            eprintln!("colibri notify: {e}");
        }
    }

    /// Written whole (a temp file renamed over it), so a crash leaves the
    /// old cursor or the new one; only when it moved.
    fn write(&self, state: &mut State) -> Result<(), String> {
        let safe = state.safe();
        if state.written == Some(safe) {
            return Ok(());
        }
        let tmp = self.path.with_extension("new");
        std::fs::write(&tmp, format!("{safe}\n"))
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| format!("cursor {}: {e}", self.path.display()))?;
        state.written = Some(safe);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(dir: &tempfile::TempDir) -> (Progress, PathBuf) {
        let path = dir.path().join("cursor");
        (Progress::new(path.clone(), 2), path)
    }

    fn cursor(path: &std::path::Path) -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn the_cursor_waits_for_the_slowest_sink_and_moves_when_it_finishes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (p, path) = at(&dir);
        assert_eq!(p.resume_from(), Ok(None), "no cursor yet: live events");
        p.record(10, &[]).expect("write");
        assert_eq!(cursor(&path), 10);
        p.record(11, &[0, 1]).expect("write");
        assert_eq!(cursor(&path), 10, "both sinks owe 11");
        p.finished(0, 11);
        assert_eq!(cursor(&path), 10, "sink 1 still owes 11");
        p.record(12, &[0]).expect("write");
        p.finished(0, 12);
        assert_eq!(cursor(&path), 10, "sink 1 still owes 11");
        p.finished(1, 11);
        assert_eq!(cursor(&path), 12, "nobody owes anything");
        p.record(13, &[]).expect("write");
        assert_eq!(cursor(&path), 13, "an event no sink wanted");
    }

    #[test]
    fn a_restart_resumes_from_the_file_and_a_reconnect_from_what_is_owed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (p, path) = at(&dir);
        std::fs::write(&path, "40\n").expect("cursor");
        assert_eq!(p.resume_from(), Ok(Some(40)));
        p.record(41, &[1]).expect("write");
        p.record(42, &[]).expect("write");
        assert_eq!(p.resume_from(), Ok(Some(40)), "sink 1 owes 41");
        p.finished(1, 41);
        assert_eq!(p.resume_from(), Ok(Some(42)));
    }
}
