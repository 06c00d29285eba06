//! Syslog severities and facilities by name: a leaf module, so that both
//! `config` (which parses them from the file and flags) and `daemon::alert`
//! (which sends with them) depend on it and not on each other.

use std::fmt;
use std::str::FromStr;

pub use ::syslog::Facility;

/// Syslog severities, most severe first, so `a < b` means `a` is more severe.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Emerg = 0,
    Alert = 1,
    Crit = 2,
    Err = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
    Debug = 7,
}

impl Severity {
    /// The canonical syslog.conf name, as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Emerg => "emerg",
            Severity::Alert => "alert",
            Severity::Crit => "crit",
            Severity::Err => "err",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
            Severity::Info => "info",
            Severity::Debug => "debug",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a name that is not a syslog severity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown syslog level {0:?} (expected emerg, alert, crit, err, warning, notice, info or debug)"
)]
pub struct UnknownSeverity(pub String);

impl FromStr for Severity {
    type Err = UnknownSeverity;

    /// Accepts the syslog.conf(5) names and their common aliases.
    fn from_str(s: &str) -> Result<Severity, UnknownSeverity> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "emerg" | "panic" => Severity::Emerg,
            "alert" => Severity::Alert,
            "crit" => Severity::Crit,
            "err" | "error" => Severity::Err,
            "warning" | "warn" => Severity::Warning,
            "notice" => Severity::Notice,
            "info" => Severity::Info,
            "debug" => Severity::Debug,
            _ => return Err(UnknownSeverity(s.to_owned())),
        })
    }
}

/// Parses a facility name (`daemon`, `user`, `local0`..`local7`, ...).
pub fn parse_facility(name: &str) -> Option<Facility> {
    Facility::from_str(name).ok()
}

/// The syslog.conf name of a facility (the inverse of [`parse_facility`]).
pub fn facility_name(facility: Facility) -> &'static str {
    match facility {
        Facility::LOG_KERN => "kern",
        Facility::LOG_USER => "user",
        Facility::LOG_MAIL => "mail",
        Facility::LOG_DAEMON => "daemon",
        Facility::LOG_AUTH => "auth",
        Facility::LOG_SYSLOG => "syslog",
        Facility::LOG_LPR => "lpr",
        Facility::LOG_NEWS => "news",
        Facility::LOG_UUCP => "uucp",
        Facility::LOG_CRON => "cron",
        Facility::LOG_AUTHPRIV => "authpriv",
        Facility::LOG_FTP => "ftp",
        Facility::LOG_NTP => "ntp",
        Facility::LOG_AUDIT => "audit",
        Facility::LOG_ALERT => "alert",
        Facility::LOG_CLOCK_DAEMON => "clock_daemon",
        Facility::LOG_LOCAL0 => "local0",
        Facility::LOG_LOCAL1 => "local1",
        Facility::LOG_LOCAL2 => "local2",
        Facility::LOG_LOCAL3 => "local3",
        Facility::LOG_LOCAL4 => "local4",
        Facility::LOG_LOCAL5 => "local5",
        Facility::LOG_LOCAL6 => "local6",
        Facility::LOG_LOCAL7 => "local7",
    }
}

/// The message for a name that is not a facility.
pub fn unknown_facility(name: &str) -> String {
    format!("unknown syslog facility {name:?} (expected daemon, user, local0..local7, ...)")
}
