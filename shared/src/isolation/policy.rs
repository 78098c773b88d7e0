//! Session policies (decision 2202): what one function's tenant credentials may do.
//!
//! `TenantRole` grants, table by table, the union of what the seven tenant-facing functions do on
//! tenant rows (under the leading-key condition). Each function passes a session policy with its
//! `AssumeRole` (the `Policy` parameter): an inline policy naming exactly its own DynamoDB actions on
//! its own tables, and nothing else. STS returns credentials allowed only what both the role and the
//! session policy allow, so the authorizer's credentials can read but never write, and the sweeper's
//! touch only counters. The role keeps the leading-key condition; the session policy needs none (an
//! intersection has it once).
//!
//! [`TENANT_ACCESS`] is the one table of those actions, keyed by the name a function's `main.rs`
//! gives [`serve`](crate::function::serve) (its crate name). `tests/integration/template.rs` requires
//! each function's policy to equal, table by table, what its execution role is granted under
//! `TenantIsolation=Disabled`. Cost: none per request; the policy is built once per process and
//! travels with each `AssumeRole` (one per tenant per ~55 minutes).

use serde::Serialize;

use crate::config::ConfigError;
use crate::table::TableKind::{
    self, Buckets, Counters, FungibleTokens, Limits, NonFungibleTokens, Sessions, Tenants,
};
use crate::table::TableNames;

/// Env var naming the tenant-scoped role to assume; unset or empty means "use the execution role".
pub const TENANT_ROLE_ARN_VAR: &str = "TENANT_ROLE_ARN";

/// What one tenant-facing function does on tenant rows: (table, DynamoDB actions), the actions
/// sorted. IAM authorises a `TransactWriteItems` by its items' actions and a `BatchGetItem` table by
/// table, so those never appear themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantAccess {
    /// The function's crate name (what its `main.rs` passes to `serve`).
    pub function: &'static str,
    pub tables: &'static [(TableKind, &'static [&'static str])],
}

/// The tenant row, through `TenantCache` (1 GetItem when cold).
const TENANT_READ: (TableKind, &[&str]) = (Tenants, &["dynamodb:GetItem"]);
/// `shared::admission::release`: the tenant's count decremented (decision 0306).
const RELEASE: (TableKind, &[&str]) = (Counters, &["dynamodb:UpdateItem"]);

/// Every tenant-facing function's actions on tenant rows. A function that starts or stops an
/// operation changes its line here and its execution-role statements in `template.yaml` (the
/// template test holds them equal). Not here, since they are made with the execution role even
/// under isolation: the reconciler's `Scan` of the tenants table (a Scan has no leading key), and the
/// authorizer's `GetItem` of the tenant row (read before any `AssumeRole`, so made-up tenant ids
/// never reach STS).
pub const TENANT_ACCESS: &[TenantAccess] = &[
    // precheck: one BatchGetItem of the session and the tenant's counter. Its read of the tenant
    // row is not here: it is made with the execution role, before any AssumeRole, so made-up tenant
    // ids never reach STS.
    TenantAccess {
        function: "authorizer",
        tables: &[
            (Sessions, &["dynamodb:BatchGetItem"]),
            (Counters, &["dynamodb:BatchGetItem"]),
        ],
    },
    // the count up (a sharded tenant whose shard refused reads every shard), then the session
    TenantAccess {
        function: "connect",
        tables: &[
            TENANT_READ,
            (Sessions, &["dynamodb:UpdateItem"]),
            (Counters, &["dynamodb:BatchGetItem", "dynamodb:UpdateItem"]),
        ],
    },
    // the connection out of the session's set, then the count down
    TenantAccess {
        function: "disconnect",
        tables: &[(Sessions, &["dynamodb:UpdateItem"]), RELEASE],
    },
    // the message counter on the session; pruning gone connections (release)
    TenantAccess {
        function: "message",
        tables: &[TENANT_READ, (Sessions, &["dynamodb:UpdateItem"]), RELEASE],
    },
    // PUT (UpdateItem, a transaction's Put replacing an expired row), GET, DELETE (a transaction's
    // Delete with the session count's Update); the count down for the connections that left
    // with the row
    TenantAccess {
        function: "session-api",
        tables: &[
            TENANT_READ,
            (
                Sessions,
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                ],
            ),
            RELEASE,
        ],
    },
    // a tombstone per stream record (PutItem) and the count down (UpdateItem), in one transaction
    TenantAccess {
        function: "ttl-sweeper",
        tables: &[(Counters, &["dynamodb:PutItem", "dynamodb:UpdateItem"])],
    },
    // a named tenant's row; Query its sessions, release gone ids and delete ended sessions left
    // empty; read the count (a sharded tenant: BatchGetItem of its shards) and repair it
    // (UpdateItem, or a transaction of them)
    TenantAccess {
        function: "reconciler",
        tables: &[
            TENANT_READ,
            (
                Sessions,
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                ],
            ),
            (
                Counters,
                &[
                    "dynamodb:BatchGetItem",
                    "dynamodb:GetItem",
                    "dynamodb:UpdateItem",
                ],
            ),
        ],
    },
    // the decide API, under its own tenant role (`DecideTenantRole`): the kv buckets (spend,
    // check, refund and its marker, leases), token buckets (take, with the cold BatchGetItem of
    // the limit row), limit rows, and reservations (reserve, bind, release)
    TenantAccess {
        function: "decide-api",
        tables: &[
            (
                Buckets,
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                ],
            ),
            (
                FungibleTokens,
                &["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
            ),
            (Limits, &["dynamodb:BatchGetItem", "dynamodb:GetItem"]),
            (
                NonFungibleTokens,
                &[
                    "dynamodb:BatchGetItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                ],
            ),
        ],
    },
];

