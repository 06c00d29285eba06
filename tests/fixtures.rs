//! Data-driven checks of every harness adapter against streams.
//!
//! Each `tests/fixtures/<harness>/<case>.jsonl` is folded with the real fold
//! API and compared with `<case>.expect.json`. Every fixture is folded whole,
//! byte by byte, and cut into seeded random chunks, and all foldings must give
//! the same report; a fixture naming its `runtime` is also folded with
//! detection and must give the same report again. The fixtures were written
//! from `agent-formats.md`, not copied from agent output.
//!
//! `tests/real/<harness>/` holds our own streams that reproduce the event
//! structure and field set of real recordings found in public repositories
//! (listed, with what colibri reported on each, in `tests/real/SOURCES.md`);
//! they are checked the same way. Real recordings themselves are not
//! committed: when `COLIBRI_REAL_CORPUS` names a directory, every `*.jsonl`
//! under it is folded and compared with its `*.report.json`, written in the
//! same expect format.
//!
//! Expect fields (all but `timeline` and `state` optional): `timeline` (the
//! states from `idle` on), `state`, `runtime`, `session_id`, `usage`
//! (`input_tokens`, `output_tokens`, `cache_read_tokens`,
//! `cache_write_tokens`, `cost_usd` within 1e-9), `counters` (`events`,
//! `malformed`, `oversize`, `unknown`), `turns`, `last_tool` (`name`,
//! `summary`), `last_error_contains`, `last_error` (`null` for none),
//! `blocked_reason`, `max_line`, `exit` (a code, or `{"signal":N}`), and
//! `approvals` (one object per approval asked, in order, each field given
//! compared with the report's: `id`, `kind`, `request_id`, `tool`,
//! `summary`, `title`, `options`, `line`, `outcome` (`null`: still
//! pending), `closed_line`).

mod common;

use std::path::{Path, PathBuf};

use colibri::core::ingest::DEFAULT_MAX_LINE;
use colibri::core::pane::ExitStatus;
use colibri::core::state::AgentState;
use colibri::core::taxonomy::Runtime;
use colibri::fold::{fold_bytes, fold_chunks};
use colibri::protocol::FoldReport;
use serde_json::Value;

fn repo_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

/// Every `*.jsonl` under `root` (at any depth), sorted, each with the file
/// beside it that ends in `expect_suffix` instead of `.jsonl`.
fn cases(root: &Path, expect_suffix: &str) -> Vec<(PathBuf, PathBuf)> {
    common::jsonl_under(root)
        .into_iter()
        .map(|path| {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let expect = path.with_file_name(format!("{stem}{expect_suffix}"));
            assert!(
                expect.exists(),
                "{} has no {expect_suffix} file",
                path.display()
            );
            (path, expect)
        })
        .collect()
}

/// A small deterministic generator (SplitMix64), so chunkings are the same
/// on every run and a failure can be replayed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn seed_of(name: &str) -> u64 {
    // FNV-1a: stable across runs and platforms, unlike `DefaultHasher`.
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Cuts `bytes` into chunks of 1..=`max_chunk` bytes.
fn random_chunks<'a>(bytes: &'a [u8], rng: &mut SplitMix, max_chunk: u64) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = (1 + rng.next() % max_chunk) as usize;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

fn parse_exit(v: &Value) -> Option<ExitStatus> {
    match v {
        Value::Null => None,
        Value::Number(n) => Some(ExitStatus::Code(
            n.as_i64().expect("integer exit code") as i32
        )),
        Value::Object(o) => {
            let sig = o
                .get("signal")
                .and_then(Value::as_i64)
                .expect("exit object has a signal");
            Some(ExitStatus::Signal(sig as i32))
        }
        other => panic!("bad exit value {other}"),
    }
}

fn state_name(s: AgentState) -> &'static str {
    s.as_str()
}

