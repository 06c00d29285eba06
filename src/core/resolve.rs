//! Which pane an operator means: a name, a full id, or a unique id prefix.
//!
//! Tables show the first 8 characters of an id, so those (and any unique
//! prefix of at least [`MIN_ID_PREFIX`] characters) must work wherever a
//! pane is named. The order is: a name, then a full id, then a prefix.
//! Declared names never read as ids ([`crate::core::spec::check_agent_name`]),
//! so for them the order never matters; it only settles the case of a
//! hand-spawned pane whose name happens to be hexadecimal.

use crate::core::spec::MIN_ID_PREFIX;

/// One pane as [`resolve`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub name: Option<String>,
}

/// Why a query names no single pane.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no agent {query:?} (give a name, a full id, or at least {MIN_ID_PREFIX} characters of one)")]
    NotFound { query: String },
    /// Every pane the query could mean, in the order given.
    #[error("{query:?} is ambiguous: it could be {}", list(.candidates))]
    Ambiguous {
        query: String,
        candidates: Vec<Candidate>,
    },
}

fn list(candidates: &[Candidate]) -> String {
    candidates
        .iter()
        .map(|c| match &c.name {
            Some(name) => format!("{} ({name})", c.id),
            None => c.id.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key of the one pane `query` names among `panes`, given as
/// `(name, id, key)`. Ids compare without regard to case (they are shown
/// lowercase, and may be typed from a log in capitals); names exactly.
pub fn resolve<'a, K, I>(query: &str, panes: I) -> Result<K, ResolveError>
where
    K: Clone,
    I: IntoIterator<Item = (Option<&'a str>, &'a str, K)>,
{
    let panes: Vec<(Option<&str>, &str, K)> = panes.into_iter().collect();
    let by_name: Vec<_> = panes.iter().filter(|p| p.0 == Some(query)).collect();
    if !by_name.is_empty() {
        return one(query, by_name);
    }
    if let Some(pane) = panes.iter().find(|p| p.1.eq_ignore_ascii_case(query)) {
        return Ok(pane.2.clone());
    }
    if query.chars().count() < MIN_ID_PREFIX {
        return Err(not_found(query));
    }
    let by_prefix: Vec<_> = panes
        .iter()
        .filter(|p| {
            p.1.get(..query.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(query))
        })
        .collect();
    one(query, by_prefix)
}

fn one<K: Clone>(query: &str, matches: Vec<&(Option<&str>, &str, K)>) -> Result<K, ResolveError> {
    match matches.as_slice() {
        [] => Err(not_found(query)),
        [only] => Ok(only.2.clone()),
        several => Err(ResolveError::Ambiguous {
            query: query.to_owned(),
            candidates: several
                .iter()
                .map(|p| Candidate {
                    id: p.1.to_owned(),
                    name: p.0.map(str::to_owned),
                })
                .collect(),
        }),
    }
}

fn not_found(query: &str) -> ResolveError {
    ResolveError::NotFound {
        query: query.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "dc663815-1111-4000-8000-000000000001";
    const B: &str = "dc663899-2222-4000-8000-000000000002";
    const C: &str = "7a01b2c3-3333-4000-8000-000000000003";

    fn panes() -> Vec<(Option<&'static str>, &'static str, u32)> {
        vec![(Some("fixer"), A, 0), (None, B, 1), (Some("writer"), C, 2)]
    }

    #[test]
    fn a_name_resolves() {
        assert_eq!(resolve("fixer", panes()), Ok(0));
        assert_eq!(resolve("writer", panes()), Ok(2));
    }

    #[test]
    fn a_full_id_resolves_in_any_case() {
        assert_eq!(resolve(B, panes()), Ok(1));
        assert_eq!(resolve(&C.to_uppercase(), panes()), Ok(2));
    }

    #[test]
    fn a_unique_prefix_of_four_or_more_resolves() {
        assert_eq!(resolve("7a01", panes()), Ok(2));
        assert_eq!(resolve("dc663815", panes()), Ok(0));
        assert_eq!(resolve("DC663899-2", panes()), Ok(1));
    }

    #[test]
    fn a_prefix_shorter_than_four_is_not_found_even_when_unique() {
        assert_eq!(
            resolve("7a0", panes()),
            Err(ResolveError::NotFound {
                query: "7a0".into()
            })
        );
    }

    #[test]
    fn an_ambiguous_prefix_lists_every_candidate() {
        let err = resolve("dc66", panes());
        assert_eq!(
            err,
            Err(ResolveError::Ambiguous {
                query: "dc66".into(),
                candidates: vec![
                    Candidate {
                        id: A.into(),
                        name: Some("fixer".into())
                    },
                    Candidate {
                        id: B.into(),
                        name: None
                    },
                ],
            })
        );
        let text = err.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(
            text.contains(A) && text.contains("(fixer)") && text.contains(B),
            "{text}"
        );
    }

    #[test]
    fn nothing_matches() {
        for query in [
            "",
            "nobody",
            "ffff",
            "dc663815-1111-4000-8000-0000000000019",
        ] {
            assert!(
                matches!(resolve(query, panes()), Err(ResolveError::NotFound { .. })),
                "{query:?}"
            );
        }
    }

    #[test]
    fn a_name_wins_over_an_id_prefix() {
        // A hand-spawned pane may carry a hexadecimal name; naming it still
        // reaches it.
        let panes = vec![(Some("7a01"), A, 0), (None, C, 1)];
        assert_eq!(resolve("7a01", panes), Ok(0));
    }

    #[test]
    fn two_panes_with_one_name_are_ambiguous() {
        // A finished pane keeps its name until removed; a new one by the
        // same name must not be picked silently.
        let panes = vec![(Some("fixer"), A, 0), (Some("fixer"), C, 1)];
        assert!(matches!(
            resolve("fixer", panes),
            Err(ResolveError::Ambiguous { candidates, .. }) if candidates.len() == 2
        ));
    }

    #[test]
    fn a_non_ascii_query_does_not_split_a_character() {
        assert!(matches!(
            resolve("dc6é", panes()),
            Err(ResolveError::NotFound { .. })
        ));
    }
}
