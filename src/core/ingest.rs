//! Line framing for byte chunks as a PTY delivers them.
//!
//! A PTY read ends anywhere: mid-line, mid-UTF-8 sequence, after a `\r`.
//! [`LineFramer`] splits on `\n`, strips one trailing `\r` (the PTY's ONLCR
//! or an agent's CRLF), keeps a partial line across chunks, and caps a line:
//! once a line passes `max`, the rest of it is skipped up to the next newline
//! without being buffered, so one runaway line costs at most `max` bytes.

use memchr::memchr;

/// The default cap on one JSONL line (1 MiB).
pub const DEFAULT_MAX_LINE: usize = 1 << 20;

/// One framed unit handed to the caller.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete line without its `\n` (and without a trailing `\r`).
    Line(FramedLine<'a>),
    /// A line longer than the cap; reported once, when the cap is passed.
    Oversize,
}

/// A complete line's bytes, and the same bytes as text when they are
/// known to be UTF-8: the framer checks each chunk whole, once, so a
/// parser that wants text need not check every line again (on a stream of
/// short lines that per-line check cost more than the chunk's).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FramedLine<'a> {
    bytes: &'a [u8],
    text: Option<&'a str>,
}

impl<'a> FramedLine<'a> {
    /// A line not yet known to be UTF-8.
    pub fn new(bytes: &'a [u8]) -> Self {
        FramedLine { bytes, text: None }
    }

    /// A line already checked as UTF-8.
    pub fn from_text(text: &'a str) -> Self {
        FramedLine {
            bytes: text.as_bytes(),
            text: Some(text),
        }
    }

    pub fn bytes(self) -> &'a [u8] {
        self.bytes
    }

    /// The line as text if it was checked whole; `None` says nothing
    /// about whether it is UTF-8.
    pub fn text(self) -> Option<&'a str> {
        self.text
    }
}

#[derive(Debug)]
pub struct LineFramer {
    partial: Vec<u8>,
    max: usize,
    /// Inside an oversize line: drop bytes until the next newline.
    discarding: bool,
}

impl LineFramer {
    pub fn new(max: usize) -> Self {
        LineFramer {
            partial: Vec::new(),
            max: max.max(1),
            discarding: false,
        }
    }

    pub fn max_line(&self) -> usize {
        self.max
    }

    /// Bytes held for a line that has not ended yet.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Splits `chunk` into frames. Lines that lie wholly inside `chunk` are
    /// passed as slices of it; only a line spanning chunks is copied.
    ///
    /// The chunk is checked as UTF-8 once: a line wholly inside its valid
    /// part is passed with its text ([`FramedLine::text`]).
    pub fn feed(&mut self, chunk: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        let text = utf8_prefix(chunk);
        let mut rest = chunk;
        let mut start = 0;
        while let Some(pos) = memchr(b'\n', rest) {
            let head = &rest[..pos];
            rest = &rest[pos + 1..];
            let at = start;
            start += pos + 1;
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if self.partial.is_empty() {
                if head.len() > self.max {
                    on_frame(Frame::Oversize);
                    continue;
                }
                let line = strip_cr(head);
                // `\n` and `\r` are ASCII: the ends are char boundaries.
                let line = match text.get(at..at + line.len()) {
                    Some(t) => FramedLine::from_text(t),
                    None => FramedLine::new(line),
                };
                on_frame(Frame::Line(line));
                continue;
            }
            if self.partial.len() + head.len() > self.max {
                self.partial.clear();
                on_frame(Frame::Oversize);
                continue;
            }
            self.partial.extend_from_slice(head);
            on_frame(Frame::Line(FramedLine::new(strip_cr(&self.partial))));
            self.partial.clear();
        }
        if rest.is_empty() || self.discarding {
            return;
        }
        if self.partial.len() + rest.len() > self.max {
            self.partial = Vec::new();
            self.discarding = true;
            on_frame(Frame::Oversize);
            return;
        }
        self.partial.extend_from_slice(rest);
    }

    /// End of stream: a final line without `\n` is still a line.
    pub fn finish(&mut self, mut on_frame: impl FnMut(Frame<'_>)) {
        self.discarding = false;
        if self.partial.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.partial);
        on_frame(Frame::Line(FramedLine::new(strip_cr(&line))));
    }
}

