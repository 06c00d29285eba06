//! `colibri top`: a live view of every pane, and keys to steer them.
//!
//! A thread follows `watch` (reconnecting after a daemon restart) and hands
//! each event to the loop; the loop takes a `snapshot` at start, after each
//! reconnect, and shortly after events (coalesced), never on a clock, so
//! an idle daemon costs nothing. Panes are kept as JSON objects so fields
//! a newer daemon adds (a pending approval) show without a new client.
//! `Model` is the whole screen state and is tested without a terminal.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::{Frame, Terminal};
use serde_json::{json, Value};
use signal_hook::consts::SIGTERM;

use crate::cli::render::{
    escape_controls, format_age, format_cost, format_tokens, parse_time, short_id, watch_line,
};
use crate::cli::CliError;
use crate::client::{resolve_socket, Client};
use crate::core::health::{health, Health, HealthFacts};
use crate::core::state::AgentState;
use crate::protocol::request;
use crate::protocol::{Command as Wire, WatchEvent, WatchKind};

/// Events kept per pane for the detail view.
const EVENTS_KEPT: usize = 200;
/// After an event, wait this long for more before taking a snapshot.
const SNAPSHOT_COALESCE: Duration = Duration::from_millis(200);
const RECONNECT_EVERY: Duration = Duration::from_secs(1);
/// How often fleet rows are read again with no event: a host going
/// unreachable is no event on the stream (`top --fleet`).
const FLEET_REFRESH: Duration = Duration::from_secs(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const STATES: [&str; 5] = ["idle", "working", "blocked", "done", "error"];

/// What the watch thread tells the loop.
enum Feed {
    Connected,
    Event(Box<WatchEvent>),
    Lost(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    Attach,
    State,
    Name,
    Since,
    Cost,
}

impl SortBy {
    fn next(self) -> SortBy {
        match self {
            SortBy::Attach => SortBy::State,
            SortBy::State => SortBy::Name,
            SortBy::Name => SortBy::Since,
            SortBy::Since => SortBy::Cost,
            SortBy::Cost => SortBy::Attach,
        }
    }

    fn label(self) -> &'static str {
        match self {
            SortBy::Attach => "start",
            SortBy::State => "state",
            SortBy::Name => "name",
            SortBy::Since => "since",
            SortBy::Cost => "cost",
        }
    }
}

/// What a key asks the loop to do beyond redrawing.
#[derive(Debug, PartialEq)]
pub enum Action {
    None,
    Quit,
    /// Send this request; show its error if it fails.
    Send(Wire),
    /// Leave the TUI and attach to this pane.
    Attach(String),
}

/// Everything the screen shows.
#[derive(Debug)]
pub struct Model {
    panes: Vec<Value>,
    pub sort: SortBy,
    pub filter: Option<&'static str>,
    selected: Option<String>,
    pub detail: bool,
    confirm_kill: Option<String>,
    pub message: String,
    pub connected: bool,
    events: BTreeMap<String, VecDeque<String>>,
    timeline: BTreeMap<String, Vec<(String, String)>>,
    names: BTreeMap<String, String>,
}

fn s<'a>(p: &'a Value, k: &str) -> &'a str {
    p.get(k).and_then(Value::as_str).unwrap_or("")
}

impl Model {
    pub fn new() -> Model {
        Model {
            panes: Vec::new(),
            sort: SortBy::Attach,
            filter: None,
            selected: None,
            detail: false,
            confirm_kill: None,
            message: String::new(),
            connected: false,
            events: BTreeMap::new(),
            timeline: BTreeMap::new(),
            names: BTreeMap::new(),
        }
    }

    pub fn set_snapshot(&mut self, snapshot: &Value) {
        self.panes = snapshot
            .get("panes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for p in &self.panes {
            if let Some(name) = p.get("name").and_then(Value::as_str) {
                self.names.insert(s(p, "id").to_string(), name.to_string());
            }
            let tl = self.timeline.entry(s(p, "id").to_string()).or_default();
            if tl.is_empty() {
                tl.push((s(p, "state_since").to_string(), s(p, "state").to_string()));
            }
        }
        if self.selected.is_none() {
            self.selected = self.visible().first().map(|p| s(p, "id").to_string());
        }
    }

