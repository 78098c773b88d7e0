//! The rows the sample events in `events/` refer to, so a function binary started on one handles a
//! real request: tenant `tenant-1` with its live session `session-1`, the sample connection
//! `Nx0MPcOFvHcCIhw=` admitted, a token bound to the sample EMR cluster `j-1YONHTCP3YZKC`. Used by
//! the cold-start harness and by the check of the artifacts `sam build` makes
//! (tests/integration/artifacts.rs).

use aws_sdk_dynamodb::Client;
use shared::catalog;
use shared::ids::{ConnectionId, IdError, SessionId, TenantId};
use shared::table::{AttributeStyle, TableKind, TableNames};

use crate::error::BenchError;

/// The sample events' tenant, session, connection and EMR cluster.
pub const TENANT: &str = "tenant-1";
pub const SESSION: &str = "session-1";
pub const CONNECTION: &str = "Nx0MPcOFvHcCIhw=";
pub const CLUSTER: &str = "j-1YONHTCP3YZKC";
/// The role whose sessions the decide API's sample events are (`assumed-role/DecideCallerRole/tenant-1`).
pub const DECIDE_CALLER_ROLE_ARN: &str = "arn:aws:iam::123456789012:role/DecideCallerRole";

/// The key set the sample events' connect ticket is signed with: published here, so it must never be
/// a deployment's (deployments sign with the template's generated secret). The artifacts check, the
/// cold-start harness and the tests give it to the authorizer and the session API as
/// `TURNSTILE_TICKET_KEYS`.
pub const SAMPLE_KEYS: &str =
    r#"{"id":"sample","secret":"sample-events-only-never-deploy-0000000001"}"#;
/// The `sessionNonce` of the sample session, which the sample ticket names.
pub const NONCE: &str = "sample-session-nonce";

/// Generous limits: the samples never hit one.
const LIMITS: shared::tenant::Limits =
    shared::tenant::Limits::example(600, 600, 10, 100, 3600, 600);

fn bad(e: IdError) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Every table of the catalog under `tables`, then [`seed_rows`].
pub async fn seed(client: &Client, tables: TableNames) -> Result<shared::Deps, BenchError> {
    for kind in TableKind::ALL {
        catalog::ensure(
            client,
            &catalog::definition(kind, &tables, AttributeStyle::default()),
        )
        .await?;
    }
    let deps = shared::Deps {
        dynamo: client.clone(),
        tables,
        style: AttributeStyle::default(),
        clock: shared::clock::system(),
        vars: shared::config::Vars::from_pairs::<&str, &str>([]),
        function: None,
    };
    seed_rows(&deps).await?;
    Ok(deps)
}

/// Tenant `tenant-1` and its live session `session-1` (tables already there).
pub async fn seed_rows(deps: &shared::Deps) -> Result<(), BenchError> {
    let t = TenantId::parse(TENANT).map_err(bad)?;
    shared::tenant::store::put(
        deps,
        &shared::tenant::Tenant {
            tenant_id: t,
            limits: LIMITS,
        },
    )
    .await?;
    ensure_sample_session(deps).await
}

/// Session `session-1` of `tenant-1` live for an hour (created again after a sample deleted it),
/// holding the nonce the sample ticket names ([`NONCE`]).
pub async fn ensure_sample_session(deps: &shared::Deps) -> Result<(), BenchError> {
    let t = TenantId::parse(TENANT).map_err(bad)?;
    let sid = SessionId::parse(SESSION).map_err(bad)?;
    let ttl = deps.clock.now().as_secs() + 3600;
    let cap = shared::tenant::MAX_SESSIONS_CEILING;
    let none = shared::admission::closing::NoSockets::default();
    shared::admission::sessions::open(deps, &t, &sid, ttl, cap, false, &none).await?;
    deps.dynamo
        .update_item()
        .table_name(&deps.tables.sessions)
        .set_key(Some(shared::session::store::key(&t, &sid)))
        .update_expression("SET #n = :n")
        .expression_attribute_names("#n", shared::session::attr::SESSION_NONCE)
        .expression_attribute_values(":n", shared::dynamo::item::s(NONCE))
        .send()
        .await
        .map_err(|e| BenchError::Other(format!("setting the sample session's nonce: {e}")))?;
    Ok(())
}

/// A token of account 123456789012 bound to the sample's EMR cluster `j-1YONHTCP3YZKC`.
pub async fn bind_sample_cluster(deps: &shared::Deps) -> Result<(), BenchError> {
    bind_cluster(deps, CLUSTER).await
}

/// A token of account 123456789012 bound to EMR cluster `cluster`. A sample run of the token
/// remover before left the cluster's ended marker (decision 0101, "Ended resources"), which would
/// refuse the bind: the marker is deleted first, as if the cluster had been started again.
pub async fn bind_cluster(deps: &shared::Deps, cluster: &str) -> Result<(), BenchError> {
    use shared::reservation::{ended, Attrs};
    let a = Attrs::of(deps.style);
    let marker = ended::marker_key(cluster).map_err(|e| BenchError::Other(e.to_string()))?;
    deps.dynamo
        .delete_item()
        .table_name(&deps.tables.non_fungible_tokens)
        .key(a.resource_coordinate, shared::dynamo::item::s(marker))
        .key(a.reservation_id, shared::dynamo::item::s(ended::ENDED_ID))
        .send()
        .await
        .map_err(|e| {
            BenchError::Other(format!("clearing the sample cluster's ended marker: {e}"))
        })?;
    let limiter = shared::reservation::NonFungibleLimiter::from_deps(deps)
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let r = limiter
        .get_reservation("emr", "123456789012", 1_000)
        .await
        .map_err(|e| BenchError::Other(format!("reserving for the sample cluster: {e}")))?;
    r.create_token(cluster)
        .await
        .map_err(|e| BenchError::Other(format!("binding the sample cluster: {e}")))?;
    Ok(())
}

/// The sample events' connection (`Nx0MPcOFvHcCIhw=` of tenant-1/session-1), admitted (a no-op
/// when it already is).
pub async fn admit_sample_connection(deps: &shared::Deps) -> Result<(), BenchError> {
    let t = TenantId::parse(TENANT).map_err(bad)?;
    let sid = SessionId::parse(SESSION).map_err(bad)?;
    let cid = ConnectionId::parse(CONNECTION).map_err(bad)?;
    let request = shared::admission::Request {
        deps,
        t: &t,
        sid: &sid,
        cid: &cid,
        limits: &LIMITS,
        nonce: None,
        ticket: None,
    };
    match shared::admission::connect::admit(request).await? {
        shared::admission::connect::Admission::Admitted
        | shared::admission::connect::Admission::AlreadyAdmitted => Ok(()),
        other => Err(BenchError::Other(format!(
            "admitting the sample connection: {other:?}"
        ))),
    }
}
