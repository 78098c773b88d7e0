//! The token routes: take from a fungible token bucket, and reserve / bind / release
//! non-fungible reservations. The caller's tenant leads every key: a bucket's `resourceName` is
//! `{tenant}:{resource}`; a reservation is held on the library's resource `{tenant}` and account
//! `{resource}:{account}` (its coordinate `{tenant}:{resource}:{account}`: a resource without
//! `:`, as the library requires, keeps the pair unambiguous), and bound to `{tenant}:{resourceId}`.

use std::time::Duration;

use serde_json::{json, Map, Value};
use shared::limit::Effective;
use shared::refusal::{HttpAnswer, QuotaUnit};
use shared::reservation::ReservationError;
use shared::token::{Decision, Source};

use crate::answer::{decision, plain, Verdict};
use crate::input::{bad, Body};
use crate::{Request, Route};

/// When a refused reservation is worth trying again: a pace, since capacity frees when another
/// reservation is released or expires.
const RESERVATION_RETRY: Duration = Duration::from_secs(1);

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(a) => return Ok(a),
        }
    };
}

fn take_verdict(resource: &str, d: &Decision) -> Verdict {
    Verdict {
        allowed: d.granted,
        policy: resource.to_string(),
        limit: d.limit,
        window: (d.window_ms > 0).then(|| Duration::from_millis(d.window_ms)),
        unit: QuotaUnit::Requests,
        remaining: d.remaining,
        retry_after: match (d.granted, d.retry_after()) {
            (true, _) => Some(Duration::ZERO),
            (false, r) => r,
        },
        reset_after: Some(d.reset()),
    }
}

/// A reservation policy's verdict: `live` held of `limit`.
fn held_verdict(resource: &str, allowed: bool, limit: u64, live: u64) -> Verdict {
    Verdict {
        allowed,
        policy: resource.to_string(),
        limit,
        window: None,
        unit: QuotaUnit::ConcurrentRequests,
        remaining: limit.saturating_sub(live),
        retry_after: Some(if allowed {
            Duration::ZERO
        } else {
            RESERVATION_RETRY
        }),
        reset_after: None,
    }
}

/// A refusal of the reservation library as a 4xx naming the field; `Err` for store failures.
fn reservation_error(e: ReservationError) -> Result<HttpAnswer, shared::Error> {
    Ok(match e {
        ReservationError::Gone { .. } => bad(410, "reservationId", e.to_string()),
        ReservationError::AlreadyBound { .. } => bad(409, "reservationId", e.to_string()),
        ReservationError::ResourceEnded { .. } => bad(410, "resourceId", e.to_string()),
        ReservationError::InvalidCoordinate(_) => bad(400, "resource", e.to_string()),
        ReservationError::AboveCeiling { .. } => bad(409, "resource", e.to_string()),
        ReservationError::Store(shared::Error::InvalidArgument(m)) => bad(400, "reservationId", m),
        ReservationError::Store(e) => return Err(e),
        // Decisions, answered by the caller as verdicts.
        ReservationError::Limited { .. } | ReservationError::Blocked { .. } => {
            bad(409, "resource", e.to_string())
        }
    })
}

/// A reservation's `resource` and `account` together are the sort key of its limit row
/// (`{resource}:{account}`), which DynamoDB caps at 1,024 bytes: fixed shares, so each field has
/// its own bound a caller can read in the OpenAPI document.
const MAX_RESOURCE_BYTES: usize = 255;
const MAX_ACCOUNT_BYTES: usize = 768;

/// A reservation's resource and account. The library keeps `:` out of the resource (it would make
/// two pairs share a coordinate).
fn reservation_pair(body: &Body) -> Result<(String, String), HttpAnswer> {
    let (r, account) = (body.string("resource")?, body.string("account")?);
    if r.contains(':') {
        return Err(bad(
            400,
            "resource",
            "resource must not contain ':' (it separates the resource from the account)",
        ));
    }
    for (field, value, max) in [
        ("resource", &r, MAX_RESOURCE_BYTES),
        ("account", &account, MAX_ACCOUNT_BYTES),
    ] {
        if value.len() > max {
            return Err(bad(
                400,
                field,
                format!("a reservation's {field} is at most {max} bytes"),
            ));
        }
    }
    Ok((r, account))
}

