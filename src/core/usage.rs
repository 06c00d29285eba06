//! Token and cost accounting.
//!
//! Harnesses report usage in incompatible ways (per message, per call plus a
//! running total, thread-cumulative, final totals only). Each adapter turns
//! its form into a [`UsageUpdate`] that either adds to the pane's totals or
//! replaces them, so the pane itself only knows two operations.

/// Totals for one pane.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// US dollars as the harness estimated them; 0 when it reports none.
    pub cost_usd: f64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_usd += other.cost_usd;
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// How one line changes the pane's usage totals.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum UsageUpdate {
    #[default]
    None,
    /// Add this line's usage (per message, per call, per step).
    Add(Usage),
    /// The harness printed authoritative running totals: replace the token
    /// counts, and the cost too when `has_cost` (Gemini and Codex give none).
    Set { usage: Usage, has_cost: bool },
}

impl UsageUpdate {
    pub fn apply_to(&self, totals: &mut Usage) {
        match self {
            UsageUpdate::None => {}
            UsageUpdate::Add(u) => totals.add(u),
            UsageUpdate::Set { usage, has_cost } => {
                let cost = if *has_cost {
                    usage.cost_usd
                } else {
                    totals.cost_usd
                };
                *totals = Usage {
                    cost_usd: cost,
                    ..*usage
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_set() {
        let mut t = Usage::default();
        UsageUpdate::Add(Usage {
            input_tokens: 3,
            output_tokens: 4,
            cost_usd: 0.5,
            ..Usage::default()
        })
        .apply_to(&mut t);
        UsageUpdate::Add(Usage {
            input_tokens: 1,
            cost_usd: 0.25,
            ..Usage::default()
        })
        .apply_to(&mut t);
        assert_eq!(t.input_tokens, 4);
        assert_eq!(t.output_tokens, 4);
        assert!((t.cost_usd - 0.75).abs() < 1e-12);
        UsageUpdate::Set {
            usage: Usage {
                input_tokens: 10,
                ..Usage::default()
            },
            has_cost: false,
        }
        .apply_to(&mut t);
        assert_eq!(t.input_tokens, 10);
        assert_eq!(t.output_tokens, 0);
        assert!((t.cost_usd - 0.75).abs() < 1e-12);
        UsageUpdate::Set {
            usage: Usage {
                cost_usd: 2.0,
                ..Usage::default()
            },
            has_cost: true,
        }
        .apply_to(&mut t);
        assert!((t.cost_usd - 2.0).abs() < 1e-12);
    }
}