    /// Records an event for the detail view (the snapshot that follows
    /// brings the pane's fields).
    pub fn on_event(&mut self, ev: &WatchEvent) {
        let Some(pane) = ev.kind.pane().map(str::to_string) else {
            return;
        };
        if let WatchKind::State { to, .. } = &ev.kind {
            self.timeline
                .entry(pane.clone())
                .or_default()
                .push((ev.at.clone(), to.as_str().to_string()));
        }
        // The row changes now; usage and the rest come with the snapshot.
        if let Some(p) = self.panes.iter_mut().find(|p| s(p, "id") == pane) {
            match &ev.kind {
                WatchKind::State { to, .. } => {
                    p["state"] = json!(to.as_str());
                    p["state_since"] = json!(ev.at);
                }
                WatchKind::Paused { .. } => p["paused"] = json!(true),
                WatchKind::Resumed { .. } => p["paused"] = json!(false),
                WatchKind::Stalled { .. } => p["stalled"] = json!(true),
                WatchKind::Unstalled { .. } => p["stalled"] = json!(false),
                _ => {}
            }
        }
        let line = escape_controls(&watch_line(ev, &self.names)).into_owned();
        let list = self.events.entry(pane).or_default();
        if list.len() == EVENTS_KEPT {
            list.pop_front();
        }
        list.push_back(line);
    }

    /// The panes shown, filtered and sorted.
    pub fn visible(&self) -> Vec<&Value> {
        let mut v: Vec<&Value> = self
            .panes
            .iter()
            .filter(|p| self.filter.is_none_or(|f| s(p, "state") == f))
            .collect();
        match self.sort {
            SortBy::Attach => {}
            SortBy::State => v.sort_by_key(|p| {
                STATES
                    .iter()
                    .position(|x| *x == s(p, "state"))
                    .map_or(0, |i| match i {
                        2 => 0,
                        4 => 1,
                        1 => 2,
                        0 => 3,
                        _ => 4,
                    })
            }),
            SortBy::Name => v.sort_by_key(|p| display_name(p).to_string()),
            SortBy::Since => v.sort_by(|a, b| s(b, "state_since").cmp(s(a, "state_since"))),
            SortBy::Cost => v.sort_by(|a, b| cost(b).total_cmp(&cost(a))),
        }
        v
    }

    pub fn selected_id(&self) -> Option<String> {
        let vis = self.visible();
        let sel = self.selected.as_deref();
        vis.iter()
            .find(|p| Some(s(p, "id")) == sel)
            .or_else(|| vis.first())
            .map(|p| s(p, "id").to_string())
    }

    fn move_selection(&mut self, by: isize) {
        let vis = self.visible();
        if vis.is_empty() {
            return;
        }
        let cur = self.selected_id();
        let i = vis
            .iter()
            .position(|p| Some(s(p, "id")) == cur.as_deref())
            .unwrap_or(0) as isize;
        let j = (i + by).clamp(0, vis.len() as isize - 1) as usize;
        self.selected = Some(s(vis[j], "id").to_string());
    }

