//! `colibri notify`: tells people when an agent needs them, through the
//! `[[notify]]` sinks of colibri.toml (exec, webhook, ntfy).
//!
//! A satellite process, never part of colibrid's loop (all network I/O
//! happens here): it reads the watch stream from a cursor persisted after
//! each event is handled, so a restart of either side resumes where it
//! stopped (`watch` with `since`): delivery is at least once. The first run
//! (no cursor file) starts with live events, not the journal's history.
//!
//! Events that notify: a `state` event whose new state is listed in a
//! sink's `states`, an event whose name is listed there (`stalled`,
//! `exited`, `restarts_exhausted`, `gap`), and approval events
//! (`approval_*`) unless `approvals = false`. Sub-agents never notify: the
//! core keeps their observations off the pane's state, so they make no
//! event. Each sink then applies its name and runtime filters, drops a
//! repeat of the same pane, event and reason within `dedupe` (a pane
//! turning blocked and the approval it opens are one event), and holds
//! to `rate_per_minute` (the rest is dropped and said on stderr).

mod deliver;
mod progress;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cli::CliError;
use crate::client::{resolve_socket, Client};
use crate::config::notify::{load_sinks, Sink, NOTIFY_PANE};
use deliver::{Job, Worker};
use progress::Progress;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect back-off after the daemon went away.
const RECONNECT_MIN: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// What is known about a pane, for filters and messages.
#[derive(Clone, Debug, Default)]
struct PaneInfo {
    name: Option<String>,
    runtime: Option<String>,
}

/// One sink: what it admits (filters, de-duplication, rate) is decided
/// here, on the stream's thread; its deliveries run on its own worker.
struct SinkState {
    sink: Sink,
    recent: HashMap<String, Instant>,
    sent: VecDeque<Instant>,
    worker: Worker,
}

pub struct Notifier {
    sinks: Vec<SinkState>,
    panes: BTreeMap<String, PaneInfo>,
    progress: Arc<Progress>,
}

