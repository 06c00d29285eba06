//! syslog alerts (to be written).