/// The functions whose tenant credentials come from their own role rather than `TenantRole`: their
/// tables are not the WebSocket tables.
pub const OWN_TENANT_ROLE: &[&str] = &["decide-api"];

/// STS refuses a session policy longer than this (plain text, whitespace included).
pub const MAX_SESSION_POLICY_CHARS: usize = 2048;

/// The tenant access of `function`, or `None` for a function that does not reach tenant rows.
pub fn tenant_access(function: &str) -> Option<&'static TenantAccess> {
    TENANT_ACCESS.iter().find(|a| a.function == function)
}

/// Where the tables live, for their ARNs: `arn:{partition}:dynamodb:{region}:{account}:table/{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableArns {
    pub partition: String,
    /// `*` when the DynamoDB client has no region (never in Lambda, which sets `AWS_REGION`).
    pub region: String,
    pub account: String,
}

impl TableArns {
    /// Partition and account from the tenant role's ARN (`arn:{partition}:iam::{account}:role/...`,
    /// the role and the tables are in one account), region from the DynamoDB client's. `None` for
    /// a role ARN of another shape ([`IsolationConfig`](super::IsolationConfig) refuses those).
    pub fn new(role_arn: &str, region: Option<&str>) -> Option<TableArns> {
        let parts: Vec<&str> = role_arn.splitn(6, ':').collect();
        if parts.len() != 6 || parts[0] != "arn" || parts[2] != "iam" || parts[4].is_empty() {
            return None;
        }
        Some(TableArns {
            partition: parts[1].to_string(),
            region: region.filter(|r| !r.is_empty()).unwrap_or("*").to_string(),
            account: parts[4].to_string(),
        })
    }

    pub fn table(&self, name: &str) -> String {
        let TableArns {
            partition,
            region,
            account,
        } = self;
        format!("arn:{partition}:dynamodb:{region}:{account}:table/{name}")
    }
}

fn table_name(kind: TableKind, names: &TableNames) -> &str {
    match kind {
        TableKind::Tenants => &names.tenants,
        TableKind::Sessions => &names.sessions,
        TableKind::Counters => &names.counters,
        TableKind::Buckets => &names.buckets,
        TableKind::FungibleTokens => &names.fungible_tokens,
        TableKind::Limits => &names.limits,
        TableKind::NonFungibleTokens => &names.non_fungible_tokens,
    }
}

impl TenantAccess {
    /// The session policy (compact JSON): one Allow statement per table, its actions on that
    /// table's ARN, no condition. At most [`MAX_SESSION_POLICY_CHARS`] for any valid table names
    /// (each at most 255 characters; unit-tested).
    pub fn session_policy(&self, names: &TableNames, arns: &TableArns) -> String {
        let policy = Policy {
            version: "2012-10-17",
            statement: self
                .tables
                .iter()
                .map(|(kind, actions)| Statement {
                    effect: "Allow",
                    action: actions,
                    resource: arns.table(table_name(*kind, names)),
                })
                .collect(),
        };
        serde_json::to_string(&policy).expect("a policy serialises")
    }
}

/// An IAM policy document, fields in the order AWS prints them.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Policy {
    version: &'static str,
    statement: Vec<Statement>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Statement {
    effect: &'static str,
    action: &'static [&'static str],
    resource: String,
}