    /// What a key does.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        if let Some(id) = self.confirm_kill.take() {
            if k.code == KeyCode::Char('y') {
                return Action::Send(request::agent(Wire::KillAgent, &id));
            }
            self.message = "kill cancelled".into();
            return Action::None;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        let agent = |verb, id: &str| Action::Send(request::agent(verb, id));
        // A pane with one pending approval stands for that approval.
        let decide = |verb, id: &str| Action::Send(request::decide(verb, id, None, None));
        let id = self.selected_id();
        match (k.code, id) {
            (KeyCode::Char('q'), _) => Action::Quit,
            (KeyCode::Esc, _) if self.detail => {
                self.detail = false;
                Action::None
            }
            (KeyCode::Esc, _) => Action::Quit,
            (KeyCode::Up, _) => {
                self.move_selection(-1);
                Action::None
            }
            (KeyCode::Down, _) => {
                self.move_selection(1);
                Action::None
            }
            (KeyCode::Char('s'), _) => {
                self.sort = self.sort.next();
                Action::None
            }
            (KeyCode::Char('f'), _) => {
                self.filter = match self.filter {
                    None => Some(STATES[0]),
                    Some(f) => STATES
                        .iter()
                        .position(|x| *x == f)
                        .and_then(|i| STATES.get(i + 1).copied()),
                };
                Action::None
            }
            (KeyCode::Char('v') | KeyCode::Tab, _) => {
                self.detail = !self.detail;
                Action::None
            }
            (_, None) => Action::None,
            (KeyCode::Char('a'), Some(id)) => decide(Wire::Approve, &id),
            (KeyCode::Char('d'), Some(id)) => decide(Wire::Deny, &id),
            (KeyCode::Char('p'), Some(id)) => agent(Wire::PauseAgent, &id),
            (KeyCode::Char('r'), Some(id)) => agent(Wire::ResumeAgent, &id),
            (KeyCode::Char('R'), Some(id)) => agent(Wire::RestartAgent, &id),
            (KeyCode::Char('k'), Some(id)) => {
                self.message = format!("kill {}? y to confirm", self.label(&id));
                self.confirm_kill = Some(id);
                Action::None
            }
            (KeyCode::Enter, Some(id)) => Action::Attach(id),
            _ => Action::None,
        }
    }

    fn label(&self, id: &str) -> String {
        self.names
            .get(id)
            .cloned()
            .unwrap_or_else(|| short_id(id).to_string())
    }
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

fn display_name(p: &Value) -> &str {
    p.get("name").and_then(Value::as_str).unwrap_or_else(|| {
        // A fleet row's id is HOST/PANE; the HOST column says the host.
        let id = s(p, "id");
        let local = p
            .get("host")
            .and_then(Value::as_str)
            .and_then(|h| id.strip_prefix(h)?.strip_prefix('/'))
            .unwrap_or(id);
        short_id(local)
    })
}

fn cost(p: &Value) -> f64 {
    p.pointer("/usage/cost_usd")
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

fn age(now: SystemTime, at: &str) -> String {
    parse_time(at)
        .map(|t| format_age(now.duration_since(t).unwrap_or(Duration::ZERO)))
        .unwrap_or_else(|| "-".into())
}

/// The state cell: the state and its flags; `stopped` for a pane a
/// planned stop ended (its own state is the `error` the SIGTERM's exit
/// left), as in `colibri snapshot`.
fn state_text(p: &Value) -> String {
    let mut st = if p["supervision"]["actual"] == "stopped" {
        "stopped".to_string()
    } else {
        s(p, "state").to_string()
    };
    if p.get("stalled") == Some(&Value::Bool(true)) {
        st.push_str(" stall");
    }
    if p.get("paused") == Some(&Value::Bool(true)) {
        st.push_str(" paused");
    }
    st
}

/// The seed's health word for a v2 pane row (`core::health`, as `state`
/// gives it): looping is read from a loop policy's hold, since the row
/// does not carry the escalation ladder. Empty once it is not running.
fn health_text(p: &Value) -> &'static str {
    let Some(state) = p
        .get("state")
        .and_then(|v| serde_json::from_value::<AgentState>(v.clone()).ok())
    else {
        return "";
    };
    let looping = p["holds"]
        .as_array()
        .is_some_and(|holds| holds.iter().any(|h| h["by"] == "loop"));
    health(HealthFacts {
        running: p["pid"].is_number() && p["exit"].is_null(),
        spoke: p["last_event_at"].is_string(),
        state,
        stalled: p["stalled"] == Value::Bool(true),
        looping,
    })
    .map_or("", Health::as_str)
}