/// Asserts every field `expect` names. Returns nothing; panics name the fixture.
fn check_expect(name: &str, expect: &Value, report: &FoldReport, turns: u64) {
    let timeline: Vec<&str> = report
        .timeline
        .iter()
        .map(|s| state_name(s.state))
        .collect();
    let want: Vec<&str> = expect["timeline"]
        .as_array()
        .expect("timeline is a list")
        .iter()
        .map(|s| s.as_str().expect("timeline entries are strings"))
        .collect();
    assert_eq!(timeline, want, "{name}: timeline");
    assert_eq!(
        state_name(report.state),
        expect["state"].as_str().expect("state"),
        "{name}: state"
    );
    if let Some(rt) = expect.get("runtime") {
        assert_eq!(
            report.runtime.map(Runtime::as_str),
            rt.as_str(),
            "{name}: runtime"
        );
    }
    if let Some(sid) = expect.get("session_id") {
        assert_eq!(
            report.session_id.as_deref(),
            sid.as_str(),
            "{name}: session_id"
        );
    }
    if let Some(usage) = expect.get("usage") {
        let got = serde_json::to_value(&report.usage).expect("usage serialises");
        for (key, want) in usage.as_object().expect("usage is an object") {
            if key == "cost_usd" {
                let (g, w) = (
                    got[key].as_f64().expect("cost"),
                    want.as_f64().expect("cost"),
                );
                assert!((g - w).abs() < 1e-9, "{name}: cost_usd {g} != {w}");
            } else {
                assert_eq!(&got[key], want, "{name}: usage.{key}");
            }
        }
    }
    if let Some(counters) = expect.get("counters") {
        let got = serde_json::to_value(&report.counters).expect("counters serialise");
        for (key, want) in counters.as_object().expect("counters is an object") {
            assert_eq!(&got[key], want, "{name}: counters.{key}");
        }
    }
    if let Some(want) = expect.get("turns") {
        assert_eq!(Some(turns), want.as_u64(), "{name}: turns");
    }
    if let Some(tool) = expect.get("last_tool") {
        let got = report.last_tool.as_ref();
        assert_eq!(
            got.map(|t| t.name.as_str()),
            tool["name"].as_str(),
            "{name}: last_tool.name"
        );
        if let Some(summary) = tool.get("summary") {
            assert_eq!(
                got.map(|t| t.summary.as_str()),
                summary.as_str(),
                "{name}: last_tool.summary"
            );
        }
    }
    if let Some(part) = expect.get("last_error_contains") {
        let part = part.as_str().expect("last_error_contains is a string");
        let got = report.last_error.as_deref().unwrap_or("");
        assert!(
            got.contains(part),
            "{name}: last_error {got:?} lacks {part:?}"
        );
    }
    if let Some(want) = expect.get("last_error") {
        assert_eq!(
            report.last_error.as_deref(),
            want.as_str(),
            "{name}: last_error"
        );
    }
    if let Some(want) = expect.get("approvals") {
        let want = want.as_array().expect("approvals is a list");
        let got = serde_json::to_value(&report.approvals).expect("approvals serialise");
        let got = got.as_array().expect("a list");
        assert_eq!(got.len(), want.len(), "{name}: approvals {got:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            for (key, value) in w.as_object().expect("an approval is an object") {
                let have = g.get(key).unwrap_or(&Value::Null);
                assert_eq!(have, value, "{name}: approvals[{i}].{key}");
            }
        }
    }
    if let Some(reason) = expect.get("blocked_reason") {
        assert_eq!(
            report.blocked_reason.as_deref(),
            reason.as_str(),
            "{name}: blocked_reason"
        );
    }
}

/// How hard a stream is folded: every cut for the streams in the repo,
/// fewer for recordings kept outside it, which may be megabytes long.
#[derive(Copy, Clone, PartialEq)]
enum Cuts {
    All,
    Some,
}

/// Folds one stream as its expect file says and asserts the report, then
/// folds it again cut in other places and asserts the same report.
fn fold_and_check(root: &Path, jsonl: &Path, expect_path: &Path, cuts: Cuts) {
    let name = jsonl
        .strip_prefix(root)
        .unwrap_or(jsonl)
        .display()
        .to_string();
    let bytes = std::fs::read(jsonl).expect("stream readable");
    let expect: Value =
        serde_json::from_slice(&std::fs::read(expect_path).expect("expect readable"))
            .expect("expect is JSON");
    let max_line = expect
        .get("max_line")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_MAX_LINE, |m| m as usize);
    let exit = expect.get("exit").and_then(parse_exit);
    let runtime = expect.get("runtime").map(|r| {
        Runtime::parse(r.as_str().expect("runtime is a string"))
            .expect("runtime is a known harness")
    });

    let (pane, report) = fold_chunks(runtime, max_line, [bytes.as_slice()], exit);
    check_expect(&name, &expect, &report, pane.turns());

    // Any cut of the stream gives the same report.
    if cuts == Cuts::All {
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(
            fold_chunks(runtime, max_line, bytewise, exit).1,
            report,
            "{name}: byte by byte"
        );
    }
    let rounds = if cuts == Cuts::All { 16 } else { 4 };
    let mut rng = SplitMix(seed_of(&name));
    for round in 0..rounds {
        let max_chunk = [3, 17, 64, 512][round % 4];
        let chunks = random_chunks(&bytes, &mut rng, max_chunk);
        let (p, r) = fold_chunks(runtime, max_line, chunks, exit);
        assert_eq!(r, report, "{name}: random chunks, round {round}");
        assert_eq!(p.turns(), pane.turns(), "{name}: turns, round {round}");
    }

    // Detection reaches the same report as a named runtime.
    if runtime.is_some() {
        let detected = fold_bytes(None, max_line, &bytes, exit);
        assert_eq!(detected, report, "{name}: with runtime detection");
    }
}

#[test]
fn every_fixture_folds_as_expected() {
    let root = repo_dir("fixtures");
    let all = cases(&root, ".expect.json");
    let count = all.len();
    for (jsonl, expect) in all {
        fold_and_check(&root, &jsonl, &expect, Cuts::All);
    }
    assert!(count >= 40, "expected about 40 fixtures, found {count}");
}

