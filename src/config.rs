//! Daemon configuration (to be written).
