//! Encoding of session-log records: values in, JSONL bytes out, no I/O.
//!
//! Every record is appended to a caller-owned `Vec<u8>` so that, once that
//! buffer has grown to its working size, encoding allocates nothing. An
//! agent's event line is embedded verbatim as `"ev"`; it is never parsed and
//! re-serialised, so what the agent wrote is what the log keeps.

use std::io::Write as _;

use crate::core::time::Timestamp;
use crate::protocol::json_text::{push_escaped, push_str};

use super::{AnswerRecord, AttachRecord, ExitRecord, HostopRecord, PromptRecord, RequestRecord};

/// Length of `YYYY-MM-DDTHH:MM:SS.mmmZ`.
const TS_LEN: usize = 24;

/// Caches the RFC 3339 text of the last timestamp encoded, because a burst
/// of lines usually shares one arrival millisecond.
#[derive(Debug, Default)]
pub(super) struct TsText {
    ms: Option<u64>,
    text: [u8; TS_LEN],
}

impl TsText {
    /// The same text as [`Timestamp::to_rfc3339`], written without allocating.
    pub(super) fn get(&mut self, ts: Timestamp) -> &[u8] {
        if self.ms != Some(ts.as_millis()) {
            self.text = ts.rfc3339().as_bytes();
            self.ms = Some(ts.as_millis());
        }
        &self.text
    }
}

/// Appends `s` as a JSON string (with quotes). `s` may hold any bytes:
/// invalid UTF-8 sequences become U+FFFD, as `String::from_utf8_lossy` does.
pub(super) fn push_str_lossy(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for chunk in s.utf8_chunks() {
        push_escaped(out, chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{FFFD}".as_bytes());
        }
    }
    out.push(b'"');
}

fn push_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => push_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn push_int(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// `,"key":"value"` when there is a value, nothing otherwise (keys are
/// plain ASCII).
fn push_field_str(out: &mut Vec<u8>, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        push_key(out, key);
        push_str(out, v);
    }
}

/// `,"key":n` when there is a number.
fn push_field_int(out: &mut Vec<u8>, key: &str, value: Option<impl std::fmt::Display>) {
    if let Some(n) = value {
        push_key(out, key);
        push_int(out, n);
    }
}

fn push_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

/// `{"ts":"…","pane":"…"` — the common head of every record.
fn push_head(out: &mut Vec<u8>, ts: &mut TsText, now: Timestamp, pane: &str) {
    out.extend_from_slice(b"{\"ts\":\"");
    out.extend_from_slice(ts.get(now));
    out.extend_from_slice(b"\",\"pane\":");
    push_str(out, pane);
}

/// JSON whitespace, which may surround a value without changing it.
fn is_json_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Trims JSON whitespace at both ends. The log stores the trimmed event
/// because a parser hands back a value without its surrounding blanks; this
/// is what makes recovery byte-exact.
pub(super) fn trim_json_ws(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|&b| !is_json_ws(b))
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|&b| !is_json_ws(b))
        .map_or(start, |i| i + 1);
    &line[start..end]
}

/// Whether an event line can be embedded verbatim without breaking the log:
/// it must look like one object, hold no newline (a record is one line) and
/// be UTF-8 (JSON text is). The daemon's taxonomy already parsed the line,
/// so this is a cheap guard, not validation.
pub(super) fn embeddable_event(line: &[u8]) -> bool {
    line.first() == Some(&b'{')
        && line.last() == Some(&b'}')
        && memchr::memchr(b'\n', line).is_none()
        // ASCII first: most event lines are, and the check costs a third
        // of a full UTF-8 validation on a short line.
        && (line.is_ascii() || std::str::from_utf8(line).is_ok())
}

/// Whether a line an adapter parsed whole is embeddable and reads back,
/// by one scan: `{…}` of printable ASCII only. With no byte below 0x20
/// there is no newline ([`embeddable_event`]) and no raw control byte in
/// a string (the one thing the typed parse lets through that the reader
/// refuses, `scan::parsed_reads_back`); with none above 0x7F it is UTF-8.
/// Most event lines are like this, and the three checks each scan the
/// line. Any other line takes those checks.
pub(super) fn plain_object(line: &[u8]) -> bool {
    // A fold, not `all`: without an early exit the scan vectorises.
    let plain = line
        .iter()
        .fold(true, |plain, &b| plain & (0x20..0x80).contains(&b));
    plain && line.first() == Some(&b'{') && line.last() == Some(&b'}')
}

