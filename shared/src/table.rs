//! The shape of a Turnstile table (key schema, indexes, TTL attribute, stream), the table kinds,
//! their configured names and the attribute style. Each concept module describes its own table
//! with these types; [`crate::catalog`] assembles them. Nothing here knows a concept.

use serde::Serialize;

use crate::config::{check_table_name, ConfigError, Vars};

/// The tables Turnstile knows, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableKind {
    /// Per-tenant limits for WebSocket admission.
    Tenants,
    /// Sessions and their live connection ids; TTL + stream drive the sweeper.
    Sessions,
    /// The AWS WebSocket sample's "Limit table": open-connection counts, per-minute counters,
    /// connection rows.
    Counters,
    /// One GCRA bucket (TAT + `RateLimitState` fields) per key.
    Buckets,
    /// Fungible token buckets (rate-limiter-py compatible).
    FungibleTokens,
    /// rate-limiter-py's per-account limits with the serviceName index.
    Limits,
    /// rate-limiter-py's non-fungible reservations/tokens with the resourceId index.
    NonFungibleTokens,
}

impl TableKind {
    pub const ALL: [TableKind; 7] = [
        TableKind::Tenants,
        TableKind::Sessions,
        TableKind::Counters,
        TableKind::Buckets,
        TableKind::FungibleTokens,
        TableKind::Limits,
        TableKind::NonFungibleTokens,
    ];

    /// The WebSocket suite's tables.
    pub const WEBSOCKET: [TableKind; 3] =
        [TableKind::Tenants, TableKind::Sessions, TableKind::Counters];

    pub fn as_str(self) -> &'static str {
        match self {
            TableKind::Tenants => "tenants",
            TableKind::Sessions => "sessions",
            TableKind::Counters => "counters",
            TableKind::Buckets => "buckets",
            TableKind::FungibleTokens => "fungible-tokens",
            TableKind::Limits => "limits",
            TableKind::NonFungibleTokens => "non-fungible-tokens",
        }
    }

    pub fn parse(s: &str) -> Option<TableKind> {
        TableKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Which spelling of the rate-limiter-py attribute names a deployment's tables use: rate-limiter-py
/// writes camelCase (`resourceName`), its earlier table design snake_case (`resource_name`). Chosen
/// by `TURNSTILE_ATTRIBUTE_STYLE` so existing tables work unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttributeStyle {
    #[default]
    Camel,
    Snake,
}

impl AttributeStyle {
    pub const VAR: &'static str = "TURNSTILE_ATTRIBUTE_STYLE";

    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        match vars.get(Self::VAR).as_deref() {
            None | Some("camel") | Some("camelCase") => Ok(AttributeStyle::Camel),
            Some("snake") | Some("snake_case") => Ok(AttributeStyle::Snake),
            Some(other) => Err(ConfigError::Invalid {
                var: Self::VAR.into(),
                value: other.into(),
                reason: "expected camel or snake".into(),
            }),
        }
    }
}

