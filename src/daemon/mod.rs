//! colibrid: the single-threaded event loop and everything it owns.

pub mod alert;
pub mod store;
