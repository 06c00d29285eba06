//! Text from agents made safe for a terminal, in one place.
//!
//! An agent's text (its lines, tool names, titles, error messages, its
//! pane's name) reaches the operator's terminal through the CLI, top,
//! attach's status lines and colibrid's own diagnostics. A terminal acts on
//! control characters, so each of these goes through this module: C0 and
//! DEL, the C1 range (U+0080..U+009F, which xterm and others read as CSI,
//! OSC and the rest even when they arrive UTF-8 encoded), and the
//! bidirectional formatting characters. A leaf: it depends on nothing in
//! the crate, so the daemon uses it without importing the CLI.

use std::borrow::Cow;
use std::fmt::Write as _;

/// A character a terminal may act on rather than show: every control
/// character but tab, and the bidi formatting characters.
pub fn is_terminal_active(c: char) -> bool {
    c != '\t' && (c.is_control() || is_bidi_control(c))
}

/// Makes text safe for a terminal: every control character except tab
/// (C0, including newline and carriage return, DEL, and the C1 range
/// U+0080..U+009F that some terminals read as CSI, OSC…) is shown as
/// `\xNN` or `\u{NN}`, so an agent cannot set the window title, clear the
/// screen or write the clipboard (OSC 52) through `colibri`. So are the
/// bidirectional formatting characters ("Trojan Source": U+202E makes
/// `rm -rf /` read as something else), so what the operator approves is
/// what it looks like. Every human-readable output of the CLI goes through
/// this one function; JSON output does not (the JSON encoder escapes C0
/// itself).
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    let is_control = is_terminal_active;
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_control(c) {
            out.push(c);
        } else if c.is_ascii() {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// The characters that reorder or isolate text in a bidirectional
/// display: ALM, LRM, RLM, the embeddings and overrides (LRE, RLE, PDF,
/// LRO, RLO) and the isolates (LRI, RLI, FSI, PDI).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// [`escape_controls`] on each line of a multi-line text, keeping its line
/// breaks (a lone `\r` or any other control inside a line is escaped).
pub fn escape_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_suffix('\n') {
            Some(body) => {
                out.push_str(&escape_controls(body));
                out.push('\n');
            }
            None => out.push_str(&escape_controls(line)),
        }
    }
    out
}

/// JSON text for a terminal: the same JSON, with every terminal-active
/// character that a JSON encoder leaves raw (DEL, C1, bidi controls; C0 is
/// already escaped by every encoder) written as a `\uXXXX` escape. Such a
/// character can only stand inside a string, where the escape means the
/// same character, so the text still parses to the same value.
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    // C0 in JSON text is white space between tokens (an encoder escapes
    // it inside strings) and stays; DEL and the rest can only be in strings.
    let active = |c: char| c == '\x7f' || (!c.is_ascii_control() && is_terminal_active(c));
    if !json.chars().any(active) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if !active(c) {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{unit:04x}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_and_bidi_are_escaped_in_json_and_the_value_is_kept() {
        let v = serde_json::json!({"t": "a\u{9b}31m\u{7f}\u{202e}b\tc", "k\u{85}": 1});
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        assert!(text.contains('\u{9b}'), "serde_json leaves C1 raw: {text}");
        let shown = json_for_terminal(&text);
        assert!(
            !shown.chars().any(|c| c != '\n' && is_terminal_active(c)),
            "{shown}"
        );
        assert!(
            shown.contains("\\u009b") && shown.contains("\\u202e"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
        assert_eq!(back, v);
        assert!(matches!(
            json_for_terminal("{\"a\":\"\\u001b\"}"),
            Cow::Borrowed(_)
        ));
    }
}
