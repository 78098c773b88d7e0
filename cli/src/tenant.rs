//! `turnstile tenant put|get|list|delete`: the tenant table, one row per tenant with its
//! WebSocket limits. Output is JSON on stdout.

use clap::Subcommand;
use shared::admission::closing;
use shared::function::Connections;
use shared::gateway::Gateway;
use shared::ids::TenantId;
use shared::tenant::{self, Limits, Tenant};
use shared::{Deps, Error, Result};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Create or replace a tenant and its limits.
    Put {
        /// The tenant id (1-128 of letters, digits, '-', '_', '.').
        #[arg(long)]
        tenant_id: TenantId,
        #[command(flatten)]
        limits: LimitsArgs,
        /// Allow changing an existing tenant's `--connection-shards`: only safe while it holds no
        /// open connections (connections counted under the old layout are released on the new
        /// one).
        #[arg(long)]
        reshard_drained: bool,
    },
    /// Print a tenant (exit status 1 if it does not exist).
    Get {
        #[arg(long)]
        tenant_id: TenantId,
    },
    /// Print every tenant.
    List,
    /// Delete a tenant and end its sessions: each session is deleted as the session API's DELETE
    /// deletes it, its sockets closed through the Management API (exit status 1 if the tenant
    /// neither existed nor held sessions).
    Delete {
        #[arg(long)]
        tenant_id: TenantId,
        /// The WebSocket API's Management API endpoint, where the tenant's sockets are closed
        /// (`https://{api-id}.execute-api.{region}.amazonaws.com/{stage}`; default
        /// TURNSTILE_MANAGEMENT_ENDPOINT). Without either, a tenant holding sessions is not
        /// deleted: its sockets would stay open.
        #[arg(long)]
        management_endpoint: Option<String>,
    },
}

/// A tenant's limits as `tenant put` flags, one per field of [`Limits`].
#[derive(Debug, clap::Args)]
pub(crate) struct LimitsArgs {
    /// Open connections one session may hold.
    #[arg(long)]
    connections_per_session: u64,
    /// Open connections the tenant may hold.
    #[arg(long)]
    tenant_connections: u64,
    /// New connections per minute for one session.
    #[arg(long)]
    session_per_minute: u64,
    /// New connections per minute for the tenant.
    #[arg(long)]
    tenant_per_minute: u64,
    /// Seconds a session lives after its last use.
    #[arg(long = "session-ttl", default_value_t = tenant::DEFAULT_SESSION_TTL_SECS)]
    session_ttl: u64,
    /// Messages per minute, per session.
    #[arg(long, default_value_t = tenant::DEFAULT_MESSAGES_PER_MINUTE)]
    messages_per_minute: u64,
    /// How the two per-minute connection limits are enforced: `fixed` (one-minute windows,
    /// up to twice the limit across a boundary) or `gcra` (a bucket refilling continuously).
    #[arg(long, default_value = "fixed")]
    rate_algorithm: tenant::WindowAlgorithm,
    /// `enforce` refuses over a limit; `shadow` only logs and meters a would-refuse.
    #[arg(long, default_value = "enforce")]
    enforcement: tenant::Enforcement,
    /// When DynamoDB fails or times out: `closed` answers 5xx, `open` lets requests through.
    #[arg(long, default_value = "closed")]
    on_failure: tenant::OnFailure,
    /// Counter items the tenant's open connections are spread over (1-100; 1 = one item).
    /// More than 1 lets one tenant connect past one item's ~1,000 writes/s
    /// (docs/decisions/1502-sharded-connection-counters.md).
    /// Change it only while the tenant holds no connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    connection_shards: u64,
    /// What `$connect` must present: `ticket` (a connect ticket from the session API),
    /// `jwt` (an OIDC token whose tenant claim is this tenant), or `none` — INSECURE: anyone
    /// who knows or guesses a session id joins that session.
    #[arg(long, default_value = "ticket")]
    connect_auth: tenant::ConnectAuth,
    /// Sessions the tenant may hold at once (0-1000000; default 10000): a session PUT past it
    /// answers 429 naming maxSessions.
    #[arg(long, default_value_t = tenant::DEFAULT_MAX_SESSIONS,
          value_parser = clap::value_parser!(u64).range(0..=tenant::MAX_SESSIONS_CEILING))]
    max_sessions: u64,
    /// Sessions one signed-in user (a JWT caller's `sub`) may hold at once (0-1000000; default
    /// 10): a user's session PUT past it answers 429 naming maxSessionsPerSubject.
    #[arg(long, default_value_t = tenant::DEFAULT_MAX_SESSIONS_PER_SUBJECT,
          value_parser = clap::value_parser!(u64).range(0..=tenant::MAX_SESSIONS_CEILING))]
    max_sessions_per_subject: u64,
    /// Also take a connect ticket from the URL (`?ticket=`), which access logs keep; without
    /// it only the `Sec-WebSocket-Protocol: turnstile, <ticket>` form is taken.
    #[arg(long)]
    ticket_in_query: bool,
}

