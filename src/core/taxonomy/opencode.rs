//! OpenCode adapter (to be completed).

use crate::core::signal::Observation;
use crate::core::taxonomy::Malformed;

#[derive(Debug, Default)]
pub struct OpenCodeState {}

impl OpenCodeState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let _: serde::de::IgnoredAny = serde_json::from_slice(line).map_err(|_| Malformed)?;
        Ok(Observation::unknown())
    }
}