pub fn run(socket: Option<&Path>, config: &Path, cursor: &Path) -> Result<u8, CliError> {
    let sinks = load_sinks(config).map_err(CliError::Runtime)?;
    if sinks.is_empty() {
        return Err(CliError::Runtime(format!(
            "{}: no [[notify]] sinks",
            config.display()
        )));
    }
    let mut n = Notifier::new(sinks, cursor.to_path_buf()).map_err(CliError::Runtime)?;
    let socket = resolve_socket(socket);
    let mut backoff = RECONNECT_MIN;
    loop {
        match n.follow(&socket) {
            Ok(()) => backoff = RECONNECT_MIN,
            Err(e) => {
                eprintln!("colibri notify: {e}; reconnecting in {backoff:?}");
            }
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

impl Notifier {
    fn new(sinks: Vec<Sink>, cursor_path: PathBuf) -> Result<Notifier, String> {
        let progress = Arc::new(Progress::new(cursor_path, sinks.len()));
        let mut states = Vec::with_capacity(sinks.len());
        for (index, sink) in sinks.into_iter().enumerate() {
            let worker = Worker::start(index, sink.clone(), Arc::clone(&progress))
                .map_err(|e| format!("{}: cannot start its worker: {e}", sink.label))?;
            states.push(SinkState {
                sink,
                recent: HashMap::new(),
                sent: VecDeque::new(),
                worker,
            });
        }
        Ok(Notifier {
            sinks: states,
            panes: BTreeMap::new(),
            progress,
        })
    }

    /// One connection's life: learn the panes, resume the stream, handle
    /// each event. The cursor moves as the sinks finish (`Progress`).
    /// Returns when the stream ends.
    fn follow(&mut self, socket: &Path) -> Result<(), String> {
        let mut c = Client::connect(socket, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
        let snap = c
            .call(&crate::protocol::request::snapshot("v2"))
            .map_err(|e| e.to_string())?;
        self.learn_snapshot(&snap);
        let since = self.progress.resume_from()?;
        let ack = c.watch_from(&[], since).map_err(|e| e.to_string())?;
        if since.is_none() {
            if let Some(seq) = ack["seq"].as_u64() {
                self.progress.record(seq, &[])?;
            }
        }
        for item in c.stream() {
            let ev = item.map_err(|e| e.to_string())?;
            self.handle(&ev)?;
        }
        Err("the daemon closed the watch stream".into())
    }

    fn learn_snapshot(&mut self, snap: &Value) {
        let Some(panes) = snap["panes"].as_array() else {
            return;
        };
        for p in panes {
            let Some(id) = p["id"].as_str() else { continue };
            self.panes.insert(
                id.to_string(),
                PaneInfo {
                    name: p["name"].as_str().map(str::to_string),
                    runtime: p["runtime"].as_str().map(str::to_string),
                },
            );
        }
    }

    /// Learns from an event, and queues it for every sink that wants it.
    /// A sink whose queue is full loses the event, said on stderr: it never
    /// holds the stream or the other sinks.
    pub fn handle(&mut self, ev: &Value) -> Result<(), String> {
        let event = ev["event"].as_str().unwrap_or_default().to_string();
        let pane = ev["pane"].as_str().unwrap_or_default().to_string();
        if event == "attached" {
            // The runtime the spawn named; else `agent`, the executable's
            // basename, only when it is a runtime's own name (`claude`,
            // `pi`): `colibri` or `node` running a harness is none, rather
            // than one a `runtimes` filter would misread.
            let runtime = ev["runtime"].as_str().map(str::to_string).or_else(|| {
                ev["agent"]
                    .as_str()
                    .and_then(crate::core::taxonomy::Runtime::parse)
                    .map(|r| r.as_str().to_string())
            });
            self.panes.insert(
                pane.clone(),
                PaneInfo {
                    name: ev["name"].as_str().map(str::to_string),
                    runtime,
                },
            );
        }
        if event == "runtime" {
            if let (Some(info), Some(rt)) = (self.panes.get_mut(&pane), ev["runtime"].as_str()) {
                info.runtime = Some(rt.to_string());
            }
        }
        let seq = ev["seq"].as_u64();
        let info = self.panes.get(&pane).cloned().unwrap_or_default();
        if info.name.as_deref() == Some(NOTIFY_PANE) {
            return seq.map_or(Ok(()), |seq| self.progress.record(seq, &[]));
        }
        let mut payload = ev.clone();
        if let Some(obj) = payload.as_object_mut() {
            if let Some(n) = &info.name {
                obj.insert("name".into(), json!(n));
            }
            if let Some(r) = &info.runtime {
                obj.insert("runtime".into(), json!(r));
            }
        }
        // The words a person reads, for webhook and exec sinks too (ntfy
        // sends them as its title and message).
        let (title, body) = message(&payload);
        if let Some(obj) = payload.as_object_mut() {
            obj.insert("notice".into(), json!({"title": title, "body": body}));
        }
        let now = Instant::now();
        let mut queued = Vec::new();
        for i in 0..self.sinks.len() {
            if !self.admit(i, ev, &info, now) {
                continue;
            }
            let job = Job {
                seq: seq.unwrap_or(0),
                payload: payload.clone(),
                arrived: now,
            };
            let s = &self.sinks[i];
            match s.worker.offer(job) {
                Ok(()) => queued.push(i),
                Err(capacity) => eprintln!(
                    "colibri notify: {}: {capacity} events wait already; event {} dropped",
                    s.sink.label, ev["seq"]
                ),
            }
        }
        match seq {
            Some(seq) => self.progress.record(seq, &queued),
            None => Ok(()),
        }
    }

    /// Filters, de-duplication and the rate limit of sink `i`.
    fn admit(&mut self, i: usize, ev: &Value, info: &PaneInfo, now: Instant) -> bool {
        let s = &mut self.sinks[i];
        let event = ev["event"].as_str().unwrap_or_default();
        // What colibri did on purpose (a stop, a restart, an orderly
        // shutdown) needs nobody: its exit and the approvals it closed.
        let planned = (event == "exited" && ev["planned"] == json!(true))
            || (event == "approval_expired" && ev["reason"] == json!("stopped"));
        if planned {
            return false;
        }
        let wanted = if event == "state" {
            let to = ev["to"].as_str().unwrap_or_default();
            s.sink.states.iter().any(|x| x == to)
        } else if event == "verdict" {
            // `guard`, `loop`, `budget`: that policy's verdicts; `verdict`:
            // every policy's.
            let policy = ev["verdict"]["policy"].as_str().unwrap_or_default();
            s.sink.states.iter().any(|x| x == "verdict" || x == policy)
        } else if event.starts_with("approval") {
            s.sink.approvals
        } else {
            s.sink.states.iter().any(|x| x == event)
        };
        if !wanted {
            return false;
        }
        if !s.sink.names.is_empty() && !info.name.as_ref().is_some_and(|n| s.sink.names.contains(n))
        {
            return false;
        }
        if !s.sink.runtimes.is_empty()
            && !info
                .runtime
                .as_ref()
                .is_some_and(|r| s.sink.runtimes.contains(r))
        {
            return false;
        }
        // A pane turning blocked and the approval it opens are one moment for
        // a human: whichever arrives first is told, the other is a repeat.
        let needs_human = (event == "state" && ev["to"] == "blocked") || event == "approval_opened";
        let key = if needs_human {
            // The blocked reason is the harness's question (the approval's
            // title, else its question), so both events name it alike.
            let approval = &ev["approval"];
            let what = ev["reason"]
                .as_str()
                .or_else(|| approval["title"].as_str())
                .or_else(|| approval["question"].as_str())
                .unwrap_or_default();
            format!(
                "{}\u{1f}needs_human\u{1f}{what}",
                ev["pane"].as_str().unwrap_or_default()
            )
        } else {
            // A verdict's own reason and rule: two policies' verdicts on
            // one pane are two things to tell.
            let v = &ev["verdict"];
            format!(
                "{}\u{1f}{event}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
                ev["pane"].as_str().unwrap_or_default(),
                ev["to"].as_str().unwrap_or_default(),
                ev["reason"].as_str().unwrap_or_default(),
                ev["id"].as_str().unwrap_or_default(),
                v["policy"].as_str().unwrap_or_default(),
                v["rule"].as_str().unwrap_or_default(),
                v["action"].as_str().unwrap_or_default(),
            )
        };
        let window = s.sink.dedupe;
        s.recent.retain(|_, t| now.duration_since(*t) < window);
        if s.recent.contains_key(&key) {
            return false;
        }
        while s
            .sent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            s.sent.pop_front();
        }
        if s.sent.len() >= s.sink.rate_per_minute as usize {
            eprintln!(
                "colibri notify: {}: rate limit ({}/min) reached; event {} dropped",
                s.sink.label, s.sink.rate_per_minute, ev["seq"]
            );
            return false;
        }
        s.recent.insert(key, now);
        s.sent.push_back(now);
        true
    }

    /// Waits for every queued event and every command still running, and
    /// stops the sinks' workers (at exit and in tests).
    pub fn settle(&mut self) {
        for s in &mut self.sinks {
            s.worker.finish();
        }
    }
}

/// A human title and body for push messages.
fn message(ev: &Value) -> (String, String) {
    let who = ev["name"]
        .as_str()
        .or_else(|| ev["pane"].as_str())
        .unwrap_or("colibrid")
        .to_string();
    let event = ev["event"].as_str().unwrap_or("event");
    if event == "verdict" {
        return verdict_message(&who, &ev["verdict"]);
    }
    let what = match event {
        "state" => ev["to"].as_str().unwrap_or("changed").to_string(),
        other => other.replace('_', " "),
    };
    let title = format!("{who} {what}");
    let body = ev["reason"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| title.clone());
    (title, body)
}

/// What a governance verdict did, to whom, under which rule, and how the
/// operator undoes it: "fixer paused by the guard (rm_recursive)" and a
/// body with the agent's attempt and the resume command.
fn verdict_message(who: &str, v: &Value) -> (String, String) {
    let text = |k: &str| v[k].as_str().unwrap_or_default();
    let (policy, rule, action) = (text("policy"), text("rule"), text("action"));
    let by = match policy {
        "budget" => format!("budget {rule}"),
        "loop" => format!("loop detection ({})", rule.replace('_', " ")),
        "guard" => format!("the guard ({rule})"),
        other => format!("{other} {rule}"),
    };
    let title = match action {
        "pause" => format!("{who} paused by {by}"),
        "deny" => format!("{who}: {by} denied a tool call"),
        "kill" => format!("{who} killed by {by}"),
        "warn" => format!("{who}: warning from {by}"),
        "message" => format!("{who}: {by} told the agent to change course"),
        "resume" => format!("{who} resumed by {by}"),
        "escalate" => format!("{who}: {by} escalates to you"),
        other => format!("{who}: {by} {other}"),
    };
    let mut body = text("reason").to_string();
    if let Some(said) = v["text"].as_str() {
        body.push_str(&format!("\nTold the agent: {said}"));
    }
    if action == "pause" {
        let resume = match policy {
            "budget" => format!(
                "colibri budget resume {rule} (or colibri budget raise {rule} CAP, or colibri resume {who})"
            ),
            _ => format!("colibri resume {who}"),
        };
        match v["until"].as_str() {
            Some(at) => body.push_str(&format!("\nResumes by itself at {at}; now: {resume}")),
            None => body.push_str(&format!("\nTo resume: {resume}")),
        }
    }
    (title, body.trim_start().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::notify::parse_sinks;

    /// A notifier whose cursor lives in a directory kept for the test run.
    fn notifier(toml: &str) -> Notifier {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        Notifier::new(parse_sinks(toml).expect("valid"), dir.join("cursor")).expect("workers")
    }

    fn blocked(seq: u64, pane: &str, reason: &str) -> Value {
        json!({"seq":seq,"at":"x","event":"state","pane":pane,"from":"working","to":"blocked","reason":reason})
    }

    #[test]
    fn verdicts_are_filtered_by_policy_and_read_as_sentences() {
        let mut n = notifier(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nstates = [\"guard\", \"budget\"]\n",
        );
        let info = PaneInfo::default();
        let now = Instant::now();
        let verdict = |seq: u64, policy: &str, rule: &str, action: &str, until: Option<&str>| {
            json!({"seq":seq,"at":"x","event":"verdict","pane":"p1","name":"fixer",
                "verdict":{"line":3,"policy":policy,"rule":rule,"action":action,
                "target":"pane","until":until,"reason":"rm -rf / (recursive delete of /)"}})
        };
        let guard = verdict(1, "guard", "rm_recursive", "pause", None);
        assert!(n.admit(0, &guard, &info, now), "listed: guard");
        let looped = verdict(2, "loop", "action_repeat", "pause", None);
        assert!(!n.admit(0, &looped, &info, now), "loop is not listed");
        let (title, body) = message(&guard);
        assert_eq!(title, "fixer paused by the guard (rm_recursive)");
        assert_eq!(
            body,
            "rm -rf / (recursive delete of /)\nTo resume: colibri resume fixer"
        );
        let budget = verdict(3, "budget", "daily", "pause", Some("2026-11-29T00:00:00Z"));
        assert!(n.admit(0, &budget, &info, now));
        let (title, body) = message(&budget);
        assert_eq!(title, "fixer paused by budget daily");
        assert!(
            body.ends_with(
                "Resumes by itself at 2026-11-29T00:00:00Z; now: colibri budget resume daily \
                 (or colibri budget raise daily CAP, or colibri resume fixer)"
            ),
            "{body}"
        );
    }

    /// A command that does not read its (large) event on stdin holds
    /// neither notify nor its own timeout.
    #[test]
    fn an_exec_timeout_holds_for_a_command_that_does_not_read() {
        let mut n = notifier(
            "[[notify]]\nkind = \"exec\"\ncommand = [\"sleep\", \"30\"]\ntimeout = \"500ms\"\n",
        );
        let big = "x".repeat(200_000);
        let ev = json!({"seq":1,"at":"x","event":"state","pane":"p1","to":"blocked","reason":big});
        let started = Instant::now();
        n.handle(&ev).expect("cursor");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "exec held notify"
        );
        n.settle();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "the 500 ms timeout took {took:?}"
        );
    }

    #[test]
    fn what_colibri_did_on_purpose_notifies_nobody() {
        let mut n = notifier(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nstates = [\"exited\", \"error\"]\n",
        );
        let info = PaneInfo::default();
        let now = Instant::now();
        let stop =
            json!({"seq":1,"at":"x","event":"exited","pane":"p1","signal":15,"planned":true});
        assert!(!n.admit(0, &stop, &info, now), "a planned stop");
        let closed = json!({"seq":2,"at":"x","event":"approval_expired","pane":"p1",
            "approval":"a1","reason":"stopped"});
        assert!(!n.admit(0, &closed, &info, now), "an approval it closed");
        let crash = json!({"seq":3,"at":"x","event":"exited","pane":"p1","signal":9});
        assert!(n.admit(0, &crash, &info, now), "a crash still notifies");
        let abandoned = json!({"seq":4,"at":"x","event":"approval_expired","pane":"p1",
            "approval":"a2","reason":"exited"});
        assert!(n.admit(0, &abandoned, &info, now));
    }

    #[test]
    fn filters_dedupe_and_rate_decide_what_is_delivered() {
        let mut n = notifier(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nnames = [\"fixer\"]\nrate_per_minute = 2\n",
        );
        n.handle(
            &json!({"seq":1,"at":"x","event":"attached","pane":"p1","agent":"pi","name":"fixer"}),
        )
        .expect("cursor");
        n.handle(
            &json!({"seq":2,"at":"x","event":"attached","pane":"p2","agent":"pi","name":"other"}),
        )
        .expect("cursor");
        let now = Instant::now();
        let info = |n: &Notifier, p: &str| n.panes.get(p).cloned().unwrap_or_default();
        let i1 = info(&n, "p1");
        let i2 = info(&n, "p2");
        assert!(
            !n.admit(0, &blocked(3, "p2", "r"), &i2, now),
            "not a listed name"
        );
        assert!(n.admit(0, &blocked(4, "p1", "r"), &i1, now));
        assert!(!n.admit(0, &blocked(5, "p1", "r"), &i1, now), "a repeat");
        let opened = json!({"seq":5,"at":"x","event":"approval_opened","pane":"p1",
            "approval":{"id":"p1-1","title":"r","question":"r"}});
        assert!(
            !n.admit(0, &opened, &i1, now),
            "the approval of a pane just told blocked is the same moment"
        );
        assert!(n.admit(0, &blocked(6, "p1", "other"), &i1, now));
        assert!(
            !n.admit(0, &blocked(7, "p1", "third"), &i1, now),
            "rate limit"
        );
        let later = now + Duration::from_secs(61);
        assert!(n.admit(0, &blocked(8, "p1", "third"), &i1, later));
        let working =
            json!({"seq":9,"at":"x","event":"state","pane":"p1","from":"blocked","to":"working"});
        assert!(!n.admit(0, &working, &i1, later), "working is not listed");
    }

    #[test]
    fn the_runtime_comes_from_the_attached_runtime_never_the_executable() {
        let mut n = notifier(
            "[[notify]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nruntimes = [\"pi\"]\n",
        );
        n.handle(&json!({"seq":1,"at":"x","event":"attached","pane":"p1",
            "agent":"colibri","name":"a1","runtime":"pi"}))
            .expect("cursor");
        n.handle(&json!({"seq":2,"at":"x","event":"attached","pane":"p2",
            "agent":"node","name":"a2"}))
            .expect("cursor");
        // `colibri spawn -- pi`: the harness's own name is its runtime.
        n.handle(&json!({"seq":3,"at":"x","event":"attached","pane":"p3",
            "agent":"pi","name":"a3"}))
            .expect("cursor");
        let info = |n: &Notifier, p: &str| n.panes.get(p).cloned().unwrap_or_default();
        let i1 = info(&n, "p1");
        let i2 = info(&n, "p2");
        let i3 = info(&n, "p3");
        assert_eq!(i1.runtime.as_deref(), Some("pi"));
        assert_eq!(i2.runtime, None, "an executable named node is no runtime");
        assert_eq!(i3.runtime.as_deref(), Some("pi"));
        let now = Instant::now();
        assert!(n.admit(0, &blocked(3, "p1", "r"), &i1, now));
        assert!(
            !n.admit(0, &blocked(4, "p2", "r"), &i2, now),
            "no runtime known: a runtimes filter does not match"
        );
        assert!(n.admit(0, &blocked(5, "p3", "r"), &i3, now));
    }

    #[test]
    fn ntfy_messages_name_the_pane_and_the_reason() {
        let (title, body) = message(
            &json!({"event":"state","to":"blocked","name":"fixer","reason":"Delete build/?"}),
        );
        assert_eq!(title, "fixer blocked");
        assert_eq!(body, "Delete build/?");
    }
}
