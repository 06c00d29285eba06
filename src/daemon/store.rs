//! Durable session logs (to be written).