/// The head of the records of one read's lines, which share their time
/// and pane: made once, copied into each record.
#[derive(Debug, Default)]
pub(crate) struct RecordHead(Vec<u8>);

impl RecordHead {
    pub(super) fn set(&mut self, ts: &mut TsText, now: Timestamp, pane: &str) {
        self.0.clear();
        push_head(&mut self.0, ts, now, pane);
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// `{"ts":…,"pane":…,"ev":<line>}\n`; `line` must satisfy [`embeddable_event`].
#[cfg(any(test, fuzzing))]
pub(super) fn encode_event(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    pane: &str,
    line: &[u8],
) {
    push_head(out, ts, now, pane);
    event_tail(out, line);
}

/// What follows the head in [`encode_event`].
pub(super) fn event_tail(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(b",\"ev\":");
    out.extend_from_slice(line);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"raw":"<lossy text>"}\n`.
#[cfg(any(test, fuzzing))]
pub(super) fn encode_raw(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    pane: &str,
    line: &[u8],
) {
    push_head(out, ts, now, pane);
    raw_tail(out, line);
}

/// What follows the head in [`encode_raw`].
pub(super) fn raw_tail(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(b",\"raw\":");
    push_str_lossy(out, line);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"oversize":n}\n`.
#[cfg(test)]
pub(super) fn encode_oversize(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    pane: &str,
    dropped: u64,
) {
    push_head(out, ts, now, pane);
    oversize_tail(out, dropped);
}

/// What follows the head in `encode_oversize`.
pub(super) fn oversize_tail(out: &mut Vec<u8>, dropped: u64) {
    out.extend_from_slice(b",\"oversize\":");
    push_int(out, dropped);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"attach","agent":…,"runtime":…,"name":…,
/// "cwd":…,"argv":[…],"generation":n[,"jail":…][,"system_prompt":…]
/// [,"role":…][,"scope":[…]]}\n`.
pub(super) fn encode_attach(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &AttachRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"attach\",\"agent\":");
    push_str(out, rec.agent);
    out.extend_from_slice(b",\"runtime\":");
    push_opt_str(out, rec.runtime);
    out.extend_from_slice(b",\"name\":");
    push_opt_str(out, rec.name);
    out.extend_from_slice(b",\"cwd\":");
    push_opt_str(out, rec.cwd);
    out.extend_from_slice(b",\"argv\":[");
    for (i, a) in rec.argv.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(out, a);
    }
    out.extend_from_slice(b"],\"generation\":");
    push_int(out, rec.generation);
    push_field_str(out, "jail", rec.jail);
    push_field_str(out, "system_prompt", rec.system_prompt);
    push_field_str(out, "role", rec.role);
    if !rec.scope.is_empty() {
        out.extend_from_slice(b",\"scope\":[");
        for (i, p) in rec.scope.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_str(out, p);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"prompt","by":…,"text":…}\n`: a prompt the
/// daemon wrote to the agent's input (the heartbeat).
pub(super) fn encode_prompt(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &PromptRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"prompt\",\"by\":");
    push_str(out, rec.by);
    out.extend_from_slice(b",\"text\":");
    push_str(out, rec.text);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"exit","state":…[,"code":n][,"signal":n][,"reason":…]}\n`.
pub(super) fn encode_exit(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &ExitRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"exit\",\"state\":");
    push_str(out, rec.state);
    push_field_int(out, "code", rec.code);
    push_field_int(out, "signal", rec.signal);
    push_field_str(out, "reason", rec.reason);
    if rec.planned {
        out.extend_from_slice(b",\"planned\":true");
    }
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"removed"}\n`: the operator (or retention)
/// removed the pane; recovery does not bring it back.
pub(super) fn encode_removed(out: &mut Vec<u8>, ts: &mut TsText, now: Timestamp, pane: &str) {
    push_head(out, ts, now, pane);
    out.extend_from_slice(b",\"colibri\":\"removed\"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"answer","approval":…,"decision":…
/// [,"message":…][,"text":…],"by":…[,"uid":n]}\n`.
pub(super) fn encode_answer(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &AnswerRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"answer\",\"approval\":");
    push_str(out, rec.approval);
    push_field_str(out, "hook", rec.hook);
    out.extend_from_slice(b",\"decision\":");
    push_str(out, rec.decision);
    push_field_str(out, "message", rec.message);
    push_field_str(out, "text", rec.text);
    out.extend_from_slice(b",\"by\":");
    push_str(out, rec.by);
    push_field_int(out, "uid", rec.uid);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"hostop","op":…,"by":…[,"params":{…}],
/// "outcome":…[,"exit_code":n][,"signal":n],"ms":n,"output_bytes":n}\n`.
pub(super) fn encode_hostop(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &HostopRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"hostop\",\"op\":");
    push_str(out, rec.op);
    out.extend_from_slice(b",\"by\":");
    push_str(out, rec.by);
    if !rec.params.is_empty() {
        out.extend_from_slice(b",\"params\":{");
        for (i, (k, v)) in rec.params.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_str(out, k);
            out.push(b':');
            push_str(out, v);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b",\"outcome\":");
    push_str(out, rec.outcome);
    push_field_int(out, "exit_code", rec.exit_code);
    push_field_int(out, "signal", rec.signal);
    push_key(out, "ms");
    push_int(out, rec.ms);
    push_key(out, "output_bytes");
    push_int(out, rec.output_bytes);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"approval_request","approval":…,
/// "operation":…[,"reasoning":…][,"task_id":n][,"estimated_tokens":n]}\n`:
/// an agent asked the operator itself.
pub(super) fn encode_request(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    rec: &RequestRecord<'_>,
) {
    push_head(out, ts, now, rec.pane);
    out.extend_from_slice(b",\"colibri\":\"approval_request\",\"approval\":");
    push_str(out, rec.approval);
    out.extend_from_slice(b",\"operation\":");
    push_str(out, rec.operation);
    push_field_str(out, "reasoning", rec.reasoning);
    push_field_int(out, "task_id", rec.task_id);
    push_field_int(out, "estimated_tokens", rec.estimated_tokens);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":…,"colibri":"approval_expired","approval":…,"reason":…}\n`:
/// an agent's request ended unanswered while its agent ran on.
pub(super) fn encode_expired(
    out: &mut Vec<u8>,
    ts: &mut TsText,
    now: Timestamp,
    pane: &str,
    approval: &str,
    reason: &str,
) {
    push_head(out, ts, now, pane);
    out.extend_from_slice(b",\"colibri\":\"approval_expired\",\"approval\":");
    push_str(out, approval);
    out.extend_from_slice(b",\"reason\":");
    push_str(out, reason);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":"","colibri":"compacted","dropped":n}\n`, the first line
/// of a compacted log. It belongs to no pane, hence the empty pane id.
pub(super) fn encode_compacted(out: &mut Vec<u8>, ts: &mut TsText, now: Timestamp, dropped: u64) {
    push_head(out, ts, now, "");
    out.extend_from_slice(b",\"colibri\":\"compacted\",\"dropped\":");
    push_int(out, dropped);
    out.extend_from_slice(b"}\n");
}

/// `{"ts":…,"pane":"","colibri":"log_replaced","count":n}\n`, the first
/// line of a log started anew because the previous file was deleted or
/// replaced under the daemon (`count` such restarts so far).
pub(super) fn encode_log_replaced(out: &mut Vec<u8>, ts: &mut TsText, now: Timestamp, count: u32) {
    push_head(out, ts, now, "");
    out.extend_from_slice(b",\"colibri\":\"log_replaced\",\"count\":");
    push_int(out, count);
    out.extend_from_slice(b"}\n");
}

/// The session log's round trip, for the fuzzer and the property test:
/// `line`, logged as an agent line classified `Event` and again as `Raw`,
/// must read back as the log reader returns it: an `Event` that is a JSON
/// object byte for byte (without surrounding JSON whitespace), anything
/// else as its lossy UTF-8 text. A line one of the runtime adapters
/// accepts is logged as `Parsed` too, whose cheaper checks (the control
/// byte scan, and the one-scan `plain_object`) must then agree.
/// Panics on a mismatch.
#[doc(hidden)]
#[cfg(any(test, fuzzing))]
pub fn check_log_roundtrip(line: &[u8]) {
    use crate::core::taxonomy::{Adapter, Runtime};

    let mut ts = TsText::default();
    let now = Timestamp::from_millis(1_779_883_200_123);
    let trimmed = trim_json_ws(line);
    let as_event = embeddable_event(trimmed)
        && super::scan::reads_back(trimmed)
        && super::scan::nesting_within_limit(trimmed);
    let parsed = Runtime::ALL
        .iter()
        .any(|&rt| Adapter::new(rt).observe(line).is_ok());
    if parsed && embeddable_event(trimmed) {
        assert_eq!(
            super::scan::parsed_reads_back(trimmed) && super::scan::nesting_within_limit(trimmed),
            as_event,
            "the parsed line's check disagrees: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    if parsed && plain_object(trimmed) && super::scan::nesting_within_limit(trimmed) {
        assert!(
            as_event,
            "a plain parsed line that does not read back: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    let mut log = Vec::new();
    if as_event {
        encode_event(&mut log, &mut ts, now, "p", trimmed);
    } else {
        encode_raw(&mut log, &mut ts, now, "p", trimmed);
    }
    encode_raw(&mut log, &mut ts, now, "p", line);
    let (records, corrupt) = super::scan::complete_records(&log);
    assert_eq!(
        corrupt,
        0,
        "a record the reader rejects: {:?}",
        String::from_utf8_lossy(&log)
    );
    assert_eq!(records.len(), 2);
    let fields: Vec<super::scan::RecordFields<'_>> = records
        .iter()
        .map(|r| super::scan::RecordFields::parse(r.get().as_bytes()))
        .collect::<Option<_>>()
        .unwrap_or_else(|| panic!("records parse: {records:?}"));
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if as_event {
        let ev = fields[0].ev.map(|e| e.get().as_bytes().to_vec());
        assert_eq!(ev.as_deref(), Some(trimmed), "ev verbatim");
    } else {
        assert_eq!(fields[0].raw.as_deref(), Some(lossy(trimmed).as_str()));
    }
    assert_eq!(fields[1].raw.as_deref(), Some(lossy(line).as_str()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_text_matches_to_rfc3339_and_clamps() {
        let mut ts = TsText::default();
        for ms in [0, 1_779_883_200_123, 1_779_883_200_124, 1_779_883_200_124] {
            let t = Timestamp::from_millis(ms);
            assert_eq!(ts.get(t), t.to_rfc3339().as_bytes());
        }
        assert_eq!(
            ts.get(Timestamp::from_millis(u64::MAX)),
            b"9999-12-31T23:59:59.999Z"
        );
    }

    /// The policies count a line's log bytes as the line plus
    /// `LOG_RECORD_BYTES`: what an event record around it takes.
    #[test]
    fn an_event_record_adds_what_the_policies_count_for_it() {
        let mut ts = TsText::default();
        let now = Timestamp::from_millis(1_779_883_200_123);
        let pane = "3f2a9c1d-0000-4000-8000-000000000001";
        let line = br#"{"type":"turn_start"}"#;
        let mut out = Vec::new();
        encode_event(&mut out, &mut ts, now, pane, line);
        let added = (out.len() - line.len()) as u64;
        assert_eq!(added, crate::core::policy::LOG_RECORD_BYTES);
    }

    /// A malformed line is logged as a JSON string, its escapes and all
    /// (`\u001b` for an ESC): the policies count what the record takes,
    /// not the line's own length, or an agent printing control bytes
    /// wrote six times its output budget.
    #[test]
    fn a_raw_record_takes_what_the_policies_count_for_it() {
        let mut ts = TsText::default();
        let now = Timestamp::from_millis(1_779_883_200_123);
        let pane = "3f2a9c1d-0000-4000-8000-000000000001";
        let cases: [&[u8]; 5] = [
            b"plain text",
            b"\x1b[31mred\x1b[0m \"q\" \\ \t",
            &[1u8; 1000],
            b"bad\xff\xfeutf8\xe2\x82",
            "é\u{2028}".as_bytes(),
        ];
        for c in cases {
            let mut out = Vec::new();
            encode_raw(&mut out, &mut ts, now, pane, c);
            assert_eq!(
                out.len() as u64,
                crate::core::policy::raw_log_bytes(c),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    #[test]
    fn strings_escape_like_serde_json() {
        let cases: [&[u8]; 5] = [
            b"plain",
            b"q\"b\\s/",
            b"\n\r\t\x08\x0c\x01\x1f\x7f",
            "é\u{2028}".as_bytes(),
            b"bad\xff\xfeutf8\xe2\x82",
        ];
        for c in cases {
            let mut out = Vec::new();
            push_str_lossy(&mut out, c);
            let back: String = serde_json::from_slice(&out).expect("valid JSON string");
            assert_eq!(back, String::from_utf8_lossy(c));
        }
    }

    #[test]
    fn records_parse_and_embed_events_verbatim() {
        let mut ts = TsText::default();
        let now = Timestamp::from_millis(1_779_883_200_123);
        let mut out = Vec::new();
        let ev = br#"{"type":"turn_start", "x" : [1,2]}"#;
        encode_event(&mut out, &mut ts, now, "p\"1", ev);
        assert_eq!(
            out,
            br#"{"ts":"2026-05-27T12:00:00.123Z","pane":"p\"1","ev":{"type":"turn_start", "x" : [1,2]}}"#.iter().chain(b"\n").copied().collect::<Vec<u8>>()
        );
        encode_raw(&mut out, &mut ts, now, "p", b"not json\x00");
        encode_oversize(&mut out, &mut ts, now, "p", 12345);
        let argv = vec!["pi".to_string(), "--mode".into(), "a\"b".into()];
        let scope = vec!["/srv/data".to_string(), "../shared".into()];
        encode_attach(
            &mut out,
            &mut ts,
            now,
            &AttachRecord {
                pane: "p",
                agent: "pi",
                runtime: Some("pi"),
                name: None,
                cwd: Some("/r"),
                argv: &argv,
                generation: 2,
                jail: Some("j1"),
                system_prompt: Some("be \"brief\""),
                role: Some("sysadmin"),
                scope: &scope,
            },
        );
        encode_exit(
            &mut out,
            &mut ts,
            now,
            &ExitRecord {
                pane: "p",
                state: "error",
                code: Some(1),
                signal: None,
                reason: Some("boom"),
                planned: false,
            },
        );
        encode_compacted(&mut out, &mut ts, now, 7);
        encode_prompt(
            &mut out,
            &mut ts,
            now,
            &PromptRecord {
                pane: "p",
                by: "heartbeat",
                text: "run\nyour loop",
            },
        );
        let lines: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("every record parses"))
            .collect();
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[1]["raw"], "not json\u{0}");
        assert_eq!(lines[2]["oversize"], 12345);
        assert_eq!(lines[3]["argv"][2], "a\"b");
        assert_eq!(lines[3]["name"], serde_json::Value::Null);
        assert_eq!(lines[3]["generation"], 2);
        assert_eq!(lines[3]["jail"], "j1");
        assert_eq!(lines[3]["system_prompt"], "be \"brief\"");
        assert_eq!(lines[3]["role"], "sysadmin");
        assert_eq!(
            lines[3]["scope"],
            serde_json::json!(["/srv/data", "../shared"])
        );
        assert_eq!(lines[4]["code"], 1);
        assert!(lines[4].get("signal").is_none());
        assert_eq!(lines[5]["dropped"], 7);
        assert_eq!(lines[5]["pane"], "");
        assert_eq!(lines[6]["colibri"], "prompt");
        assert_eq!(lines[6]["by"], "heartbeat");
        assert_eq!(lines[6]["text"], "run\nyour loop");
    }

    #[test]
    fn trim_and_embeddable() {
        assert_eq!(trim_json_ws(b" \t{\"a\":1}\r"), b"{\"a\":1}");
        assert_eq!(trim_json_ws(b"  "), b"");
        assert!(embeddable_event(b"{}"));
        assert!(!embeddable_event(b"{\n}"));
        assert!(!embeddable_event(b"[1]"));
        assert!(!embeddable_event(b""));
        assert!(!embeddable_event(b"{\"a\":\"\xff\"}"));
    }
}
