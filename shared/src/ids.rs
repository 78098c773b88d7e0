//! Identifier validation. Tenant and session ids become parts of DynamoDB keys (`tenant:session:...`),
//! so an id containing a separator could forge another tenant's key; every id from outside passes
//! through here before it reaches a table.

use std::fmt;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} is missing")]
    Missing { kind: &'static str },
    #[error("{kind} is {len} characters long; the limit is {max}")]
    TooLong {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{kind} contains {found:?}; allowed characters are {allowed}")]
    BadChar {
        kind: &'static str,
        found: char,
        allowed: &'static str,
    },
}

/// Longest accepted tenant or session id.
pub const MAX_ID_LEN: usize = 128;

const ID_ALLOWED: &str = "letters, digits, '-', '_' and '.'";
const CONN_ALLOWED: &str = "letters, digits, '-', '_', '=', '+' and '/'";

fn check(
    kind: &'static str,
    s: &str,
    max: usize,
    allowed: &'static str,
    ok: impl Fn(char) -> bool,
) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Missing { kind });
    }
    if s.len() > max {
        return Err(IdError::TooLong {
            kind,
            len: s.len(),
            max,
        });
    }
    if let Some(found) = s.chars().find(|c| !ok(*c)) {
        return Err(IdError::BadChar {
            kind,
            found,
            allowed,
        });
    }
    Ok(())
}

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr, $allowed:expr, $ok:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const KIND: &'static str = $kind;

            pub fn parse(s: &str) -> Result<Self, IdError> {
                check($kind, s, $max, $allowed, $ok)?;
                Ok($name(s.to_string()))
            }

            /// Parses an optional value, reporting a missing one by name.
            pub fn parse_opt(s: Option<&str>) -> Result<Self, IdError> {
                Self::parse(s.unwrap_or(""))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }
    };
}

id_type!(
    /// A tenant id: 1-128 of letters, digits, `-`, `_`, `.`.
    TenantId, "tenantId", MAX_ID_LEN, ID_ALLOWED, id_char
);
id_type!(
    /// A session id: 1-128 of letters, digits, `-`, `_`, `.`.
    SessionId, "sessionId", MAX_ID_LEN, ID_ALLOWED, id_char
);
id_type!(
    /// An API Gateway connection id (base64-like, e.g. `L0SM9cOFvHcCIhw=`).
    ConnectionId,
    "connectionId",
    MAX_ID_LEN,
    CONN_ALLOWED,
    |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | '+' | '/')
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refuse_separators_and_overlong_values() {
        assert!(TenantId::parse("acme-1.eu_west").is_ok());
        assert_eq!(
            TenantId::parse("").unwrap_err(),
            IdError::Missing { kind: "tenantId" }
        );
        assert!(matches!(
            TenantId::parse("ab:cd").unwrap_err(),
            IdError::BadChar { found: ':', .. }
        ));
        assert!(matches!(
            SessionId::parse(&"s".repeat(4096)).unwrap_err(),
            IdError::TooLong { len: 4096, .. }
        ));
        assert!(SessionId::parse("a b").is_err());
        assert!(SessionId::parse("é").is_err());
        assert!(ConnectionId::parse("L0SM9cOFvHcCIhw=").is_ok());
        assert!(ConnectionId::parse("a:b").is_err());
        assert_eq!(
            SessionId::parse_opt(None).unwrap_err().to_string(),
            "sessionId is missing"
        );
    }
}

/// Property tests (docs/testing.md).
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    fn candidates() -> impl Strategy<Value = String> {
        prop_oneof![
            crate::fuzz::text(),
            "[a-zA-Z0-9._=+/:# -]{0,140}",
            "[a-z0-9]{120,136}",
        ]
    }

    fn invariants(s: &str, ok: impl Fn(char) -> bool) -> bool {
        !s.is_empty() && s.len() <= MAX_ID_LEN && s.chars().all(ok) && !s.contains(':')
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_ids`: any string either parses to an id that satisfies the invariants (1-128
        /// bytes, the allowed characters, never the key separator `:`) and displays as exactly
        /// what was parsed, or is refused with a typed [`IdError`] that names the id kind.
        #[test]
        fn fuzz_ids(s in candidates()) {
            match TenantId::parse(&s) {
                Ok(t) => {
                    prop_assert!(invariants(t.as_str(), id_char));
                    prop_assert_eq!(t.to_string(), s.clone());
                    prop_assert_eq!(TenantId::parse(&t.to_string()), Ok(t));
                }
                Err(e) => prop_assert!(e.to_string().starts_with("tenantId ")),
            }
            match SessionId::parse(&s) {
                Ok(t) => {
                    prop_assert!(invariants(t.as_str(), id_char));
                    prop_assert_eq!(s.parse::<SessionId>(), Ok(t));
                }
                Err(e) => prop_assert!(e.to_string().starts_with("sessionId ")),
            }
            match ConnectionId::parse(&s) {
                Ok(c) => {
                    let conn_char =
                        |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | '+' | '/');
                    prop_assert!(invariants(c.as_str(), conn_char));
                    prop_assert_eq!(c.to_string(), s);
                }
                Err(e) => prop_assert!(e.to_string().starts_with("connectionId ")),
            }
        }
    }
}