/// Declares a rate-limiter-py table's attribute names, each in both styles (`field: "camelCase" /
/// "snake_case"`): `pub struct Attrs` with one `&'static str` per attribute, its `CAMEL` and
/// `SNAKE` values, and `Attrs::of(style)`.
macro_rules! styled_attrs {
    (
        $(#[$doc:meta])*
        pub struct Attrs {
            $($(#[$field_doc:meta])* $field:ident: $camel:literal / $snake:literal,)+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Attrs {
            $($(#[$field_doc])* pub $field: &'static str,)+
        }

        impl Attrs {
            pub const CAMEL: Attrs = Attrs { $($field: $camel,)+ };
            pub const SNAKE: Attrs = Attrs { $($field: $snake,)+ };

            pub fn of(style: $crate::table::AttributeStyle) -> Attrs {
                match style {
                    $crate::table::AttributeStyle::Camel => Attrs::CAMEL,
                    $crate::table::AttributeStyle::Snake => Attrs::SNAKE,
                }
            }
        }
    };
}
pub(crate) use styled_attrs;

/// Resolved names of every table and index, from env vars (see docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableNames {
    pub tenants: String,
    pub sessions: String,
    pub counters: String,
    pub buckets: String,
    pub fungible_tokens: String,
    pub limits: String,
    pub limit_service_index: String,
    pub non_fungible_tokens: String,
    pub resource_index: String,
}

/// Env var naming the prefix of Turnstile's own tables (default `turnstile-`).
pub const PREFIX_VAR: &str = "TURNSTILE_TABLE_PREFIX";
pub const DEFAULT_PREFIX: &str = "turnstile-";

impl TableNames {
    /// Every name derived from one prefix: `{prefix}tenants`, ..., and the rate-limiter-py tables from
    /// the base name `{prefix}limiter` with that library's suffixes.
    pub fn with_prefix(prefix: &str) -> Self {
        let base = format!("{prefix}limiter");
        TableNames {
            tenants: format!("{prefix}tenants"),
            sessions: format!("{prefix}sessions"),
            counters: format!("{prefix}counters"),
            buckets: format!("{prefix}buckets"),
            fungible_tokens: format!("{base}-fungible-tokens"),
            limits: format!("{base}-limits"),
            limit_service_index: format!("{base}-limits-service-index"),
            non_fungible_tokens: format!("{base}-non-fungible-tokens"),
            resource_index: format!("{base}-resource-index"),
        }
    }

    /// Reads `TURNSTILE_*_TABLE` and rate-limiter-py's own variables (`FUNGIBLE_TABLE`,
    /// `NON_FUNGIBLE_TABLE`, `LIMIT_TABLE`, `LIMIT_SERVICE_INDEX`, `NON_FUNGIBLE_RES_INDEX`, falling back
    /// to `LIMITER_TABLES_BASE_NAME` + that library's suffixes).
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let prefix = vars.string_or(PREFIX_VAR, DEFAULT_PREFIX);
        let d = TableNames::with_prefix(&prefix);
        let base = vars.get("LIMITER_TABLES_BASE_NAME");
        let lim = |var: &str, suffix: &str, dflt: &str| -> String {
            vars.get(var).unwrap_or_else(|| match &base {
                Some(b) => format!("{b}{suffix}"),
                None => dflt.to_string(),
            })
        };
        let names = TableNames {
            tenants: vars.string_or("TURNSTILE_TENANT_TABLE", &d.tenants),
            sessions: vars.string_or("TURNSTILE_SESSION_TABLE", &d.sessions),
            counters: vars.string_or("TURNSTILE_COUNTER_TABLE", &d.counters),
            buckets: vars.string_or("TURNSTILE_BUCKET_TABLE", &d.buckets),
            fungible_tokens: lim("FUNGIBLE_TABLE", "-fungible-tokens", &d.fungible_tokens),
            limits: lim("LIMIT_TABLE", "-limits", &d.limits),
            limit_service_index: lim(
                "LIMIT_SERVICE_INDEX",
                "-limits-service-index",
                &d.limit_service_index,
            ),
            non_fungible_tokens: lim(
                "NON_FUNGIBLE_TABLE",
                "-non-fungible-tokens",
                &d.non_fungible_tokens,
            ),
            resource_index: lim(
                "NON_FUNGIBLE_RES_INDEX",
                "-resource-index",
                &d.resource_index,
            ),
        };
        for (var, value) in names.vars() {
            check_table_name(var, value)?;
        }
        Ok(names)
    }

    /// (env var, resolved name) pairs, for validation and for passing the names on to a child process.
    pub fn vars(&self) -> [(&'static str, &str); 9] {
        [
            ("TURNSTILE_TENANT_TABLE", &self.tenants),
            ("TURNSTILE_SESSION_TABLE", &self.sessions),
            ("TURNSTILE_COUNTER_TABLE", &self.counters),
            ("TURNSTILE_BUCKET_TABLE", &self.buckets),
            ("FUNGIBLE_TABLE", &self.fungible_tokens),
            ("LIMIT_TABLE", &self.limits),
            ("LIMIT_SERVICE_INDEX", &self.limit_service_index),
            ("NON_FUNGIBLE_TABLE", &self.non_fungible_tokens),
            ("NON_FUNGIBLE_RES_INDEX", &self.resource_index),
        ]
    }
}

impl Default for TableNames {
    fn default() -> Self {
        TableNames::with_prefix(DEFAULT_PREFIX)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AttrType {
    S,
    N,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyAttr {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub ty: AttrType,
}

impl KeyAttr {
    pub const fn s(name: &'static str) -> Self {
        KeyAttr {
            name,
            ty: AttrType::S,
        }
    }
    pub const fn n(name: &'static str) -> Self {
        KeyAttr {
            name,
            ty: AttrType::N,
        }
    }
}

/// A global secondary index, projecting all attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexDef {
    pub name: String,
    pub partition_key: KeyAttr,
    pub sort_key: Option<KeyAttr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableDef {
    pub kind: TableKind,
    pub name: String,
    pub partition_key: KeyAttr,
    pub sort_key: Option<KeyAttr>,
    pub indexes: Vec<IndexDef>,
    /// Epoch-seconds attribute DynamoDB's TTL deletes on.
    pub ttl_attribute: Option<&'static str>,
    /// Stream view, when something consumes the table's changes.
    pub stream: Option<&'static str>,
}

impl TableDef {
    /// A table of `kind` named `name`, keyed on the string attribute `partition_key` alone, with no
    /// index, TTL or stream: the methods below add what a table has.
    pub fn keyed(kind: TableKind, name: &str, partition_key: &'static str) -> TableDef {
        TableDef {
            kind,
            name: name.to_string(),
            partition_key: KeyAttr::s(partition_key),
            sort_key: None,
            indexes: vec![],
            ttl_attribute: None,
            stream: None,
        }
    }

    /// The same table, sorted on the string attribute `sort_key`.
    pub fn sorted_by(self, sort_key: &'static str) -> TableDef {
        TableDef {
            sort_key: Some(KeyAttr::s(sort_key)),
            ..self
        }
    }

    /// The same table with a global secondary index `name` on the string attribute `partition_key`.
    pub fn indexed(mut self, name: &str, partition_key: &'static str) -> TableDef {
        self.indexes.push(IndexDef {
            name: name.to_string(),
            partition_key: KeyAttr::s(partition_key),
            sort_key: None,
        });
        self
    }

    /// The same table, its items deleted by DynamoDB's TTL after the epoch seconds in `attribute`.
    pub fn expiring(self, attribute: &'static str) -> TableDef {
        TableDef {
            ttl_attribute: Some(attribute),
            ..self
        }
    }

    /// The same table with a stream of `view` (`NEW_AND_OLD_IMAGES`).
    pub fn streamed(self, view: &'static str) -> TableDef {
        TableDef {
            stream: Some(view),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_env_with_rate_limiter_py_fallbacks() {
        let vars = Vars::from_pairs([
            ("LIMITER_TABLES_BASE_NAME", "acme"),
            ("FUNGIBLE_TABLE", "my-tokens"),
            ("TURNSTILE_TABLE_PREFIX", "dev-"),
        ]);
        let n = TableNames::from_vars(&vars).unwrap();
        assert_eq!(n.fungible_tokens, "my-tokens");
        assert_eq!(n.limits, "acme-limits");
        assert_eq!(n.limit_service_index, "acme-limits-service-index");
        assert_eq!(n.non_fungible_tokens, "acme-non-fungible-tokens");
        assert_eq!(n.resource_index, "acme-resource-index");
        assert_eq!(n.tenants, "dev-tenants");
        let d = TableNames::from_vars(&Vars::from_pairs::<&str, &str>([])).unwrap();
        assert_eq!(d, TableNames::default());
        assert_eq!(d.limits, "turnstile-limiter-limits");
    }

    #[test]
    fn a_bad_table_name_names_its_variable() {
        let vars = Vars::from_pairs([("TURNSTILE_SESSION_TABLE", "no spaces allowed")]);
        let err = TableNames::from_vars(&vars).unwrap_err();
        assert!(err.to_string().contains("TURNSTILE_SESSION_TABLE"), "{err}");
    }

    #[test]
    fn attribute_style_is_configurable() {
        let snake = Vars::from_pairs([(AttributeStyle::VAR, "snake")]);
        assert_eq!(
            AttributeStyle::from_vars(&snake).unwrap(),
            AttributeStyle::Snake
        );
        let bad = Vars::from_pairs([(AttributeStyle::VAR, "kebab")]);
        assert!(AttributeStyle::from_vars(&bad).is_err());
    }
}