/// The session policy a function sends with each `AssumeRole` on `role_arn`: its
/// [`TenantAccess`] on the tables in `names`. An error when `function` is unknown or absent: with a
/// tenant role, a process must say which function it is, or its tenant credentials would carry
/// every function's rights.
pub fn session_policy_for(
    function: Option<&str>,
    names: &TableNames,
    role_arn: &str,
    region: Option<&str>,
) -> Result<String, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        var: TENANT_ROLE_ARN_VAR.into(),
        value: role_arn.to_string(),
        reason,
    };
    let Some(function) = function else {
        return Err(invalid(
            "set, but this process names no function (Deps::for_function; `serve` does it), so \
             there is no session policy to limit its tenant credentials to its own actions"
                .into(),
        ));
    };
    let access = tenant_access(function).ok_or_else(|| {
        invalid(format!(
            "function {function:?} reaches no tenant rows (no line in \
             shared::isolation::policy::TENANT_ACCESS), so it must not assume the tenant role"
        ))
    })?;
    let arns = TableArns::new(role_arn, region)
        .ok_or_else(|| invalid("expected an IAM role ARN".into()))?;
    Ok(access.session_policy(names, &arns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const ROLE: &str = "arn:aws:iam::123456789012:role/turnstile-TenantRole-X";

    #[test]
    fn each_policy_names_only_its_functions_actions_on_its_tables() {
        let names = TableNames::with_prefix("acme-");
        let policy =
            session_policy_for(Some("authorizer"), &names, ROLE, Some("eu-west-1")).unwrap();
        assert_eq!(
            policy,
            "{\"Version\":\"2012-10-17\",\"Statement\":[\
             {\"Effect\":\"Allow\",\"Action\":[\"dynamodb:BatchGetItem\"],\
             \"Resource\":\"arn:aws:dynamodb:eu-west-1:123456789012:table/acme-sessions\"},\
             {\"Effect\":\"Allow\",\"Action\":[\"dynamodb:BatchGetItem\"],\
             \"Resource\":\"arn:aws:dynamodb:eu-west-1:123456789012:table/acme-counters\"}]}"
        );
        let cn = "arn:aws-cn:iam::123456789012:role/r";
        let sweeper = session_policy_for(Some("ttl-sweeper"), &names, cn, None).unwrap();
        assert!(
            sweeper.contains("\"arn:aws-cn:dynamodb:*:123456789012:table/acme-counters\""),
            "{sweeper}"
        );
    }

    #[test]
    fn the_table_is_one_line_per_tenant_function_with_sorted_tenant_table_actions() {
        let functions: BTreeSet<&str> = TENANT_ACCESS.iter().map(|a| a.function).collect();
        assert_eq!(
            functions.len(),
            TENANT_ACCESS.len(),
            "one line per function"
        );
        for a in TENANT_ACCESS {
            let tables: BTreeSet<TableKind> = a.tables.iter().map(|(k, _)| *k).collect();
            assert_eq!(
                tables.len(),
                a.tables.len(),
                "{}: one entry per table",
                a.function
            );
            for (kind, actions) in a.tables {
                assert!(
                    TableKind::WEBSOCKET.contains(kind) || OWN_TENANT_ROLE.contains(&a.function),
                    "{}: {kind:?}",
                    a.function
                );
                assert!(!actions.is_empty() && actions.is_sorted(), "{}", a.function);
                for action in *actions {
                    assert!(action.starts_with("dynamodb:") && !action.contains('*'));
                    assert_ne!(*action, "dynamodb:Scan", "{}: no leading key", a.function);
                }
            }
        }
    }

    #[test]
    fn a_process_must_name_a_tenant_function() {
        let names = TableNames::default();
        let none = session_policy_for(None, &names, ROLE, None).unwrap_err();
        assert!(none.to_string().contains("names no function"), "{none}");
        let other = session_policy_for(Some("token-remover"), &names, ROLE, None).unwrap_err();
        assert!(other.to_string().contains("\"token-remover\""), "{other}");
        assert!(session_policy_for(Some("x"), &names, "not-a-role", None).is_err());
    }

    #[test]
    fn policies_fit_sts_limit_with_the_longest_table_names() {
        let long = |c: char| c.to_string().repeat(255);
        let names = TableNames {
            tenants: long('t'),
            sessions: long('s'),
            counters: long('c'),
            buckets: long('b'),
            fungible_tokens: long('f'),
            limits: long('l'),
            non_fungible_tokens: long('n'),
            ..TableNames::default()
        };
        let arns = TableArns::new(ROLE, Some("ap-southeast-4")).unwrap();
        for a in TENANT_ACCESS {
            let n = a.session_policy(&names, &arns).chars().count();
            assert!(n <= MAX_SESSION_POLICY_CHARS, "{}: {n}", a.function);
        }
    }
}
