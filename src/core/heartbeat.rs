//! The agent heartbeat: an agent declared with `heartbeat = "10m"` is given
//! a prompt on that schedule, while it is idle, that runs the control
//! plane's loop (the seed's "Agent Heartbeat": state, tasks, session, act,
//! report).
//!
//! Pure, like the rest of the core: [`Heartbeat::poll`] takes the time and
//! whether the pane could take a prompt now, and says whether to send it,
//! when to ask again, or that it is owed until the pane is ready. The
//! daemon arms a deadline for the answer's time and asks again when an
//! owed pane becomes ready, so nothing polls.

use std::time::Duration;

use crate::core::time::Timestamp;

/// The shortest period: a heartbeat is a prompt, and each costs a model
/// call.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);

/// The heartbeat prompt when the agent's recipe gives none: the seed's
/// loop, in the commands colibri serves an agent on `$COLIBRI_SOCKET`.
pub const DEFAULT_PROMPT: &str = "colibri heartbeat: run your control-plane loop now. \
1. State: send {\"cmd\":\"state\",\"pane\":\"$COLIBRI_PANE_ID\"} to the socket $COLIBRI_SOCKET \
(is budget left, are you active?). \
2. Tasks: claim one for your role with {\"cmd\":\"task-claim\",\"pane\":\"$COLIBRI_PANE_ID\",\"role\":\"<your role>\"} \
or `colibri task claim --role <your role>` (what is assigned to you?). \
3. Session: recall what you did last time. \
4. Act: acknowledge the task (task-ack, within 3 minutes) and do it, or escalate. \
5. Report: task-done or task-fail with the result, or an activity post. \
If nothing is assigned to you, answer in one line and stay idle.";

/// The longest heartbeat prompt: it is written to the agent's input each
/// period, whose queue holds 256 KiB.
pub const MAX_PROMPT: usize = 16 * 1024;

/// A heartbeat prompt says something and fits [`MAX_PROMPT`].
pub fn check_prompt(prompt: &str) -> Result<(), String> {
    if prompt.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    if prompt.len() > MAX_PROMPT {
        return Err(format!("{} bytes; at most {MAX_PROMPT}", prompt.len()));
    }
    Ok(())
}

/// Whether `period` may be a heartbeat's.
pub fn check_period(period: Duration) -> Result<(), String> {
    if period < MIN_PERIOD {
        return Err(format!(
            "a heartbeat comes at most once a second (got {period:?})"
        ));
    }
    Ok(())
}

/// What [`Heartbeat::poll`] decided.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Beat {
    /// Send the prompt now; the next is due a period from now.
    Send,
    /// Not yet: ask again at this time.
    At(Timestamp),
    /// Due, but the pane cannot take it (working, blocked, paused, not
    /// running): ask again when it can.
    Owed,
}

/// One agent's heartbeat schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    period: Duration,
    /// The last prompt sent, or the start of the process.
    since: Timestamp,
    owed: bool,
}

impl Heartbeat {
    /// A schedule counted from `since` (the start of the process): the
    /// first prompt is due a period later.
    pub fn new(period: Duration, since: Timestamp) -> Heartbeat {
        Heartbeat {
            period,
            since,
            owed: false,
        }
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// When the next prompt is due.
    pub fn due(&self) -> Timestamp {
        self.since.plus(self.period)
    }

    /// A prompt came due while the pane could not take it.
    pub fn owed(&self) -> bool {
        self.owed
    }

    /// A new period (a reload): the schedule keeps its last prompt.
    pub fn set_period(&mut self, period: Duration) {
        self.period = period;
    }

    /// `ready`: the pane is running, idle and not paused. At most one
    /// prompt per period, however often it is asked.
    pub fn poll(&mut self, now: Timestamp, ready: bool) -> Beat {
        let due = self.due();
        if now < due {
            return Beat::At(due);
        }
        if !ready {
            self.owed = true;
            return Beat::Owed;
        }
        self.since = now;
        self.owed = false;
        Beat::Send
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_millis(secs * 1000)
    }

    #[test]
    fn an_idle_agent_gets_one_prompt_per_period() {
        let mut hb = Heartbeat::new(Duration::from_secs(600), at(0));
        assert_eq!(hb.poll(at(1), true), Beat::At(at(600)));
        assert_eq!(hb.poll(at(600), true), Beat::Send);
        // Asked again at once (a spurious wakeup): not before the period.
        assert_eq!(hb.poll(at(600), true), Beat::At(at(1200)));
        assert_eq!(hb.poll(at(900), true), Beat::At(at(1200)));
        assert_eq!(hb.poll(at(1250), true), Beat::Send);
        assert_eq!(hb.due(), at(1850));
    }

    #[test]
    fn a_busy_agent_owes_the_prompt_until_it_is_ready() {
        let mut hb = Heartbeat::new(Duration::from_secs(60), at(0));
        assert_eq!(hb.poll(at(60), false), Beat::Owed);
        assert!(hb.owed());
        assert_eq!(hb.poll(at(75), false), Beat::Owed);
        // It went idle at 90: the owed prompt goes now, and the next a
        // period after it, not after the time it first came due.
        assert_eq!(hb.poll(at(90), true), Beat::Send);
        assert!(!hb.owed());
        assert_eq!(hb.poll(at(120), true), Beat::At(at(150)));
    }

    #[test]
    fn a_new_period_keeps_the_last_prompt() {
        let mut hb = Heartbeat::new(Duration::from_secs(60), at(0));
        assert_eq!(hb.poll(at(60), true), Beat::Send);
        hb.set_period(Duration::from_secs(10));
        assert_eq!(hb.period(), Duration::from_secs(10));
        assert_eq!(hb.poll(at(65), true), Beat::At(at(70)));
    }

    #[test]
    fn prompts_say_something_and_fit_the_input_queue() {
        assert_eq!(check_prompt(DEFAULT_PROMPT), Ok(()));
        assert!(check_prompt(" \n").is_err());
        assert!(check_prompt(&"x".repeat(MAX_PROMPT + 1)).is_err());
    }

    #[test]
    fn periods_under_a_second_are_refused() {
        assert!(check_period(Duration::from_millis(999)).is_err());
        assert!(check_period(Duration::ZERO).is_err());
        assert_eq!(check_period(MIN_PERIOD), Ok(()));
    }
}