/// The last column: a pending approval first, else the last tool.
fn activity(p: &Value) -> String {
    let approval = p
        .get("approval")
        .or_else(|| p.get("pending_approval"))
        .filter(|v| !v.is_null());
    if let Some(a) = approval {
        let what = ["tool", "summary", "reason", "id"]
            .iter()
            .find_map(|k| a.get(*k).and_then(Value::as_str))
            .unwrap_or("pending");
        return format!("APPROVE? {what}");
    }
    if let Some(t) = p.get("last_tool").filter(|v| !v.is_null()) {
        return format!("{} {}", s(t, "name"), s(t, "summary"));
    }
    p.get("blocked_reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn state_color(state_text: &str) -> Color {
    match state_text.split(' ').next().unwrap_or_default() {
        "working" => Color::Green,
        "blocked" => Color::Yellow,
        "error" => Color::Red,
        "done" | "stopped" => Color::DarkGray,
        _ => Color::Reset,
    }
}

const HELP: &str =
    "a approve  d deny  p pause  r resume  R restart  k kill  Enter attach  v detail  s sort  f filter  q quit";

/// Draws the model (pure: the same model draws the same screen).
pub fn draw(f: &mut Frame, m: &Model, now: SystemTime) {
    let [head, body, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(2),
    ])
    .areas(f.area());
    let link = if m.connected {
        "live"
    } else {
        "reconnecting…"
    };
    let filter = m.filter.unwrap_or("all");
    f.render_widget(
        Paragraph::new(format!(
            "colibri top — {} panes — {link} — sort {} — filter {filter}",
            m.panes.len(),
            m.sort.label()
        ))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        head,
    );
    if m.detail {
        draw_detail(f, m, body, now);
    } else {
        draw_table(f, m, body, now);
    }
    f.render_widget(
        Paragraph::new(escape_controls(&m.message).into_owned()),
        status,
    );
    f.render_widget(
        Paragraph::new(HELP)
            .style(Style::default().fg(Color::Cyan))
            .wrap(Wrap { trim: true }),
        help,
    );
}

fn draw_table(f: &mut Frame, m: &Model, area: ratatui::layout::Rect, now: SystemTime) {
    let vis = m.visible();
    // The fleet gateway's rows name their host (`top --fleet`).
    let fleet = vis.iter().any(|p| p.get("host").is_some());
    let rows: Vec<Row> = vis
        .iter()
        .map(|p| {
            let tokens = p
                .pointer("/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                + p.pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
            let state = state_text(p);
            let color = state_color(&state);
            let host = fleet.then(|| Cell::from(escape_controls(s(p, "host")).into_owned()));
            // A host three heartbeats late: its rows stay, dimmed.
            let style = if p.get("unreachable_since").is_some_and(Value::is_string) {
                Style::default().add_modifier(Modifier::DIM)
            } else {
                Style::default()
            };
            Row::new(host.into_iter().chain([
                Cell::from(escape_controls(display_name(p)).into_owned()),
                Cell::from(state).style(Style::default().fg(color)),
                Cell::from(age(now, s(p, "state_since"))),
                Cell::from(age(now, s(p, "started_at"))),
                Cell::from(s(p, "runtime").to_string()),
                Cell::from(format_tokens(tokens)),
                Cell::from(format_cost(cost(p))),
                Cell::from(escape_controls(&activity(p)).into_owned()),
            ]))
            .style(style)
        })
        .collect();
    let host_width = fleet.then_some(Constraint::Length(8));
    let widths = host_width.into_iter().chain([
        Constraint::Length(12),
        Constraint::Length(13),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Min(10),
    ]);
    let header = Row::new(fleet.then_some("HOST").into_iter().chain([
        "NAME",
        "STATE",
        "SINCE",
        "UP",
        "RUNTIME",
        "TOKENS",
        "COST",
        "TOOL / APPROVAL",
    ]))
    .style(Style::default().add_modifier(Modifier::UNDERLINED));
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default();
    let sel = m.selected_id();
    state.select(vis.iter().position(|p| Some(s(p, "id")) == sel.as_deref()));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame, m: &Model, area: ratatui::layout::Rect, now: SystemTime) {
    let Some(id) = m.selected_id() else {
        f.render_widget(Paragraph::new("no pane"), area);
        return;
    };
    let pane = m.panes.iter().find(|p| s(p, "id") == id);
    let [top, bottom] = Layout::vertical([Constraint::Length(8), Constraint::Min(3)]).areas(area);
    let mut lines = Vec::new();
    if let Some(p) = pane {
        lines.push(Line::from(format!(
            "{} {}  {}  health {}  pid {}  since {}  up {}",
            escape_controls(display_name(p)),
            short_id(&id),
            state_text(p),
            Some(health_text(p))
                .filter(|w| !w.is_empty())
                .unwrap_or("-"),
            p.get("pid").map_or("-".into(), Value::to_string),
            age(now, s(p, "state_since")),
            age(now, s(p, "started_at")),
        )));
        lines.push(Line::from(format!(
            "cwd {}  cost {}  {}",
            escape_controls(s(p, "cwd")),
            format_cost(cost(p)),
            escape_controls(&activity(p)),
        )));
        // Why it is paused: each hold, as `colibri snapshot` says it.
        let holds: Vec<crate::protocol::WireHold> = p
            .get("holds")
            .and_then(|h| serde_json::from_value(h.clone()).ok())
            .unwrap_or_default();
        for h in &holds {
            lines.push(Line::from(
                escape_controls(&crate::cli::render::hold_text(h)).into_owned(),
            ));
        }
    }
    let timeline: Vec<String> = m
        .timeline
        .get(&id)
        .map(|t| {
            t.iter()
                .rev()
                .take(5)
                .map(|(at, st)| format!("{} {st}", at.get(11..19).unwrap_or(at)))
                .collect()
        })
        .unwrap_or_default();
    lines.push(Line::from("state timeline (newest first):"));
    lines.extend(timeline.into_iter().map(|l| Line::from(format!("  {l}"))));
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::BOTTOM)),
        top,
    );
    let height = bottom.height as usize;
    let events: Vec<Line> = m
        .events
        .get(&id)
        .map(|e| {
            let skip = e.len().saturating_sub(height);
            e.iter().skip(skip).map(|l| Line::from(l.clone())).collect()
        })
        .unwrap_or_default();
    f.render_widget(Paragraph::new(events), bottom);
}

