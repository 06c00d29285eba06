//! The watch connection to colibrid, on a thread of its own: the socket
//! client blocks, and a blocked read must not hold up the runtime that
//! awaits NATS acks.

use std::path::Path;
use std::time::Duration;

use colibri::client::Client;
use serde_json::Value;
use tokio::sync::mpsc;

/// Where the host's stream left off in JetStream: the `journal_id` and
/// `seq` of its last stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    pub journal_id: String,
    pub seq: u64,
}

/// What the watch thread hands over, in order: the reply first, then each
/// event line; an error ends it.
#[derive(Debug)]
pub enum Item {
    Started {
        journal_id: String,
        /// colibrid's run (`epoch` of the watch reply).
        epoch: String,
        since: u64,
    },
    Event(Value),
    Failed(String),
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Events waiting for their ack; past it the thread stops reading, and
/// colibrid holds the rest for it (or drops the watcher, and the next
/// resync replays from the journal).
const QUEUE: usize = 256;

/// Starts following colibrid after `resume`. A `resume` of another
/// journal (a reset state dir) starts at the current journal's beginning.
pub fn follow(socket: &Path, resume: Option<Resume>) -> mpsc::Receiver<Item> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let socket = socket.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("colibri-bridge-watch".into())
        .spawn({
            let tx = tx.clone();
            move || {
                if let Err(msg) = read_events(&socket, resume, &tx) {
                    let _ = tx.blocking_send(Item::Failed(msg));
                }
            }
        });
    if let Err(e) = spawned {
        let _ = tx.try_send(Item::Failed(format!("cannot start the watch thread: {e}")));
    }
    rx
}

fn read_events(
    socket: &Path,
    resume: Option<Resume>,
    tx: &mpsc::Sender<Item>,
) -> Result<(), String> {
    let (mut client, head, since) = subscribe(socket, resume)?;
    if tx
        .blocking_send(Item::Started {
            journal_id: head.journal_id,
            epoch: head.epoch,
            since,
        })
        .is_err()
    {
        return Ok(());
    }
    for line in client.stream() {
        let ev = line.map_err(|e| format!("watch: {e}"))?;
        if tx.blocking_send(Item::Event(ev)).is_err() {
            // The publisher resynced or quit: this watch is over.
            return Ok(());
        }
    }
    Err("colibrid closed the watch connection".into())
}

/// Sends `watch since`; when the journal is not the one `resume` came
/// from, watches again from its beginning (seq 0).
fn subscribe(socket: &Path, resume: Option<Resume>) -> Result<(Client, Head, u64), String> {
    let since = resume.as_ref().map_or(0, |r| r.seq);
    let (client, head) = watch_since(socket, since)?;
    let journal_id = head.journal_id.clone();
    match resume {
        Some(r) if r.journal_id != journal_id => {
            eprintln!(
                "colibri-bridge: colibrid's journal is {journal_id}, the stream's last message \
                 came from {}: publishing this journal from its start",
                r.journal_id
            );
            let (client, head) = watch_since(socket, 0)?;
            Ok((client, head, 0))
        }
        _ => Ok((client, head, since)),
    }
}

/// What the `watch` reply says of the journal and the run.
struct Head {
    journal_id: String,
    epoch: String,
}

fn watch_since(socket: &Path, since: u64) -> Result<(Client, Head), String> {
    let mut client = Client::connect(socket, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let reply = client
        .watch_from(&[], Some(since))
        .map_err(|e| format!("watch: {e}"))?;
    let journal_id = reply["journal_id"]
        .as_str()
        .ok_or("colibrid's watch reply has no journal_id (a colibrid older than the bridge)")?
        .to_string();
    let epoch = reply["epoch"].as_str().unwrap_or_default().to_string();
    Ok((client, Head { journal_id, epoch }))
}
