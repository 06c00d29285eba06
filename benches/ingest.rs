//! Ingest throughput of the pure core, against a naive baseline.
//!
//! Three realistic streams are generated in memory (no files): Pi small
//! events, Pi 4 KiB `message_update` lines, and a Claude stream-json
//! session. Each is fed to a `Pane` in 64 KiB chunks, as PTY reads deliver
//! them. The baseline frames the same bytes with `BufRead::lines` and
//! parses each line into a full `serde_json::Value` tree before matching on
//! its type: what a straightforward implementation does.
//!
//! Run: `cargo bench -p colibri-benches --bench ingest`. Figures go in docs/PERFORMANCE.md.

use std::hint::black_box;
use std::io::BufRead;

use colibri::core::ingest::DEFAULT_MAX_LINE;
use colibri::core::pane::{Pane, PaneId};
use colibri::core::taxonomy::Runtime;
use colibri::core::time::Timestamp;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn pi_small(turns: usize) -> (Vec<u8>, u64) {
    let mut s = String::new();
    let mut n = 0;
    s.push_str("{\"type\":\"session\",\"version\":3,\"id\":\"019e6a10-3c2f-7b41-9d0e-5a7c2e1f4b88\",\"timestamp\":\"2026-07-21T09:14:03.512Z\",\"cwd\":\"/home/ops/src/widget\"}\n");
    s.push_str("{\"type\":\"agent_start\"}\n");
    n += 2;
    for i in 0..turns {
        s.push_str("{\"type\":\"turn_start\"}\n");
        s.push_str(
            "{\"type\":\"message_start\",\"message\":{\"role\":\"assistant\",\"content\":[]}}\n",
        );
        for _ in 0..6 {
            s.push_str("{\"type\":\"message_update\",\"assistantMessageEvent\":{\"type\":\"text_delta\",\"delta\":\"ok \"}}\n");
        }
        s.push_str(&format!("{{\"type\":\"tool_execution_start\",\"toolCallId\":\"t{i}\",\"toolName\":\"bash\",\"args\":{{\"command\":\"make test\"}}}}\n"));
        s.push_str(&format!("{{\"type\":\"tool_execution_end\",\"toolCallId\":\"t{i}\",\"toolName\":\"bash\",\"result\":{{\"content\":[]}},\"isError\":false}}\n"));
        s.push_str("{\"type\":\"message_end\",\"message\":{\"role\":\"assistant\",\"content\":[],\"usage\":{\"input\":52,\"output\":18,\"cacheRead\":401,\"cacheWrite\":0,\"totalTokens\":471,\"cost\":{\"total\":0.0003}},\"stopReason\":\"toolUse\"}}\n");
        s.push_str("{\"type\":\"turn_end\"}\n");
        n += 12;
    }
    (s.into_bytes(), n)
}

fn pi_large(lines: usize) -> Vec<u8> {
    let delta = "The quick brown fox jumps over the lazy dog; ".repeat(90);
    let line = format!("{{\"type\":\"message_update\",\"assistantMessageEvent\":{{\"type\":\"text_delta\",\"contentIndex\":0,\"delta\":\"{}\"}}}}\n", &delta[..4000]);
    let mut s = String::with_capacity(line.len() * lines);
    for _ in 0..lines {
        s.push_str(&line);
    }
    s.into_bytes()
}

fn claude(turns: usize) -> (Vec<u8>, u64) {
    let mut s = String::new();
    s.push_str("{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f\",\"cwd\":\"/srv/app\",\"model\":\"claude-sonnet-4-5\",\"tools\":[\"Bash\",\"Read\"],\"mcp_servers\":[]}\n");
    let mut n = 1;
    for i in 0..turns {
        s.push_str(&format!("{{\"type\":\"assistant\",\"message\":{{\"id\":\"msg_{i}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[{{\"type\":\"text\",\"text\":\"Running the tests now.\"}}],\"stop_reason\":null,\"usage\":{{\"input_tokens\":4,\"cache_creation_input_tokens\":1520,\"cache_read_input_tokens\":11800,\"output_tokens\":96}}}},\"parent_tool_use_id\":null,\"session_id\":\"6f1c\",\"uuid\":\"u{i}a\"}}\n"));
        s.push_str(&format!("{{\"type\":\"assistant\",\"message\":{{\"id\":\"msg_{i}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"toolu_{i}\",\"name\":\"Bash\",\"input\":{{\"command\":\"cargo test\",\"description\":\"Run tests\"}}}}],\"stop_reason\":\"tool_use\",\"usage\":{{\"input_tokens\":4,\"cache_creation_input_tokens\":1520,\"cache_read_input_tokens\":11800,\"output_tokens\":96}}}},\"parent_tool_use_id\":null,\"session_id\":\"6f1c\",\"uuid\":\"u{i}b\"}}\n"));
        s.push_str(&format!("{{\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_{i}\",\"content\":\"test result: ok. 42 passed\",\"is_error\":false}}]}},\"parent_tool_use_id\":null,\"session_id\":\"6f1c\",\"uuid\":\"u{i}c\"}}\n"));
        n += 3;
    }
    s.push_str("{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"duration_ms\":48211,\"num_turns\":10,\"session_id\":\"6f1c\",\"total_cost_usd\":0.4172,\"usage\":{\"input_tokens\":212,\"output_tokens\":3810}}\n");
    (s.into_bytes(), n + 1)
}

fn fold(runtime: Runtime, bytes: &[u8]) -> u64 {
    fold_pane(runtime, bytes, false)
}

