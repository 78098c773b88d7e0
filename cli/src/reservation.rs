//! `turnstile reservation get|bind|delete|list`: non-fungible tokens by hand. Every command prints
//! JSON; `--now` decides at a given instant.

use clap::Subcommand;
use serde_json::json;
use shared::clock::Timestamp;
use shared::reservation::{NonFungibleLimiter, ReservationError};
use shared::Result;

use crate::token::{deps_at, parse_now};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Reserve one unit of RESOURCE's capacity for ACCOUNT (expires unused after 5 minutes).
    Get {
        resource: String,
        account: String,
        /// Default capacity when the limit table has no row.
        #[arg(long, default_value_t = 1)]
        limit: i64,
        /// Decide at this instant: epoch milliseconds or RFC 3339.
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
    /// Bind a reservation to a resource id (e.g. an EMR cluster id) for 8 hours.
    Bind {
        resource: String,
        account: String,
        reservation_id: String,
        resource_id: String,
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
    /// Delete a reservation or token and release its capacity (idempotent).
    Delete {
        resource: String,
        account: String,
        reservation_id: String,
    },
    /// List the reservations and tokens of RESOURCE/ACCOUNT, or those bound to --resource-id.
    List {
        #[arg(required_unless_present = "resource_id")]
        resource: Option<String>,
        #[arg(required_unless_present = "resource_id")]
        account: Option<String>,
        #[arg(long, conflicts_with_all = ["resource", "account"])]
        resource_id: Option<String>,
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
}

/// Refusals are decisions, printed as JSON like grants; store failures and bad names are errors.
fn refusal(e: ReservationError) -> Result<serde_json::Value> {
    match e {
        ReservationError::Store(e) => Err(e),
        ReservationError::InvalidCoordinate(e) => Err(e.into()),
        // A limit the ledger is not built for is a configuration error, not a decision.
        e @ ReservationError::AboveCeiling { .. } => {
            Err(shared::Error::InvalidArgument(e.to_string()))
        }
        ReservationError::Limited {
            coordinate,
            limit,
            live,
        } => Ok(
            json!({"granted": false, "reason": "limited", "coordinate": coordinate, "limit": limit, "live": live}),
        ),
        other => Ok(json!({"granted": false, "reason": other.to_string()})),
    }
}

pub async fn run(args: Args) -> Result<crate::Exit> {
    let now = match &args.command {
        Cmd::Get { now, .. } | Cmd::Bind { now, .. } | Cmd::List { now, .. } => *now,
        Cmd::Delete { .. } => None,
    };
    let deps = deps_at(now).await?;
    let limiter = NonFungibleLimiter::from_deps(&deps)?;
    let out = match args.command {
        Cmd::Get {
            resource,
            account,
            limit,
            ..
        } => match limiter.get_reservation(&resource, &account, limit).await {
            Ok(r) => json!({
                "granted": true,
                "coordinate": r.coordinate,
                "reservationId": r.id,
                "expiresAt": r.expires_at.map(|t| t.to_rfc3339()),
            }),
            Err(e) => refusal(e)?,
        },
        Cmd::Bind {
            resource,
            account,
            reservation_id,
            resource_id,
            ..
        } => {
            let bound = match limiter.reservation(&resource, &account, &reservation_id) {
                Ok(r) => r.create_token(&resource_id).await,
                Err(e) => Err(e),
            };
            match bound {
                Ok(t) => json!({"bound": true, "token": t}),
                Err(e) => {
                    let mut v = refusal(e)?;
                    v["bound"] = json!(false);
                    v
                }
            }
        }
        Cmd::Delete {
            resource,
            account,
            reservation_id,
        } => {
            let coordinate = NonFungibleLimiter::coordinate(&resource, &account)?;
            let released = limiter.release(&coordinate, &reservation_id).await?;
            json!({"deleted": true, "releasedCapacity": released, "reservationId": reservation_id})
        }
        Cmd::List {
            resource,
            account,
            resource_id,
            ..
        } => {
            let rows = match (resource_id, resource, account) {
                (Some(id), _, _) => limiter.find_by_resource_id(&id, None).await?,
                (None, Some(r), Some(a)) => limiter.list(&r, &a).await?,
                _ => Vec::new(),
            };
            json!(rows)
        }
    };
    crate::print_json(&out)?;
    // A refusal is `"granted": false` (get) or `"bound": false` (bind).
    let refused =
        out.get("granted") == Some(&json!(false)) || out.get("bound") == Some(&json!(false));
    Ok(crate::Exit::granted(!refused))
}
