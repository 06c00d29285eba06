//! Coleo's stuck-loop escalation ladder: an agent caught stuck again goes
//! up one rung each time, and productive work brings it back down.
//!
//! The rungs (the seed's levels 0 to 3): interrupt it and give it a
//! different prompt; force a compaction of its context; kill and respawn
//! it (resumed in its session where the harness can resume); notify a
//! human. Past the top it stays there: each further catch notifies again.
//!
//! Pure: [`Ladder::stuck`] and [`Ladder::productive`] take what happened
//! and return what to do; the daemon (`daemon::escalation`) carries it
//! out.

use crate::core::time::Timestamp;

/// What the daemon does at a rung.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rung {
    /// Level 0: interrupt the turn and give a different prompt.
    Interrupt,
    /// Level 1: compact the agent's context the harness's own way.
    Compact,
    /// Level 2: kill and respawn (resumed in its session).
    Respawn,
    /// Level 3: ask a human (an `escalate` verdict: alert, notify).
    Notify,
}

impl Rung {
    pub fn level(self) -> u8 {
        match self {
            Rung::Interrupt => 0,
            Rung::Compact => 1,
            Rung::Respawn => 2,
            Rung::Notify => 3,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Rung::Interrupt => "interrupt",
            Rung::Compact => "compact",
            Rung::Respawn => "respawn",
            Rung::Notify => "notify",
        }
    }

    fn at(level: u8) -> Rung {
        match level {
            0 => Rung::Interrupt,
            1 => Rung::Compact,
            2 => Rung::Respawn,
            _ => Rung::Notify,
        }
    }
}

/// The different prompt of level 0 (the seed's "Interrupt + different
/// prompt"; its loop recovery message).
pub const INTERRUPT_PROMPT: &str = "colibri: you appear stuck, repeating yourself without \
progress. Stop, reassess your task from what you know, and try a different approach; \
if you cannot make progress, say so (`colibri task fail ID REASON`).";

/// How long after its last climb an agent caught stuck starts at the
/// bottom again: its agents without tasks never do productive work to
/// reset it.
pub const LADDER_DECAY: std::time::Duration = std::time::Duration::from_secs(3600);

/// One agent's place on the ladder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ladder {
    /// The rung the next catch climbs to.
    next: u8,
    /// When it last climbed.
    last: Option<Timestamp>,
}

impl Ladder {
    /// The agent was caught stuck at `now` (looping again, or idle after a
    /// prompt it did not act on): the rung to carry out, one above the
    /// last.
    pub fn stuck(&mut self, now: Timestamp) -> Rung {
        // Stuck again after a long quiet spell is a new episode: the ladder
        // does not stay at the top for an agent that was fine meanwhile.
        if self
            .last
            .is_some_and(|last| now.since(last) >= LADDER_DECAY)
        {
            *self = Ladder::default();
        }
        let rung = Rung::at(self.next);
        self.next = self.next.saturating_add(1).min(Rung::Notify.level());
        self.last = Some(now);
        rung
    }

    /// A ladder read back after a restart of colibrid: the next catch
    /// climbs to `next` (capped at the top), as if it had last climbed at
    /// `now`.
    pub fn resumed(next: u8, now: Timestamp) -> Ladder {
        Ladder {
            next: next.min(Rung::Notify.level()),
            last: Some(now),
        }
    }

    /// The rung the next catch climbs to, as the agent records keep it.
    pub fn next_level(&self) -> u8 {
        self.next
    }

    /// It did productive work (acknowledged or finished a task): back to
    /// the bottom. Returns whether it had climbed.
    pub fn productive(&mut self) -> bool {
        let climbed = self.last.is_some();
        *self = Ladder::default();
        climbed
    }

    /// When it last climbed, if it has since it last worked.
    pub fn last_climb(&self) -> Option<Timestamp> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(s * 1000)
    }

    #[test]
    fn each_catch_climbs_one_rung_in_order_and_stays_at_the_top() {
        let mut l = Ladder::default();
        let rungs: Vec<Rung> = (0..6).map(|n| l.stuck(at(n))).collect();
        assert_eq!(
            rungs,
            [
                Rung::Interrupt,
                Rung::Compact,
                Rung::Respawn,
                Rung::Notify,
                Rung::Notify,
                Rung::Notify
            ]
        );
        assert_eq!(l.last_climb(), Some(at(5)));
    }

    #[test]
    fn productive_work_brings_it_back_to_the_bottom() {
        let mut l = Ladder::default();
        assert!(!l.productive(), "nothing to reset");
        assert_eq!(l.stuck(at(1)), Rung::Interrupt);
        assert_eq!(l.stuck(at(2)), Rung::Compact);
        assert!(l.productive());
        assert_eq!(l.last_climb(), None);
        assert_eq!(l.stuck(at(3)), Rung::Interrupt);
    }

    #[test]
    fn levels_are_the_seeds() {
        let levels: Vec<(u8, &str)> = [Rung::Interrupt, Rung::Compact, Rung::Respawn, Rung::Notify]
            .iter()
            .map(|r| (r.level(), r.as_str()))
            .collect();
        assert_eq!(
            levels,
            [
                (0, "interrupt"),
                (1, "compact"),
                (2, "respawn"),
                (3, "notify")
            ]
        );
    }

    #[test]
    fn a_resumed_ladder_climbs_on_from_where_it_was() {
        let mut l = Ladder::default();
        l.stuck(at(1));
        l.stuck(at(2));
        let mut back = Ladder::resumed(l.next_level(), at(3));
        assert_eq!(back.stuck(at(4)), Rung::Respawn);
        assert_eq!(Ladder::resumed(200, at(0)).next_level(), 3, "capped");
        assert!(back.productive());
        assert_eq!(back.next_level(), 0);
    }

    #[test]
    fn a_catch_after_an_hour_of_quiet_starts_at_the_bottom() {
        let mut l = Ladder::default();
        l.stuck(at(0));
        l.stuck(at(10));
        assert_eq!(l.stuck(at(20)), Rung::Respawn);
        assert_eq!(l.stuck(at(20 + 3600)), Rung::Interrupt);
    }
}
