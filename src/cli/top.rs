//! `colibri top`: a live view of the panes (placeholder replaced below).
use std::path::Path;

use crate::cli::CliError;

pub fn run(_socket: Option<&Path>) -> Result<u8, CliError> {
    Err(CliError::Runtime("not yet".into()))
}