pub(crate) async fn tokens(route: Route, req: &Request<'_>) -> Result<HttpAnswer, shared::Error> {
    let l = req.limiters;
    let tenant = l.tenant.as_str();
    let on = req.on_refusal;
    match route {
        Route::Take => {
            let body = tri!(Body::of(req.event, &["resource", "account"]));
            let (res, account) = (tri!(body.string("resource")), tri!(body.string("account")));
            let stored = format!("{tenant}:{res}");
            let d = l
                .tokens
                .get_token(&stored, &account, req.state.token_default)
                .await?;
            let mut extra = Map::new();
            extra.insert("resource".into(), json!(res));
            extra.insert("account".into(), json!(account));
            extra.insert("blocked".into(), json!(d.source == Source::Blocked));
            let detail = || format!("no token of {res} for account {account} now");
            Ok(decision(&take_verdict(&res, &d), &[], extra, on, detail))
        }
        Route::Reserve => {
            let body = tri!(Body::of(req.event, &["resource", "account"]));
            let (res, account) = tri!(reservation_pair(&body));
            let pair = format!("{res}:{account}");
            let default = req.state.reservation_default;
            let mut extra = Map::new();
            extra.insert("resource".into(), json!(res));
            extra.insert("account".into(), json!(account));
            let detail = || format!("all of {res}'s reservations for account {account} are held");
            match l.reservations.get_reservation(tenant, &pair, default).await {
                Ok(r) => {
                    let row = l.reservations.limits().cached(tenant, &pair).flatten();
                    let limit = match Effective::capacity(row.as_ref(), default) {
                        Effective::Limited { limit, .. } => limit,
                        Effective::Blocked => 0,
                    };
                    let live = l.reservations.seen_live(&r.coordinate).unwrap_or(1);
                    extra.insert("reservationId".into(), json!(r.id));
                    extra.insert("expiresAt".into(), json!(r.expires_at.map(|t| t.as_secs())));
                    let v = held_verdict(&res, true, limit, live);
                    Ok(decision(&v, &[], extra, on, detail))
                }
                Err(ReservationError::Limited { limit, live, .. }) => {
                    let v = held_verdict(&res, false, limit, live);
                    Ok(decision(&v, &[], extra, on, detail))
                }
                Err(ReservationError::Blocked { .. }) => {
                    let mut v = held_verdict(&res, false, 0, 0);
                    v.retry_after = None;
                    extra.insert("blocked".into(), json!(true));
                    Ok(decision(&v, &[], extra, on, detail))
                }
                Err(e) => reservation_error(e),
            }
        }
        Route::Bind | Route::ReservationRelease => {
            let fields: &[&str] = if route == Route::Bind {
                &["resource", "account", "reservationId", "resourceId"]
            } else {
                &["resource", "account", "reservationId"]
            };
            let body = tri!(Body::of(req.event, fields));
            let (res, account) = tri!(reservation_pair(&body));
            let id = tri!(body.string("reservationId"));
            let pair = format!("{res}:{account}");
            let handle = match l.reservations.reservation(tenant, &pair, &id) {
                Ok(h) => h,
                Err(e) => return reservation_error(e),
            };
            let mut out = json!({"resource": res, "account": account, "reservationId": id});
            if route == Route::Bind {
                let rid = tri!(body.string("resourceId"));
                match handle.create_token(&format!("{tenant}:{rid}")).await {
                    Ok(t) => {
                        out["resourceId"] = json!(rid);
                        out["expiresAt"] = json!(t.expiration_time);
                        out["bound"] = json!(true);
                    }
                    Err(e) => return reservation_error(e),
                }
            } else {
                let released = l.reservations.release(&handle.coordinate, &id).await?;
                out["released"] = json!(released);
            }
            held_answer(req, &res, &pair, &handle.coordinate, out)
        }
        _ => Ok(bad(404, "path", "not a token route")),
    }
}

/// A bind's or release's answer: the coordinate's capacity as this process last saw it (no call),
/// or the plain result when this process has not seen it.
fn held_answer(
    req: &Request<'_>,
    res: &str,
    pair: &str,
    coordinate: &str,
    out: Value,
) -> Result<HttpAnswer, shared::Error> {
    let l = &req.limiters.reservations;
    let tenant = req.limiters.tenant.as_str();
    let row = l.limits().cached(tenant, pair);
    let live = l.seen_live(coordinate);
    let (Some(row), Some(live)) = (row, live) else {
        return Ok(plain(out));
    };
    let limit = match Effective::capacity(row.as_ref(), req.state.reservation_default) {
        Effective::Limited { limit, .. } => limit,
        Effective::Blocked => 0,
    };
    let Value::Object(extra) = out else {
        return Ok(plain(out));
    };
    let v = held_verdict(res, true, limit, live);
    Ok(decision(&v, &[], extra, req.on_refusal, String::new))
}