/// The longest prefix of `chunk` that is UTF-8, as text. A read may end
/// inside a character, or an agent may print bytes that are not UTF-8:
/// lines before that point keep their text.
fn utf8_prefix(chunk: &[u8]) -> &str {
    match std::str::from_utf8(chunk) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&chunk[..e.valid_up_to()]).unwrap_or_default(),
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    match line.split_last() {
        Some((b'\r', head)) => head,
        _ => line,
    }
}

/// True for a line with nothing but ASCII white space in it.
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framer: &mut LineFramer, chunks: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        for c in chunks {
            framer.feed(c, |f| {
                out.push(match f {
                    Frame::Line(l) => Some(l.bytes().to_vec()),
                    Frame::Oversize => None,
                })
            });
        }
        framer.finish(|f| {
            out.push(match f {
                Frame::Line(l) => Some(l.bytes().to_vec()),
                Frame::Oversize => None,
            })
        });
        out
    }

    #[test]
    fn splits_strips_cr_and_joins_partials() {
        let mut f = LineFramer::new(64);
        let got = frames(&mut f, &[b"ab\r\ncd", b"ef\n\ngh"]);
        assert_eq!(
            got,
            vec![
                Some(b"ab".to_vec()),
                Some(b"cdef".to_vec()),
                Some(vec![]),
                Some(b"gh".to_vec())
            ]
        );
    }

    #[test]
    fn oversize_is_reported_once_and_skipped_to_newline() {
        let mut f = LineFramer::new(4);
        let got = frames(&mut f, &[b"123", b"456", b"789\nok\n"]);
        assert_eq!(got, vec![None, Some(b"ok".to_vec())]);
        assert_eq!(f.pending(), 0);
        let mut f = LineFramer::new(4);
        assert_eq!(
            frames(&mut f, &[b"123456\nab\n"]),
            vec![None, Some(b"ab".to_vec())]
        );
        let mut f = LineFramer::new(4);
        assert_eq!(frames(&mut f, &[b"12", b"3456\n"]), vec![None]);
    }

    /// Each complete line with its text (`None`: not checked whole).
    fn texts(framer: &mut LineFramer, chunk: &[u8]) -> Vec<(Vec<u8>, Option<String>)> {
        let mut out = Vec::new();
        framer.feed(chunk, |f| {
            if let Frame::Line(l) = f {
                if let Some(t) = l.text() {
                    assert_eq!(t.as_bytes(), l.bytes(), "text is the line's bytes");
                }
                out.push((l.bytes().to_vec(), l.text().map(str::to_string)));
            }
        });
        out
    }

    #[test]
    fn lines_of_a_utf8_chunk_carry_their_text() {
        let mut f = LineFramer::new(64);
        let some = |s: &str| (s.as_bytes().to_vec(), Some(s.to_string()));
        assert_eq!(
            texts(&mut f, "{\"a\":1}\r\nΩ é\n\n".as_bytes()),
            vec![some("{\"a\":1}"), some("Ω é"), some("")]
        );
        // A line that spans chunks is joined from the held part: bytes only.
        assert_eq!(texts(&mut f, b"ab"), vec![]);
        assert_eq!(
            texts(&mut f, b"cd\nef\n"),
            vec![(b"abcd".to_vec(), None), some("ef")]
        );
    }

    #[test]
    fn lines_past_a_bad_byte_or_a_cut_character_are_bytes_only() {
        let mut f = LineFramer::new(64);
        let got = texts(&mut f, b"ok\nbad\xff\nlater\n");
        assert_eq!(
            got,
            vec![
                (b"ok".to_vec(), Some("ok".to_string())),
                (b"bad\xff".to_vec(), None),
                (b"later".to_vec(), None),
            ]
        );
        // A read that ends inside a character: the lines before it keep
        // their text, and the character is whole in the joined line.
        let omega = "Ω".as_bytes();
        let mut chunk = b"x\n".to_vec();
        chunk.push(omega[0]);
        assert_eq!(
            texts(&mut f, &chunk),
            vec![(b"x".to_vec(), Some("x".to_string()))]
        );
        assert_eq!(
            texts(&mut f, &[omega[1], b'\n']),
            vec![("Ω".as_bytes().to_vec(), None)]
        );
    }

    #[test]
    fn never_buffers_more_than_max() {
        let mut f = LineFramer::new(1000);
        let big = vec![b'x'; 10_000];
        for _ in 0..100 {
            f.feed(&big, |_| {});
            assert!(f.pending() <= 1000);
        }
    }
}