impl From<LimitsArgs> for Limits {
    fn from(a: LimitsArgs) -> Limits {
        Limits {
            connections_per_session: a.connections_per_session,
            tenant_connections: a.tenant_connections,
            session_per_minute: a.session_per_minute,
            tenant_per_minute: a.tenant_per_minute,
            session_ttl: a.session_ttl,
            messages_per_minute: a.messages_per_minute,
            rate_algorithm: a.rate_algorithm,
            enforcement: a.enforcement,
            on_failure: a.on_failure,
            connection_shards: a.connection_shards,
            connect_auth: a.connect_auth,
            max_sessions: a.max_sessions,
            max_sessions_per_subject: a.max_sessions_per_subject,
            ticket_in_query: a.ticket_in_query,
        }
    }
}

pub async fn run(args: Args) -> Result<()> {
    let deps = crate::aws::deps().await?;
    match args.command {
        Cmd::Put {
            tenant_id,
            limits,
            reshard_drained,
        } => {
            let limits = Limits::from(limits);
            if [
                limits.connections_per_session,
                limits.tenant_connections,
                limits.session_per_minute,
                limits.tenant_per_minute,
            ] == [0; 4]
            {
                return Err(Error::InvalidArgument(format!(
                    "tenant {tenant_id} would admit no connection: every connection limit is 0. \
                     To block a tenant on purpose, set one of them to 0 (e.g. \
                     --tenant-connections 0)"
                )));
            }
            if limits.connect_auth == tenant::ConnectAuth::None {
                eprintln!(
                    "warning: --connect-auth none is insecure: anyone who knows a session id of \
                     tenant {tenant_id} can join that session and read its messages"
                );
            }
            let connection_shards = limits.connection_shards;
            let t = Tenant { tenant_id, limits };
            if let Some(old) = tenant::store::get(&deps, &t.tenant_id).await? {
                let was = old.limits.connection_shards;
                if was != connection_shards && !reshard_drained {
                    return Err(Error::Other(format!(
                        "tenant {} counts its connections on {was} shard(s); changing that to \
                         {connection_shards} while connections are open can admit past \
                         tenantConnections. Drain the tenant, then pass --reshard-drained",
                        t.tenant_id
                    )));
                }
                // Fence the counters first: a process still holding the old row is refused by
                // them and re-planned on the new layout.
                shared::admission::shards::fence(&deps, &t.tenant_id, was, connection_shards)
                    .await?;
            }
            tenant::store::put(&deps, &t).await?;
            crate::print_json(&t)
        }
        Cmd::Get { tenant_id } => match tenant::store::get(&deps, &tenant_id).await? {
            Some(t) => crate::print_json(&t),
            None => Err(Error::Other(format!("tenant {tenant_id} does not exist"))),
        },
        Cmd::List => {
            let (tenants, bad) = tenant::store::list(&deps).await?;
            for b in &bad {
                eprintln!("warning: {b}");
            }
            crate::print_json(&tenants)
        }
        Cmd::Delete {
            tenant_id,
            management_endpoint,
        } => delete(&deps, &tenant_id, management_endpoint).await,
    }
}