/// Follows `watch`, reconnecting until the loop goes away.
fn spawn_watch(path: PathBuf, tx: Sender<Feed>) {
    std::thread::spawn(move || loop {
        let why = match UnixStream::connect(&path) {
            Ok(stream) => follow_watch(stream, &tx),
            Err(e) => e.to_string(),
        };
        if tx.send(Feed::Lost(why)).is_err() {
            return;
        }
        std::thread::sleep(RECONNECT_EVERY);
    });
}

fn follow_watch(mut stream: UnixStream, tx: &Sender<Feed>) -> String {
    if let Err(e) = stream.write_all(b"{\"cmd\":\"watch\"}\n") {
        return e.to_string();
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return "the daemon closed the watch".into(),
            Ok(_) => {}
            Err(e) => return e.to_string(),
        }
        if first {
            first = false;
            if tx.send(Feed::Connected).is_err() {
                return String::new();
            }
            continue;
        }
        if let Ok(ev) = serde_json::from_str::<WatchEvent>(&line) {
            if tx.send(Feed::Event(Box::new(ev))).is_err() {
                return String::new();
            }
        }
    }
}

fn call(path: &Path, v: &Wire) -> Result<Value, String> {
    let mut c = Client::connect(path, REQUEST_TIMEOUT).map_err(|e| e.to_string())?;
    c.call(v).map_err(|e| e.to_string())
}