/// The fold, with the policies' line facts recorded (and taken after each
/// chunk) as the daemon records them when `facts`.
fn fold_pane(runtime: Runtime, bytes: &[u8], facts: bool) -> u64 {
    let mut pane = Pane::new(
        PaneId("bench".into()),
        "bench".into(),
        Some(runtime),
        DEFAULT_MAX_LINE,
        Timestamp::from_millis(1),
    );
    if facts {
        pane.record_facts();
    }
    let mut out = Vec::new();
    for chunk in bytes.chunks(64 * 1024) {
        pane.ingest(chunk, Timestamp::from_millis(2), &mut out);
        out.clear();
        black_box(pane.take_facts());
    }
    pane.counters().events
}

/// The daemon's path for each chunk: frame, fold, and log every line to a
/// session log (flushed after each 64 KiB chunk, as the loop does once per
/// wakeup). The difference to `fold` is what durability costs.
fn fold_and_log(runtime: Runtime, bytes: &[u8], dir: &std::path::Path) -> u64 {
    use colibri::core::ingest::Frame;
    use colibri::core::pane::LineKind;
    use colibri::daemon::{LineRecord, SessionStore, StoreConfig};
    let cfg = StoreConfig {
        dir: dir.to_path_buf(),
        flush_budget: 4 << 20,
        buffer_limit: 8 << 20,
        rotate_bytes: u64::MAX,
        rotate_turns: u64::MAX,
        retain: std::time::Duration::ZERO,
    };
    let Ok((mut store, _)) = SessionStore::open(cfg) else {
        return 0;
    };
    let t = Timestamp::from_millis(1_779_883_200_123);
    let mut pane = Pane::new(
        PaneId("bench".into()),
        "bench".into(),
        Some(runtime),
        DEFAULT_MAX_LINE,
        t,
    );
    let mut out = Vec::new();
    for chunk in bytes.chunks(64 * 1024) {
        // The daemon's path: the pane's single ingest entry, logging each line.
        pane.ingest_with(chunk, t, &mut out, |frame, kind| {
            let rec = match (kind, frame) {
                (LineKind::Event, Frame::Line(l)) => LineRecord::Parsed(l.bytes()),
                (LineKind::Held, Frame::Line(l)) => LineRecord::Event(l.bytes()),
                (LineKind::Malformed, Frame::Line(l)) => LineRecord::Raw(l.bytes()),
                (LineKind::Blank, _) => return,
                _ => LineRecord::Oversize(0),
            };
            store.append("bench-session", "bench-pane", rec, t);
        });
        out.clear();
        store.flush(4 << 20);
    }
    let _ = store.sync();
    pane.counters().events
}

/// The naive baseline: a whole `Value` tree per line.
fn naive(bytes: &[u8]) -> u64 {
    let mut events = 0;
    for line in bytes.lines() {
        let Ok(line) = line else { continue };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            if v.get("type").and_then(|t| t.as_str()).is_some() {
                events += 1;
            }
        }
    }
    events
}

/// The one-stream benchmark's line (`bench/streamer.c`): a 42-byte Pi
/// `turn_start`, 200,000 times.
fn pi_42_byte_lines() -> Vec<u8> {
    b"{\"type\":\"turn_start\",\"pad\":\"xxxxxxxxxxx\"}\n".repeat(200_000)
}

fn benches(c: &mut Criterion) {
    let (small, small_n) = pi_small(20_000);
    let short = pi_42_byte_lines();
    let large = pi_large(25_000);
    let (cl, cl_n) = claude(20_000);
    assert_eq!(fold(Runtime::Pi, &small), small_n);
    assert_eq!(naive(&small), small_n);
    assert_eq!(fold(Runtime::Claude, &cl), cl_n);

    let mut g = c.benchmark_group("pi_small_events");
    g.throughput(Throughput::Elements(small_n));
    g.sample_size(20);
    g.bench_function("colibri", |b| {
        b.iter(|| fold(Runtime::Pi, black_box(&small)))
    });
    g.bench_function("naive_value", |b| b.iter(|| naive(black_box(&small))));
    g.finish();

    // What logging every line costs, on the same small-event stream.
    let mut g = c.benchmark_group("pi_small_events_logged");
    g.throughput(Throughput::Elements(small_n));
    g.sample_size(10);
    let logdir =
        std::env::var_os("BENCH_DIR").map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    g.bench_function("fold_and_log", |b| {
        b.iter_batched(
            || tempfile::tempdir_in(&logdir).expect("tempdir"),
            |dir| fold_and_log(Runtime::Pi, black_box(&small), dir.path()),
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();

    // The daemon's fold of the one-stream benchmark's lines, with the
    // policies' line facts recorded as the daemon records them.
    let mut g = c.benchmark_group("pi_42_byte_lines");
    g.throughput(Throughput::Elements(200_000));
    g.sample_size(20);
    g.bench_function("colibri", |b| {
        b.iter(|| fold_pane(Runtime::Pi, black_box(&short), true))
    });
    g.finish();

    let mut g = c.benchmark_group("pi_4k_message_update");
    g.throughput(Throughput::Bytes(large.len() as u64));
    g.sample_size(20);
    g.bench_function("colibri", |b| {
        b.iter(|| fold(Runtime::Pi, black_box(&large)))
    });
    g.bench_function("naive_value", |b| b.iter(|| naive(black_box(&large))));
    g.finish();

    let mut g = c.benchmark_group("claude_stream");
    g.throughput(Throughput::Elements(cl_n));
    g.sample_size(20);
    g.bench_function("colibri", |b| {
        b.iter(|| fold(Runtime::Claude, black_box(&cl)))
    });
    g.bench_function("naive_value", |b| b.iter(|| naive(black_box(&cl))));
    g.finish();
}

criterion_group!(ingest, benches);
criterion_main!(ingest);
