//! The PTY masters of ended panes, kept open until the frames of their
//! wakeup have left ([`DeferredCloses`]).
//!
//! An owner below the daemon's verbs: the loop stores one and `log_flow`
//! and `after_wakeup` tell it when a wakeup ends; it holds fds only.

use std::os::fd::OwnedFd;

/// The most ended panes' PTY masters kept open for the frames to leave
/// first.
const DEFERRED_CLOSES_MAX: usize = 256;

/// PTY masters of panes that ended, closed once the frames are sent:
/// closing a PTY costs the loop tens of microseconds and wakes a kernel
/// worker on its CPU, which a trace of one exit showed delaying its
/// notice. Closed at the end of a wakeup with no frame waiting for the
/// writers; while agents stream the writers are always behind, so one
/// wakeup later at the latest, and at once past [`DEFERRED_CLOSES_MAX`] or
/// while an accept waits for fds.
#[derive(Debug, Default)]
pub(crate) struct DeferredCloses {
    this_wakeup: Vec<OwnedFd>,
    last_wakeup: Vec<OwnedFd>,
}

impl DeferredCloses {
    pub(crate) fn push(&mut self, fd: OwnedFd) {
        self.this_wakeup.push(fd);
    }

    /// Closes every fd kept (an accept waits for one).
    pub(crate) fn close_all(&mut self) {
        self.this_wakeup.clear();
        self.last_wakeup.clear();
    }

    /// At the end of a wakeup: closes all once no frame waits for the
    /// writers (or too many are kept), otherwise those kept since the last
    /// wakeup, keeping this one's for the next.
    pub(crate) fn end_of_wakeup(&mut self, writers_behind: bool) {
        if !writers_behind || self.this_wakeup.len() >= DEFERRED_CLOSES_MAX {
            self.close_all();
        } else {
            self.last_wakeup = std::mem::take(&mut self.this_wakeup);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use super::*;

    /// A kept fd and the peer that sees it closed (end of file).
    fn watched_fd() -> (OwnedFd, UnixStream) {
        let (kept, peer) = UnixStream::pair().expect("socketpair");
        peer.set_nonblocking(true).expect("nonblocking");
        (OwnedFd::from(kept), peer)
    }

    fn closed(peer: &mut UnixStream) -> bool {
        matches!(peer.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn kept_fds_close_when_no_frame_waits_or_one_wakeup_later() {
        let mut closes = DeferredCloses::default();
        let (fd, mut peer) = watched_fd();
        closes.push(fd);
        closes.end_of_wakeup(true);
        assert!(!closed(&mut peer), "kept while frames wait");
        let (fd2, mut peer2) = watched_fd();
        closes.push(fd2);
        closes.end_of_wakeup(true);
        assert!(closed(&mut peer), "closed one wakeup later");
        assert!(!closed(&mut peer2));
        closes.end_of_wakeup(false);
        assert!(closed(&mut peer2), "closed once no frame waits");
    }

    #[test]
    fn kept_fds_close_at_once_past_the_bound_or_for_an_accept() {
        let mut closes = DeferredCloses::default();
        let peers: Vec<UnixStream> = (0..DEFERRED_CLOSES_MAX)
            .map(|_| {
                let (fd, peer) = watched_fd();
                closes.push(fd);
                peer
            })
            .collect();
        closes.end_of_wakeup(true);
        for mut p in peers {
            assert!(closed(&mut p), "past the bound: closed");
        }
        let (fd, mut peer) = watched_fd();
        closes.push(fd);
        closes.close_all();
        assert!(closed(&mut peer), "an accept waits: closed");
    }
}