/// The terminal in the TUI's mode for as long as it lives.
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        terminal::enable_raw_mode()?;
        execute!(io::stdout(), terminal::EnterAlternateScreen)?;
        Ok(Screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

pub fn run(socket: Option<&Path>) -> Result<u8, CliError> {
    // Without a terminal on both sides, raw mode fails with a bare errno
    // ("terminal: No such device or address") or the screen goes to a file.
    if !io::stdin().is_terminal() || !io::stdout().is_terminal() {
        return Err(CliError::Runtime(
            "top needs a terminal on stdin and stdout; without one, use `colibri snapshot` or `colibri watch`".into(),
        ));
    }
    let path = resolve_socket(socket);
    let (tx, rx) = mpsc::channel();
    spawn_watch(path.clone(), tx);
    let mut model = Model::new();
    // A SIGTERM (`timeout`, `kill`) ends top through its loop, so the
    // terminal is put back as `q` leaves it; the default action left it
    // raw, on the alternate screen. A second one ends it at once (top may
    // be blocked on a stopped terminal). SIGHUP keeps its default: the
    // terminal is gone, there is nothing to put back, and crossterm spins
    // on a hung-up terminal's reads, so a flag would never be read.
    let stopped_by = Arc::new(AtomicUsize::new(0));
    let stopping = Arc::new(AtomicBool::new(false));
    let register = || -> io::Result<()> {
        signal_hook::flag::register_conditional_shutdown(
            SIGTERM,
            128 + SIGTERM,
            Arc::clone(&stopping),
        )?;
        signal_hook::flag::register(SIGTERM, Arc::clone(&stopping))?;
        signal_hook::flag::register_usize(SIGTERM, Arc::clone(&stopped_by), SIGTERM as usize)?;
        Ok(())
    };
    register().map_err(|e| CliError::io("signal handler", e))?;
    let mut screen = Some(Screen::enter().map_err(|e| CliError::io("terminal", e))?);
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))
        .map_err(|e| CliError::io("terminal", e))?;
    let mut snapshot_due: Option<Instant> = None;
    loop {
        let sig = stopped_by.load(Ordering::Relaxed);
        if sig != 0 {
            return Ok(128u8.saturating_add(sig as u8));
        }
        drain(&rx, &mut model, &mut snapshot_due);
        if snapshot_due.is_some_and(|d| Instant::now() >= d) {
            snapshot_due = None;
            match call(&path, &request::snapshot("v2")) {
                Ok(snap) => {
                    model.set_snapshot(&snap);
                    let fleet = snap["panes"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p.get("host").is_some()));
                    if fleet {
                        snapshot_due = Some(Instant::now() + FLEET_REFRESH);
                    }
                }
                Err(e) => model.message = format!("snapshot: {e}"),
            }
        }
        term.draw(|f| draw(f, &model, SystemTime::now()))
            .map_err(|e| CliError::io("drawing", e))?;
        let wait = snapshot_due.map_or(Duration::from_millis(250), |d| {
            d.saturating_duration_since(Instant::now())
        });
        if !event::poll(wait).map_err(|e| CliError::io("terminal", e))? {
            continue;
        }
        let Event::Key(k) = event::read().map_err(|e| CliError::io("terminal", e))? else {
            continue;
        };
        match model.key(k) {
            Action::None => {}
            Action::Quit => return Ok(0),
            Action::Send(req) => {
                let cmd = req.name();
                model.message = match call(&path, &req) {
                    Ok(_) => format!("{cmd}: ok"),
                    Err(e) => format!("{cmd}: {e}"),
                };
                snapshot_due = Some(Instant::now());
            }
            Action::Attach(id) => {
                drop(screen.take());
                let status = std::env::current_exe().and_then(|exe| {
                    std::process::Command::new(exe)
                        .arg("--socket")
                        .arg(&path)
                        .arg("attach")
                        .arg(&id)
                        .status()
                });
                screen = Some(Screen::enter().map_err(|e| CliError::io("terminal", e))?);
                term.clear().map_err(|e| CliError::io("terminal", e))?;
                model.message = match status {
                    Ok(s) if s.success() => "detached".into(),
                    Ok(s) => format!("attach ended: {s}"),
                    Err(e) => format!("attach: {e}"),
                };
                snapshot_due = Some(Instant::now());
            }
        }
    }
}

