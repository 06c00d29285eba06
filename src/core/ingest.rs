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
    Line(&'a [u8]),
    /// A line longer than the cap; reported once, when the cap is passed.
    Oversize,
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
    pub fn feed(&mut self, chunk: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        let mut rest = chunk;
        while let Some(pos) = memchr(b'\n', rest) {
            let head = &rest[..pos];
            rest = &rest[pos + 1..];
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if self.partial.is_empty() {
                if head.len() > self.max {
                    on_frame(Frame::Oversize);
                } else {
                    on_frame(Frame::Line(strip_cr(head)));
                }
                continue;
            }
            if self.partial.len() + head.len() > self.max {
                self.partial.clear();
                on_frame(Frame::Oversize);
                continue;
            }
            self.partial.extend_from_slice(head);
            on_frame(Frame::Line(strip_cr(&self.partial)));
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
        on_frame(Frame::Line(strip_cr(&line)));
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
                    Frame::Line(l) => Some(l.to_vec()),
                    Frame::Oversize => None,
                })
            });
        }
        framer.finish(|f| {
            out.push(match f {
                Frame::Line(l) => Some(l.to_vec()),
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
