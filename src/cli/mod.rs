//! The operator CLI (to be written).