/// Takes what the watch thread sent; schedules a snapshot when needed.
fn drain(rx: &Receiver<Feed>, model: &mut Model, snapshot_due: &mut Option<Instant>) {
    while let Ok(feed) = rx.try_recv() {
        match feed {
            Feed::Connected => {
                model.connected = true;
                model.message = "connected".into();
                *snapshot_due = Some(Instant::now());
            }
            Feed::Event(ev) => {
                model.on_event(&ev);
                snapshot_due.get_or_insert_with(|| Instant::now() + SNAPSHOT_COALESCE);
            }
            Feed::Lost(why) => {
                if model.connected {
                    model.message = format!("lost the daemon ({why}); reconnecting");
                }
                model.connected = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;

    #[test]
    fn a_rows_health_is_the_seeds_word_as_state_gives_it() {
        let row = |extra: Value| {
            let mut p = json!({"state":"working","pid":7,"exit":null,
                "last_event_at":"2026-11-22T10:00:00.000Z","stalled":false});
            if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
                p.extend(e.clone());
            }
            health_text(&p)
        };
        assert_eq!(row(json!({})), "productive");
        assert_eq!(row(json!({"stalled": true})), "silent");
        assert_eq!(row(json!({"last_event_at": null})), "starting");
        assert_eq!(row(json!({"state": "blocked"})), "waiting_permission");
        assert_eq!(row(json!({"state": "idle"})), "idle");
        let held = json!({"holds":[{"by":"loop","since":"…"}]});
        assert_eq!(row(held), "looping");
        assert_eq!(row(json!({"pid": null})), "", "not running");
        assert_eq!(row(json!({"exit": {"code": 0}})), "", "ended");
    }

    fn snap() -> Value {
        json!({"panes":[
            {"id":"aaaaaaaa-1","name":"alpha","state":"working","state_since":"2026-11-22T10:00:00.000Z",
             "started_at":"2026-11-22T09:00:00.000Z","runtime":"claude","paused":false,"stalled":false,
             "usage":{"input_tokens":1200,"output_tokens":300,"cost_usd":0.42},
             "last_tool":{"name":"bash","summary":"cargo test","at":"…"}},
            {"id":"bbbbbbbb-2","name":"beta","state":"blocked","state_since":"2026-11-22T10:05:00.000Z",
             "started_at":"2026-11-22T09:30:00.000Z","runtime":"pi","paused":false,"stalled":true,
             "usage":{"input_tokens":10,"output_tokens":5,"cost_usd":1.5},
             "approval":{"id":"q1","tool":"rm -rf build"}}
        ]})
    }

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn keys_name_the_selected_pane() {
        let mut m = Model::new();
        m.set_snapshot(&snap());
        assert_eq!(
            m.key(key(KeyCode::Char('p'))),
            Action::Send(request::agent(Wire::PauseAgent, "aaaaaaaa-1"))
        );
        m.key(key(KeyCode::Down));
        assert_eq!(
            m.key(key(KeyCode::Char('a'))),
            Action::Send(request::decide(Wire::Approve, "bbbbbbbb-2", None, None))
        );
        // Kill asks first; anything but y cancels.
        assert_eq!(m.key(key(KeyCode::Char('k'))), Action::None);
        assert_eq!(m.key(key(KeyCode::Char('n'))), Action::None);
        assert_eq!(m.key(key(KeyCode::Char('k'))), Action::None);
        assert_eq!(
            m.key(key(KeyCode::Char('y'))),
            Action::Send(request::agent(Wire::KillAgent, "bbbbbbbb-2"))
        );
        assert_eq!(
            m.key(key(KeyCode::Enter)),
            Action::Attach("bbbbbbbb-2".into())
        );
    }

    #[test]
    fn filter_and_sort_pick_the_rows() {
        let mut m = Model::new();
        m.set_snapshot(&snap());
        m.key(key(KeyCode::Char('f'))); // idle
        assert!(m.visible().is_empty());
        m.key(key(KeyCode::Char('f'))); // working
        assert_eq!(m.visible().len(), 1);
        for _ in 0..4 {
            m.key(key(KeyCode::Char('f')));
        }
        assert_eq!(m.filter, None);
        m.sort = SortBy::Cost;
        assert_eq!(s(m.visible()[0], "name"), "beta");
        m.sort = SortBy::State;
        assert_eq!(s(m.visible()[0], "state"), "blocked");
    }

    #[test]
    fn a_planned_stop_reads_stopped_and_a_failure_error() {
        let failed = json!({"state":"error","supervision":{"actual":"exited"}});
        assert_eq!(state_text(&failed), "error");
        let stopped = json!({"state":"error","stalled":true,"supervision":{"actual":"stopped"}});
        assert_eq!(state_text(&stopped), "stopped stall");
        assert_eq!(state_color(&state_text(&stopped)), Color::DarkGray);
        assert_eq!(state_color(&state_text(&failed)), Color::Red);
    }

    #[test]
    fn the_table_fits_80_columns_with_approval_and_help() {
        let mut m = Model::new();
        m.set_snapshot(&snap());
        m.connected = true;
        let mut term = Terminal::new(TestBackend::new(80, 12)).expect("terminal");
        let now = parse_time("2026-11-22T10:10:00.000Z").expect("time");
        term.draw(|f| draw(f, &m, now)).expect("draw");
        let text: String = term
            .backend()
            .buffer()
            .content()
            .chunks(80)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        assert!(text.contains("alpha"), "{text}");
        assert!(text.contains("blocked stall"), "{text}");
        assert!(text.contains("APPROVE? rm -rf"), "{text}");
        assert!(text.contains("bash cargo"), "{text}");
        assert!(text.contains("$0.42") || text.contains("0.42"), "{text}");
        assert!(text.contains("a approve"), "{text}");
        assert!(text.contains("q quit"), "{text}");
    }

    #[test]
    fn fleet_rows_show_their_host_and_an_unreachable_one_is_dimmed() {
        let mut m = Model::new();
        m.set_snapshot(&json!({"panes": [
            {"id": "h1/aaaaaaaa-1", "host": "h1", "agent": "pi", "state": "working",
             "state_since": "2026-11-22T10:00:00.000Z", "started_at": "2026-11-22T10:00:00.000Z"},
            {"id": "h2/bbbbbbbb-2", "host": "h2", "agent": "pi", "state": "idle",
             "unreachable_since": "2026-11-22T10:09:00.000Z",
             "state_since": "2026-11-22T10:00:00.000Z", "started_at": "2026-11-22T10:00:00.000Z"}
        ]}));
        m.connected = true;
        let mut term = Terminal::new(TestBackend::new(80, 8)).expect("terminal");
        let now = parse_time("2026-11-22T10:10:00.000Z").expect("time");
        term.draw(|f| draw(f, &m, now)).expect("draw");
        let buf = term.backend().buffer();
        let lines: Vec<String> = buf
            .content()
            .chunks(80)
            .map(|row| row.iter().map(|c| c.symbol()).collect())
            .collect();
        let header = lines.iter().position(|l| l.contains("HOST")).expect("HOST");
        assert!(lines[header].trim_start().starts_with("HOST"), "{lines:?}");
        let h2 = lines
            .iter()
            .position(|l| l.contains("bbbbbbbb"))
            .expect("h2 row");
        assert!(lines[h2].trim_start().starts_with("h2"), "{lines:?}");
        let dim = |y: usize| {
            let x = lines[y].find("bbbbbbbb").unwrap_or(0) as u16;
            buf[(x, y as u16)].modifier.contains(Modifier::DIM)
        };
        assert!(dim(h2), "{lines:?}");
        let h1 = lines
            .iter()
            .position(|l| l.contains("aaaaaaaa"))
            .expect("h1 row");
        let x = lines[h1].find("aaaaaaaa").unwrap_or(0) as u16;
        assert!(!buf[(x, h1 as u16)].modifier.contains(Modifier::DIM));
    }

    #[test]
    fn events_update_the_row_and_the_timeline() {
        let mut m = Model::new();
        m.set_snapshot(&snap());
        let ev: WatchEvent = serde_json::from_value(json!({
            "seq": 3, "at": "2026-11-22T10:06:00.000Z", "event": "state",
            "pane": "aaaaaaaa-1", "from": "working", "to": "done"
        }))
        .expect("event");
        m.on_event(&ev);
        assert_eq!(s(m.panes.first().expect("pane"), "state"), "done");
        assert_eq!(m.timeline["aaaaaaaa-1"].len(), 2);
        assert_eq!(m.events["aaaaaaaa-1"].len(), 1);
    }
}
