//! The socket request parser on arbitrary bytes: what any local user (or a
//! jailed agent) can send colibrid on one line.
//!
//! Properties: `Request::parse` never panics; whatever it answers, the
//! daemon's reply line for it (`ok_line` / `err_line`) is one line of valid
//! JSON, and an error echoes the request's `id` only when the line was a
//! JSON object that had one. Run: `cargo +nightly fuzz run request_parse`.

#![no_main]

use colibri::protocol::{err_line, ok_line, Request, RequestError};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|line: &[u8]| {
    // The daemon frames requests on `\n` first: a request never holds one.
    if line.contains(&b'\n') {
        return;
    }
    let reply = match Request::parse(line) {
        Ok(req) => {
            assert!(colibri::protocol::COMMAND_NAMES.contains(&req.command.name()));
            ok_line(req.id.as_ref(), &Value::Null)
        }
        Err((id, err)) => {
            if matches!(err, RequestError::Json(_) | RequestError::NotObject) {
                assert!(id.is_none(), "an id from a line that is no object");
            }
            err_line(id.as_ref(), err.code(), &err.to_string())
        }
    };
    assert_eq!(reply.last(), Some(&b'\n'));
    assert_eq!(reply.iter().filter(|b| **b == b'\n').count(), 1);
    let v: Value = serde_json::from_slice(&reply).expect("the reply is JSON");
    assert!(v["ok"].is_boolean());
});
