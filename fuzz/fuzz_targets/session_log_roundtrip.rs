//! Anything the daemon writes to a session log reads back the same: each
//! input is one agent line, logged as an event and as raw text, then read
//! with the log reader's own rules (see `check_log_roundtrip`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    colibri::daemon::check_log_roundtrip(line);
});