/// `tenant delete`: the row, then every session ended with its sockets closed
/// (`admission::closing::end_tenant`). Without a Management API endpoint only a tenant holding no
/// session is deleted.
async fn delete(deps: &Deps, t: &TenantId, endpoint: Option<String>) -> Result<()> {
    let endpoint = match endpoint {
        Some(e) => Some(e.trim_end_matches('/').to_string()),
        None => Gateway::endpoint_from_vars(&deps.vars)?,
    };
    let Some(endpoint) = endpoint else {
        if closing::has_sessions(deps, t).await? {
            return Err(Error::Other(format!(
                "tenant {t} holds sessions whose sockets must be closed: pass \
                 --management-endpoint https://{{api-id}}.execute-api.{{region}}.amazonaws.com/{{stage}} \
                 (or set TURNSTILE_MANAGEMENT_ENDPOINT)"
            )));
        }
        if !tenant::store::delete(deps, t).await? {
            return Err(Error::Other(format!("tenant {t} does not exist")));
        }
        return crate::print_json(&closing::TenantEnded {
            tenant_id: t.to_string(),
            deleted: true,
            ..Default::default()
        });
    };
    let sockets = Connections::new(deps, &endpoint).await;
    let ended = closing::end_tenant(deps, t, &sockets).await?;
    if !ended.deleted && ended.sessions == 0 {
        return Err(Error::Other(format!("tenant {t} does not exist")));
    }
    crate::print_json(&ended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    fn put(extra: &[&str]) -> std::result::Result<Wrapper, clap::Error> {
        let mut argv = vec![
            "tenant",
            "put",
            "--tenant-id",
            "acme",
            "--connections-per-session",
            "2",
            "--tenant-connections",
            "10",
            "--session-per-minute",
            "5",
            "--tenant-per-minute",
            "60",
        ];
        argv.extend_from_slice(extra);
        Wrapper::try_parse_from(argv)
    }

    fn algorithm(w: Wrapper) -> tenant::WindowAlgorithm {
        match w.args.command {
            Cmd::Put { limits, .. } => limits.rate_algorithm,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rate_algorithm_defaults_to_fixed_and_refuses_unknown_values() {
        assert_eq!(algorithm(put(&[]).unwrap()), tenant::WindowAlgorithm::Fixed);
        assert_eq!(
            algorithm(put(&["--rate-algorithm", "gcra"]).unwrap()),
            tenant::WindowAlgorithm::Gcra
        );
        let err = put(&["--rate-algorithm", "sliding"]).unwrap_err();
        assert!(err.to_string().contains("fixed or gcra"), "{err}");
    }

    #[test]
    fn connection_shards_default_to_one_and_are_bounded() {
        let shards = |w: Wrapper| match w.args.command {
            Cmd::Put { limits, .. } => limits.connection_shards,
            other => panic!("{other:?}"),
        };
        assert_eq!(shards(put(&[]).unwrap()), 1);
        assert_eq!(shards(put(&["--connection-shards", "8"]).unwrap()), 8);
        assert!(put(&["--connection-shards", "0"]).is_err());
        assert!(put(&["--connection-shards", "101"]).is_err());
    }

    #[test]
    fn delete_takes_the_management_endpoint_by_a_named_flag() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["tenant", "delete", "--tenant-id", "acme"];
            argv.extend_from_slice(extra);
            match Wrapper::try_parse_from(argv).unwrap().args.command {
                Cmd::Delete {
                    management_endpoint,
                    ..
                } => management_endpoint,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(parse(&[]), None);
        let url = "https://abc.execute-api.eu-west-1.amazonaws.com/prod";
        assert_eq!(parse(&["--management-endpoint", url]).as_deref(), Some(url));
    }

    #[test]
    fn max_sessions_defaults_and_is_bounded() {
        let max = |w: Wrapper| match w.args.command {
            Cmd::Put { limits, .. } => limits.max_sessions,
            other => panic!("{other:?}"),
        };
        assert_eq!(max(put(&[]).unwrap()), tenant::DEFAULT_MAX_SESSIONS);
        assert_eq!(max(put(&["--max-sessions", "0"]).unwrap()), 0);
        assert_eq!(max(put(&["--max-sessions", "1000000"]).unwrap()), 1_000_000);
        assert!(put(&["--max-sessions", "1000001"]).is_err());
    }
}
