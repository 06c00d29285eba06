//! The default policies (the destructive-command guard and loop detection,
//! on by default) must not trip on any normal run: every shipped sample,
//! every adapter fixture and every stream under `tests/real` folds with no
//! verdict, except the one fixture that records a destructive command on
//! purpose (Pi's `rpc-dialog`: an extension asks before `git push --force`),
//! where the guard must catch exactly that. A fold of a stream that does misbehave shows its verdicts at
//! the right lines.

mod common;

use std::path::Path;

use colibri::cli::fold::fold_input;
use colibri::core::ingest::DEFAULT_MAX_LINE;
use common::jsonl_under;

#[test]
fn no_shipped_sample_fixture_or_real_stream_trips_the_default_policies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["samples", "tests/fixtures", "tests/real"] {
        files.extend(jsonl_under(&root.join(dir)));
    }
    assert!(files.len() > 20, "too few streams found: {}", files.len());
    let mut tripped = Vec::new();
    for path in &files {
        let input = std::fs::read(path).expect("readable stream");
        let report = fold_input(input, None, DEFAULT_MAX_LINE, None)
            .unwrap_or_else(|e| panic!("{} does not fold: {e}", path.display()));
        for v in &report.verdicts {
            tripped.push(format!(
                "{}:{}: {} {}: {}",
                path.display(),
                v.line,
                v.rule,
                v.action,
                v.reason
            ));
        }
    }
    let expected: Vec<String> = ["pause", "escalate"]
        .iter()
        .map(|action| {
            format!(
                "{}:4: git_force_push {action}: git_force_push: git push --force origin main",
                root.join("tests/fixtures/pi/rpc-dialog.jsonl").display()
            )
        })
        .collect();
    assert_eq!(
        tripped,
        expected,
        "default policies tripped:\n{}",
        tripped.join("\n")
    );
}

#[test]
fn a_destructive_command_and_a_loop_show_in_the_fold_at_their_lines() {
    // A Claude stream: a header with the working directory, a harmless
    // `rm -rf ./build`, then `rm -rf ~`, then the same Read five times.
    let header = r#"{"type":"system","subtype":"init","session_id":"s","cwd":"/home/dev/p","tools":[],"model":"m"}"#;
    let tool = |id: u32, name: &str, input: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m{id}","role":"assistant","content":[{{"type":"tool_use","id":"t{id}","name":"{name}","input":{input}}}]}},"session_id":"s"}}"#
        )
    };
    let mut lines = vec![header.to_string()];
    lines.push(tool(1, "Bash", r#"{"command":"rm -rf ./build"}"#));
    lines.push(tool(2, "Bash", r#"{"command":"bash -c 'rm -fr ~'"}"#));
    for i in 0..5 {
        lines.push(tool(10 + i, "Read", r#"{"file_path":"/home/dev/p/a.rs"}"#));
    }
    let stream = lines.join("\n") + "\n";
    let report = fold_input(stream.into_bytes(), None, DEFAULT_MAX_LINE, None).expect("folds");
    let got: Vec<(u64, &str, &str)> = report
        .verdicts
        .iter()
        .map(|v| (v.line, v.rule.as_str(), v.action.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "rm_outside_cwd", "pause"),
            (3, "rm_outside_cwd", "escalate"),
            (8, "action_repeat", "pause"),
            (8, "action_repeat", "message"),
        ]
    );
    assert_eq!(
        report.verdicts[3].text.as_deref(),
        Some("You appear stuck. Compact your session and reassess.")
    );
}