/// Our own streams shaped like the real recordings listed in
/// `tests/real/SOURCES.md`: at least three per harness that has any.
#[test]
fn every_real_shaped_stream_folds_as_expected() {
    let root = repo_dir("real");
    let all = cases(&root, ".expect.json");
    for harness in ["claude", "codex", "opencode"] {
        let n = all
            .iter()
            .filter(|(p, _)| p.parent().is_some_and(|d| d.ends_with(harness)))
            .count();
        assert!(
            n >= 3,
            "tests/real/{harness} holds {n} streams, want 3 or more"
        );
    }
    for (jsonl, expect) in all {
        fold_and_check(&root, &jsonl, &expect, Cuts::All);
    }
}

/// What the real harness programs printed under colibrid against the
/// scripted provider (`tests/recorded/README.md`): at least one stream per
/// harness that can run here.
#[test]
fn every_recording_of_a_real_harness_folds_as_expected() {
    let root = repo_dir("recorded");
    let all = cases(&root, ".expect.json");
    for harness in ["claude", "codex", "gemini", "opencode", "pi"] {
        let n = all
            .iter()
            .filter(|(p, _)| {
                p.parent()
                    .and_then(Path::file_name)
                    .and_then(|d| d.to_str())
                    .is_some_and(|d| d.starts_with(&format!("{harness}-")))
            })
            .count();
        assert!(n >= 1, "tests/recorded holds no stream of {harness}");
    }
    for (jsonl, expect) in all {
        fold_and_check(&root, &jsonl, &expect, Cuts::All);
    }
}

/// Real recordings kept outside the repository (see `tests/real/SOURCES.md`
/// for why they are not committed): each `X.jsonl` under the directory named
/// by `COLIBRI_REAL_CORPUS` must fold to what `X.report.json` says.
#[test]
fn real_recordings_outside_the_repo_fold_as_reported() {
    let Some(dir) = std::env::var_os("COLIBRI_REAL_CORPUS") else {
        eprintln!("COLIBRI_REAL_CORPUS is not set: no outside recordings folded");
        return;
    };
    let root = PathBuf::from(dir);
    let all = cases(&root, ".report.json");
    assert!(
        !all.is_empty(),
        "COLIBRI_REAL_CORPUS={} holds no *.jsonl",
        root.display()
    );
    for (jsonl, report) in all {
        fold_and_check(&root, &jsonl, &report, Cuts::Some);
    }
}

/// A Pi stream with one 3 MiB `message_update` line in the middle.
fn stream_with_huge_line() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(br#"{"type":"session","version":3,"id":"019e6a10-0000-7000-8000-00000000b16e","timestamp":"2026-07-21T09:14:03.512Z","cwd":"/srv"}"#);
    s.push(b'\n');
    s.extend_from_slice(b"{\"type\":\"agent_start\"}\n");
    s.extend_from_slice(b"{\"type\":\"turn_start\"}\n");
    s.extend_from_slice(br#"{"type":"message_update","message":{"role":"assistant","content":[{"type":"text","text":""#);
    s.extend(std::iter::repeat_n(b'x', 3 << 20));
    s.extend_from_slice(br#""}]},"assistantMessageEvent":{"type":"text_delta","delta":"x"}}"#);
    s.push(b'\n');
    s.extend_from_slice(br#"{"type":"message_end","message":{"role":"assistant","usage":{"input":100,"output":20,"cacheRead":0,"cacheWrite":0,"cost":{"total":0.01}},"stopReason":"stop"}}"#);
    s.push(b'\n');
    s.extend_from_slice(
        b"{\"type\":\"turn_end\",\"message\":{\"role\":\"assistant\",\"stopReason\":\"stop\"}}\n",
    );
    s.extend_from_slice(b"{\"type\":\"agent_end\",\"messages\":[],\"willRetry\":false}\n");
    s.extend_from_slice(b"{\"type\":\"agent_settled\"}\n");
    s
}

#[test]
fn multi_megabyte_line_is_skipped_under_the_cap_and_parsed_above_it() {
    let bytes = stream_with_huge_line();
    // PTY-sized reads, as the daemon sees them.
    let chunks: Vec<&[u8]> = bytes.chunks(64 * 1024).collect();

    let (_, capped) = fold_chunks(Some(Runtime::Pi), 1 << 20, chunks.clone(), None);
    assert_eq!(capped.counters.oversize, 1);
    assert_eq!(capped.counters.events, 7);
    assert_eq!(capped.counters.malformed, 0);
    assert_eq!(capped.state, AgentState::Done);
    assert_eq!(capped.usage.input_tokens, 100);
    let states: Vec<AgentState> = capped.timeline.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [AgentState::Idle, AgentState::Working, AgentState::Done]
    );
    // The skipped line still counts: `agent_settled` is line 8.
    assert_eq!(capped.timeline[2].line, 8);

    let (_, roomy) = fold_chunks(Some(Runtime::Pi), 8 << 20, chunks, None);
    assert_eq!(roomy.counters.oversize, 0);
    assert_eq!(roomy.counters.events, 8);
    assert_eq!(roomy.state, AgentState::Done);
    assert_eq!(roomy.usage, capped.usage);

    // Detection copes with a huge line before the runtime is known.
    let detected = fold_bytes(None, 1 << 20, &bytes, None);
    assert_eq!(detected, capped);
}
