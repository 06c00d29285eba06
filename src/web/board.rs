//! The board's state in the web process: panes, approvals, the activity
//! feed and a ring of numbered items, which SSE clients follow and resume
//! from (`Last-Event-ID: RUN:SEQ`).
//!
//! Items are JSON objects with a `t` field: `event` (a watch event, as the
//! daemon sent it), `pane` (a pane's refreshed v2 record, with usage),
//! `gone` (a pane left the snapshot), `approvals` (the pending list) and
//! `daemon` (the watch connection came up or went down). The page applies
//! them in order; `snapshot()` is what a fresh page starts from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Map, Value};

/// Items a reconnecting page can catch up on before it gets a snapshot,
/// and the bytes they may take together (their JSON text).
const RING: usize = 20_000;
const RING_BYTES: usize = 16 << 20;
/// What one item from the daemon may hold: agents choose its size (a
/// dialog's text, an error, a reason), and the board keeps many items. A
/// string is cut at `TEXT_MAX` (marked `…`), a list at `LIST_MAX` entries,
/// and the whole at about `ITEM_MAX` bytes; `colibri approvals` has the
/// full text.
const TEXT_MAX: usize = 8 << 10;
const LIST_MAX: usize = 64;
const ITEM_MAX: usize = 64 << 10;
/// Pending approvals shown (the oldest); past it, they wait off the board
/// (`colibri approvals` lists them all).
const APPROVALS_MAX: usize = 200;
/// State changes kept per pane for its timeline.
const TIMELINE: usize = 24;
/// Usage points kept per pane for its charts.
const SERIES: usize = 90;
/// Watch events kept for the activity feed.
const FEED: usize = 200;

#[derive(Default)]
struct PaneEntry {
    info: Value,
    /// `[at, state]`, oldest first.
    timeline: VecDeque<Value>,
    /// `[at, tokens, cost_usd]`, oldest first.
    series: VecDeque<Value>,
}

#[derive(Default)]
pub struct BoardState {
    /// Names this run of the board's numbering; a page from another run
    /// (or from before a daemon reconnect) starts over from a snapshot.
    pub run: String,
    next_seq: u64,
    /// Numbered items with their JSON size.
    ring: VecDeque<(u64, Value, usize)>,
    ring_bytes: usize,
    panes: BTreeMap<String, PaneEntry>,
    approvals: Vec<Value>,
    feed: VecDeque<Value>,
    connected: bool,
    daemon_error: Option<String>,
}

/// What an SSE client gets next.
pub enum Catchup {
    /// Items after the client's sequence number, and the last one's number.
    Items(Vec<Value>, u64),
    /// The client is too far behind, or from another run.
    Snapshot(Value, u64),
}

pub struct Board {
    state: Mutex<BoardState>,
    changed: Condvar,
}

