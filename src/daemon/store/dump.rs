//! What `list-sessions` and `get-session` read: the sessions' metadata,
//! and a [`DumpSource`] taken at request time, which
//! `daemon::session_stream` streams out a slice at a time.

use std::fs::File;
use std::io;
use std::path::PathBuf;

use serde_json::json;

use super::{SessionMeta, SessionStore, StoreError};

/// `get-session` refuses logs larger than this. colibrid streams the reply
/// (it holds a slice, not the log), but a client reads it as one line and
/// parses it whole (`colibri session`, `client.rs` caps a reply at 256 MiB).
pub const MAX_DUMP_BYTES: u64 = 64 << 20;

/// The system prompt a log record gave its pane's start: `Some` for an
/// `attach` record (holding `None` when that start had none), `None` for
/// any other record. The last start's is the session's (`get-session`'s
/// `system_prompt`); read from the log, not kept in memory, so the
/// sessions of a long-running daemon cost nothing for their prompts.
pub fn attach_system_prompt(record: &str) -> Option<Option<String>> {
    #[derive(serde::Deserialize)]
    struct Attach {
        #[serde(default)]
        colibri: Option<String>,
        #[serde(default)]
        system_prompt: Option<String>,
    }
    // The store writes this key exactly so: any other record is passed
    // over without being parsed again.
    if !record.contains(r#""colibri":"attach""#) {
        return None;
    }
    let attach: Attach = serde_json::from_str(record).ok()?;
    (attach.colibri.as_deref() == Some("attach")).then_some(attach.system_prompt)
}

/// What a `get-session` reply is made of, taken at request time
/// ([`SessionStore::open_dump`]); `daemon::session_stream` reads it out.
#[derive(Debug)]
pub struct DumpSource {
    /// The index entry, as `get-session` shows it.
    pub session: serde_json::Value,
    /// For error messages only: the file may have been renamed since.
    pub path: PathBuf,
    /// The log as it was when asked; `None` if there was no file yet.
    pub log: Option<File>,
    /// How much of `log` the store counts as written.
    pub log_bytes: u64,
    /// The records still buffered, copied.
    pub unflushed: Vec<u8>,
    pub flush_error: Option<String>,
    pub log_replaced: u32,
}

pub(super) fn meta_json(m: &SessionMeta) -> serde_json::Value {
    json!({
        "id": m.id,
        "panes": m.panes,
        "runtime": m.runtime,
        "cwd": m.cwd,
        "created_at": m.created_at.to_rfc3339(),
        "turn_count": m.turn_count,
        "bytes": m.bytes,
        "final_state": m.final_state,
        "exit_code": m.exit_code,
        "exit_signal": m.exit_signal,
        "rotated": m.rotated,
    })
}

impl SessionStore {
    /// Sessions in creation order.
    pub fn list(&self) -> Vec<&SessionMeta> {
        self.sessions
            .iter()
            .filter(|s| !s.retired)
            .map(|s| &s.meta)
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<&SessionMeta> {
        self.by_id.get(id).map(|&i| &self.sessions[i].meta)
    }

    /// What `get-session` streams (`daemon::session_stream`), taken now:
    /// the session's metadata, the log opened (the fd keeps this content
    /// readable even if compaction or rotation renames the file, or it is
    /// deleted), the length the store counts as written (the writer may be
    /// appending the buffered records right now), and a copy of the records
    /// still buffered. That copy is bounded by the store's own cap on
    /// unwritten bytes (1.5 × `buffer_limit`, see [`SessionStore::append`]'s
    /// hard limit), so a stream never holds more than that plus a slice.
    /// Refuses logs over [`MAX_DUMP_BYTES`].
    pub fn open_dump(&self, id: &str) -> Result<DumpSource, StoreError> {
        let i = self.lookup(id)?;
        let s = &self.sessions[i];
        let flush_error = if s.pending() > 0 && (self.link.stalled || s.append_failed) {
            self.health.last_error.clone()
        } else {
            None
        };
        let log = match File::open(&s.path) {
            Ok(f) => {
                let len = f
                    .metadata()
                    .map_err(|e| StoreError::io("stat", &s.path, e))?
                    .len();
                if len > MAX_DUMP_BYTES {
                    return Err(StoreError::TooLarge {
                        id: id.to_string(),
                        bytes: len,
                        max: MAX_DUMP_BYTES,
                    });
                }
                Some(f)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io("open", &s.path, e)),
        };
        Ok(DumpSource {
            session: meta_json(&s.meta),
            path: s.path.clone(),
            log,
            log_bytes: s.meta.bytes.min(MAX_DUMP_BYTES),
            unflushed: s.buf[s.head..].to_vec(),
            flush_error,
            log_replaced: s.replaced,
        })
    }
}
