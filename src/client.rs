//! A blocking NDJSON client for the daemon socket (to be written).