impl Board {
    pub fn new(run: String) -> Board {
        Board {
            state: Mutex::new(BoardState {
                run,
                next_seq: 1,
                ..BoardState::default()
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BoardState> {
        // A panicked holder leaves consistent-enough data for a view.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the state and wakes every waiting SSE client.
    pub fn update<T>(&self, f: impl FnOnce(&mut BoardState) -> T) -> T {
        let out = f(&mut self.lock());
        self.changed.notify_all();
        out
    }

    pub fn snapshot(&self) -> (Value, u64) {
        let s = self.lock();
        (s.snapshot(), s.next_seq - 1)
    }

    pub fn run(&self) -> String {
        self.lock().run.clone()
    }

    /// Items after `seq` of run `run`, waiting up to `wait` for one.
    pub fn after(&self, run: &str, seq: u64, wait: Duration) -> Catchup {
        let mut s = self.lock();
        if s.run == run && s.next_seq - 1 == seq {
            s = self
                .changed
                .wait_timeout(s, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        let last = s.next_seq - 1;
        let oldest = s.ring.front().map(|(n, _, _)| *n).unwrap_or(s.next_seq);
        if s.run != run || seq > last || seq + 1 < oldest {
            return Catchup::Snapshot(s.snapshot(), last);
        }
        let items = s
            .ring
            .iter()
            .filter(|(n, _, _)| *n > seq)
            .map(|(_, v, _)| v.clone())
            .collect();
        Catchup::Items(items, last)
    }
}

impl BoardState {
    fn push(&mut self, item: Value) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let size = serde_json::to_string(&item).map_or(0, |t| t.len());
        self.ring.push_back((seq, item, size));
        self.ring_bytes += size;
        while self.ring.len() > RING || (self.ring_bytes > RING_BYTES && self.ring.len() > 1) {
            if let Some((_, _, size)) = self.ring.pop_front() {
                self.ring_bytes -= size;
            }
        }
    }

    /// The JSON bytes the catch-up ring holds.
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Starts a new numbering: pages reload from a snapshot.
    pub fn restart(&mut self, run: String) {
        self.run = run;
        self.ring.clear();
        self.ring_bytes = 0;
    }

    pub fn set_connected(&mut self, connected: bool, error: Option<String>) {
        if self.connected == connected && self.daemon_error == error {
            return;
        }
        self.connected = connected;
        self.daemon_error = error.clone();
        self.push(json!({"t":"daemon","connected":connected,"error":error}));
    }

    /// Applies one watch event from the daemon.
    pub fn apply_event(&mut self, mut ev: Value) {
        clip(&mut ev);
        let pane = ev.get("pane").and_then(Value::as_str).map(str::to_string);
        let kind = ev.get("event").and_then(Value::as_str).unwrap_or("");
        let at = ev.get("at").cloned().unwrap_or(Value::Null);
        if let Some(id) = &pane {
            let entry = self.panes.entry(id.clone()).or_default();
            if !entry.info.is_object() {
                entry.info = json!({"id": id, "state": "starting"});
            }
            apply_to_pane(entry, kind, &ev, &at);
        }
        self.apply_approval(kind, &ev);
        if kind != "heartbeat" {
            self.feed.push_back(ev.clone());
            while self.feed.len() > FEED {
                self.feed.pop_front();
            }
        }
        self.push(json!({"t":"event","ev":ev}));
    }

    fn apply_approval(&mut self, kind: &str, ev: &Value) {
        let before = self.approvals.len();
        match kind {
            "approval_opened" if self.approvals.len() >= APPROVALS_MAX => return,
            "approval_opened" => {
                if let Some(a) = ev.get("approval") {
                    let mut a = a.clone();
                    if let (Some(m), Some(p)) = (a.as_object_mut(), ev.get("pane")) {
                        m.entry("pane").or_insert(p.clone());
                    }
                    self.approvals.push(a);
                }
            }
            "approval_answered" | "approval_expired" => {
                let id = ev.get("approval");
                self.approvals.retain(|a| a.get("id") != id);
            }
            _ => return,
        }
        if before != self.approvals.len() || kind == "approval_opened" {
            let list = Value::Array(self.approvals.clone());
            self.push(json!({"t":"approvals","approvals":list}));
        }
    }

    /// Replaces the pending approvals with the daemon's list.
    pub fn set_approvals(&mut self, mut list: Vec<Value>) {
        list.truncate(APPROVALS_MAX);
        list.iter_mut().for_each(clip);
        if list == self.approvals {
            return;
        }
        self.approvals = list.clone();
        self.push(json!({"t":"approvals","approvals":list}));
    }

    /// Merges a v2 snapshot: changed panes become `pane` items, missing
    /// ones `gone`. `now` is the time the snapshot was taken.
    pub fn apply_snapshot(&mut self, panes: &[Value], now: &str) {
        let mut seen = std::collections::BTreeSet::new();
        for p in panes {
            let mut p = p.clone();
            clip(&mut p);
            let p = &p;
            let Some(id) = p.get("id").and_then(Value::as_str) else {
                continue;
            };
            seen.insert(id.to_string());
            let entry = self.panes.entry(id.to_string()).or_default();
            if entry.timeline.is_empty() {
                let since = p.get("state_since").cloned().unwrap_or(Value::Null);
                let state = p.get("state").cloned().unwrap_or(Value::Null);
                entry.timeline.push_back(json!([since, state]));
            }
            let point = usage_point(p, now);
            let usage_changed = entry
                .series
                .back()
                .is_none_or(|last| last.get(1) != point.get(1) || last.get(2) != point.get(2));
            if usage_changed {
                push_capped(&mut entry.series, point.clone(), SERIES);
            }
            if entry.info == *p && !usage_changed {
                continue;
            }
            entry.info = p.clone();
            let point = if usage_changed { point } else { Value::Null };
            let item = json!({"t":"pane","pane":p,"point":point});
            self.push(item);
        }
        let gone: Vec<String> = self
            .panes
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for id in gone {
            self.panes.remove(&id);
            self.push(json!({"t":"gone","pane":id}));
        }
    }

    fn snapshot(&self) -> Value {
        let panes: Vec<Value> = self
            .panes
            .values()
            .map(|e| {
                let mut m = Map::new();
                m.insert("info".into(), e.info.clone());
                m.insert("timeline".into(), Value::Array(e.timeline.clone().into()));
                m.insert("series".into(), Value::Array(e.series.clone().into()));
                Value::Object(m)
            })
            .collect();
        json!({
            "panes": panes,
            "approvals": self.approvals,
            "feed": Value::Array(self.feed.clone().into()),
            "daemon": {"connected": self.connected, "error": self.daemon_error},
        })
    }
}

fn apply_to_pane(entry: &mut PaneEntry, kind: &str, ev: &Value, at: &Value) {
    let Some(info) = entry.info.as_object_mut() else {
        return;
    };
    match kind {
        "state" => {
            if let Some(to) = ev.get("to") {
                info.insert("state".into(), to.clone());
                info.insert("state_since".into(), at.clone());
                push_capped(&mut entry.timeline, json!([at, to]), TIMELINE);
            }
        }
        "stalled" => {
            info.insert("stalled".into(), Value::Bool(true));
        }
        "unstalled" => {
            info.insert("stalled".into(), Value::Bool(false));
        }
        "paused" => {
            info.insert("paused".into(), Value::Bool(true));
        }
        "resumed" => {
            info.insert("paused".into(), Value::Bool(false));
        }
        "runtime" => {
            if let Some(v) = ev.get("runtime") {
                info.insert("runtime".into(), v.clone());
            }
        }
        "attached" => {
            for k in ["agent", "name", "pid"] {
                if let Some(v) = ev.get(k) {
                    info.insert(k.into(), v.clone());
                }
            }
        }
        _ => {}
    }
}

/// A chart point of the pane's whole life: its earlier runs' spend too
/// (`usage_total`), so the chart does not drop at a restart.
fn usage_point(p: &Value, now: &str) -> Value {
    let u = p.get("usage_total").or_else(|| p.get("usage"));
    let tokens: u64 = ["input_tokens", "output_tokens"]
        .iter()
        .filter_map(|k| u.and_then(|u| u.get(*k)).and_then(Value::as_u64))
        .sum();
    let cost = u
        .and_then(|u| u.get("cost_usd"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    json!([now, tokens, cost])
}

/// Cuts what an agent made large in `v` to the board's sizes (`TEXT_MAX`,
/// `LIST_MAX`, `ITEM_MAX`), in place.
fn clip(v: &mut Value) {
    let mut budget = ITEM_MAX;
    clip_within(v, &mut budget);
}

fn clip_within(v: &mut Value, budget: &mut usize) {
    match v {
        Value::String(text) => {
            let keep = text.len().min(TEXT_MAX).min(*budget);
            if keep < text.len() {
                let mut end = keep;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
            *budget = budget.saturating_sub(text.len());
        }
        Value::Array(items) => {
            items.truncate(LIST_MAX);
            // What comes after the budget ran out is left off.
            let spent_at = items.iter_mut().position(|item| {
                if *budget == 0 {
                    return true;
                }
                clip_within(item, budget);
                false
            });
            if let Some(end) = spent_at {
                items.truncate(end);
            }
        }
        Value::Object(map) => {
            let mut kept = 0;
            map.retain(|key, _| {
                kept += 1;
                kept <= LIST_MAX * 4 && key.len() <= TEXT_MAX
            });
            for (key, item) in map.iter_mut() {
                *budget = budget.saturating_sub(key.len());
                if *budget == 0 {
                    *item = Value::Null;
                } else {
                    clip_within(item, budget);
                }
            }
        }
        _ => *budget = budget.saturating_sub(8),
    }
}

fn push_capped(q: &mut VecDeque<Value>, v: Value, cap: usize) {
    q.push_back(v);
    while q.len() > cap {
        q.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> Board {
        Board::new("r1".into())
    }

    #[test]
    fn a_state_event_updates_the_pane_and_its_timeline() {
        let b = board();
        b.update(|s| {
            s.apply_snapshot(
                &[json!({"id":"p1","state":"idle","state_since":"t0"})],
                "t0",
            )
        });
        b.update(|s| {
            s.apply_event(
                json!({"seq":5,"at":"t1","event":"state","pane":"p1","from":"idle","to":"working"}),
            )
        });
        let (snap, last) = b.snapshot();
        assert_eq!(snap["panes"][0]["info"]["state"], "working");
        assert_eq!(
            snap["panes"][0]["timeline"],
            json!([["t0", "idle"], ["t1", "working"]])
        );
        assert_eq!(last, 2);
    }

    #[test]
    fn a_client_resumes_after_its_sequence_or_gets_a_snapshot() {
        let b = board();
        b.update(|s| s.apply_event(json!({"event":"paused","pane":"p1","at":"t"})));
        b.update(|s| s.apply_event(json!({"event":"resumed","pane":"p1","at":"t"})));
        match b.after("r1", 1, Duration::ZERO) {
            Catchup::Items(items, last) => {
                assert_eq!(items.len(), 1);
                assert_eq!(items[0]["ev"]["event"], "resumed");
                assert_eq!(last, 2);
            }
            Catchup::Snapshot(..) => panic!("expected items"),
        }
        assert!(matches!(
            b.after("other-run", 1, Duration::ZERO),
            Catchup::Snapshot(..)
        ));
        assert!(matches!(
            b.after("r1", 99, Duration::ZERO),
            Catchup::Snapshot(..)
        ));
    }

    /// A restarted pane's chart goes on from its whole life's spend, not
    /// from the new run's zero (the header once fell to $0.0000).
    #[test]
    fn the_chart_follows_a_panes_whole_life_across_restarts() {
        assert_eq!(
            usage_point(
                &json!({"usage":{"input_tokens":1,"output_tokens":0,"cost_usd":0.1},
                    "usage_total":{"input_tokens":30,"output_tokens":5,"cost_usd":0.7}}),
                "t"
            ),
            json!(["t", 35, 0.7])
        );
    }

    #[test]
    fn unchanged_snapshots_push_nothing_and_missing_panes_are_gone() {
        let b = board();
        let p = json!({"id":"p1","state":"idle","usage":{"input_tokens":3,"output_tokens":4,"cost_usd":0.5}});
        b.update(|s| s.apply_snapshot(std::slice::from_ref(&p), "t0"));
        b.update(|s| s.apply_snapshot(std::slice::from_ref(&p), "t1"));
        assert_eq!(b.snapshot().1, 1);
        let (snap, _) = b.snapshot();
        assert_eq!(snap["panes"][0]["series"], json!([["t0", 7, 0.5]]));
        b.update(|s| s.apply_snapshot(&[], "t2"));
        match b.after("r1", 1, Duration::ZERO) {
            Catchup::Items(items, _) => assert_eq!(items[0], json!({"t":"gone","pane":"p1"})),
            Catchup::Snapshot(..) => panic!("expected items"),
        }
    }

    #[test]
    fn approvals_open_and_close_from_events() {
        let b = board();
        b.update(|s| {
            s.apply_event(json!({"event":"approval_opened","pane":"p1","approval":{"id":"a1","kind":"confirm"}}))
        });
        assert_eq!(b.snapshot().0["approvals"][0]["pane"], "p1");
        b.update(|s| {
            s.apply_event(json!({"event":"approval_answered","pane":"p1","approval":"a1","decision":"approve","by":"operator"}))
        });
        assert_eq!(b.snapshot().0["approvals"], json!([]));
    }

    /// An agent's dialogs cost the board what the board keeps, not what the
    /// agent wrote: 150 dialogs of 4.4 MiB each took it from 5.6 MB to
    /// 677 MB, as every opening pushed the whole pending list again.
    #[test]
    fn large_dialogs_are_cut_and_the_ring_stays_within_its_bytes() {
        let b = board();
        let huge = "x".repeat(512 << 10);
        for i in 0..150 {
            b.update(|s| {
                s.apply_event(json!({"event":"approval_opened","pane":"p1","approval":{
                    "id": format!("a{i}"), "kind":"confirm", "question": huge,
                    "options": vec![huge.clone(); 3]}}))
            });
        }
        let (snap, _) = b.snapshot();
        let approvals = snap["approvals"].as_array().expect("approvals");
        assert_eq!(approvals.len(), 150);
        let question = approvals[0]["question"].as_str().expect("question");
        assert!(
            question.len() <= TEXT_MAX + '…'.len_utf8(),
            "{}",
            question.len()
        );
        assert!(question.ends_with('…'));
        let total = serde_json::to_string(&snap).expect("json").len();
        assert!(total < 150 * ITEM_MAX * 2, "a snapshot of {total} bytes");
        let ring = b.update(|s| s.ring_bytes());
        assert!(ring <= RING_BYTES, "the ring holds {ring} bytes");
    }

    #[test]
    fn a_value_is_cut_to_its_budget_at_any_depth_and_width() {
        let mut wide = json!({"a": vec![vec![vec!["y".repeat(1000); 64]; 64]; 64]});
        clip(&mut wide);
        let size = serde_json::to_string(&wide).expect("json").len();
        assert!(size < ITEM_MAX + 4096, "{size} bytes");
        let mut keys = serde_json::Map::new();
        for i in 0..10_000 {
            keys.insert(format!("k{i}"), json!(i));
        }
        let mut many = Value::Object(keys);
        clip(&mut many);
        assert_eq!(many.as_object().map(|m| m.len()), Some(LIST_MAX * 4));
        let mut short = json!({"id":"a1","question":"Delete build/?","options":["yes","no"]});
        let before = short.clone();
        clip(&mut short);
        assert_eq!(short, before, "what fits is left as it is");
    }

    #[test]
    fn pending_approvals_past_the_cap_wait_off_the_board() {
        let b = board();
        for i in 0..APPROVALS_MAX + 10 {
            b.update(|s| {
                s.apply_event(json!({"event":"approval_opened","pane":"p1",
                    "approval":{"id": format!("a{i}"),"kind":"confirm"}}))
            });
        }
        assert_eq!(
            b.snapshot().0["approvals"].as_array().map(Vec::len),
            Some(APPROVALS_MAX)
        );
    }
}
