//! Syslog severities and facilities by name: a leaf module, so that both
//! `config` (which parses them from the file and flags) and `daemon::alert`
//! (which sends with them) depend on it and not on each other.

use std::fmt;
use std::str::FromStr;

/// Syslog facilities (RFC 5424 §6.2.1), each shifted into place so that
/// `facility as u8 | severity as u8` is the PRI value. The C names are kept
/// so the variants read as syslog(3)'s `LOG_*` constants.
#[allow(non_camel_case_types)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Facility {
    LOG_KERN = 0 << 3,
    LOG_USER = 1 << 3,
    LOG_MAIL = 2 << 3,
    LOG_DAEMON = 3 << 3,
    LOG_AUTH = 4 << 3,
    LOG_SYSLOG = 5 << 3,
    LOG_LPR = 6 << 3,
    LOG_NEWS = 7 << 3,
    LOG_UUCP = 8 << 3,
    LOG_CRON = 9 << 3,
    LOG_AUTHPRIV = 10 << 3,
    LOG_FTP = 11 << 3,
    LOG_NTP = 12 << 3,
    LOG_AUDIT = 13 << 3,
    LOG_ALERT = 14 << 3,
    LOG_CLOCK_DAEMON = 15 << 3,
    LOG_LOCAL0 = 16 << 3,
    LOG_LOCAL1 = 17 << 3,
    LOG_LOCAL2 = 18 << 3,
    LOG_LOCAL3 = 19 << 3,
    LOG_LOCAL4 = 20 << 3,
    LOG_LOCAL5 = 21 << 3,
    LOG_LOCAL6 = 22 << 3,
    LOG_LOCAL7 = 23 << 3,
}

impl Facility {
    /// Every facility, in code order.
    pub const ALL: [Facility; 24] = [
        Facility::LOG_KERN,
        Facility::LOG_USER,
        Facility::LOG_MAIL,
        Facility::LOG_DAEMON,
        Facility::LOG_AUTH,
        Facility::LOG_SYSLOG,
        Facility::LOG_LPR,
        Facility::LOG_NEWS,
        Facility::LOG_UUCP,
        Facility::LOG_CRON,
        Facility::LOG_AUTHPRIV,
        Facility::LOG_FTP,
        Facility::LOG_NTP,
        Facility::LOG_AUDIT,
        Facility::LOG_ALERT,
        Facility::LOG_CLOCK_DAEMON,
        Facility::LOG_LOCAL0,
        Facility::LOG_LOCAL1,
        Facility::LOG_LOCAL2,
        Facility::LOG_LOCAL3,
        Facility::LOG_LOCAL4,
        Facility::LOG_LOCAL5,
        Facility::LOG_LOCAL6,
        Facility::LOG_LOCAL7,
    ];
}

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

/// Parses a facility name (`daemon`, `user`, `local0`..`local7`, ...), as
/// syslog.conf(5) writes it or with syslog(3)'s `log_` prefix, in any case.
pub fn parse_facility(name: &str) -> Option<Facility> {
    let name = name.to_ascii_lowercase();
    let bare = name.strip_prefix("log_").unwrap_or(&name);
    Facility::ALL
        .into_iter()
        .find(|facility| facility_name(*facility) == bare)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facilities_read_as_syslog_conf_and_syslog_3_spell_them() {
        assert_eq!(parse_facility("local7"), Some(Facility::LOG_LOCAL7));
        assert_eq!(parse_facility("LOG_DAEMON"), Some(Facility::LOG_DAEMON));
        assert_eq!(parse_facility("Auth"), Some(Facility::LOG_AUTH));
        assert_eq!(parse_facility("log_"), None);
        assert_eq!(parse_facility("local8"), None);
        for facility in Facility::ALL {
            assert_eq!(parse_facility(facility_name(facility)), Some(facility));
        }
    }

    #[test]
    fn a_facility_and_a_severity_make_the_rfc_5424_pri() {
        // RFC 5424 §6.2.1's own examples: local4.notice is 165, kern.emerg 0.
        assert_eq!(Facility::LOG_LOCAL4 as u8 | Severity::Notice as u8, 165);
        assert_eq!(Facility::LOG_KERN as u8 | Severity::Emerg as u8, 0);
        assert_eq!(Facility::LOG_DAEMON as u8 | Severity::Err as u8, 27);
    }
}
