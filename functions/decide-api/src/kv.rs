//! The key-value GCRA routes: spend, check, refund (once per idempotency key), batch, state, and
//! the four lease operations. Each maps the library's answer to a [`Verdict`].

use std::time::Duration;

use serde_json::{json, Map, Value};
use shared::gcra::RateError;
use shared::gcra::{Decision, Rate};
use shared::kv::limiter::MAX_ATTEMPTS;
use shared::kv::{BucketKey, KeyError, KvError, LeaseOutcome, Outcome};
use shared::refusal::{HttpAnswer, QuotaUnit};
use shared::state::RateLimitState;

use crate::answer::{decision, Verdict};
use crate::input::{bad, checked_string, query, whole, Body};
use crate::{Request, Route};

/// Longest lease: a caller that forgets one gets its amount back within a day (released by the
/// bucket's next lease operation).
const MAX_LEASE_SECS: u64 = 86_400;
/// Costs are bounded by the limit's burst; this only keeps numbers sane before the lookup.
const MAX_COST: u64 = 1 << 40;

/// A GCRA decision as a verdict of the limit `name`.
fn verdict(name: &str, o: &Outcome) -> Verdict {
    let policy = shared::refusal::gcra_policy(name, &o.rate);
    Verdict {
        allowed: o.decision.allowed,
        policy: name.to_string(),
        limit: policy.quota,
        window: policy.window,
        unit: QuotaUnit::Requests,
        remaining: o.decision.remaining,
        retry_after: Some(o.decision.retry_in),
        reset_after: Some(o.decision.reset_in),
    }
}

/// The bucket's members of a body: the limit, the canonical id, the cost asked.
fn bucket_members(o: &Outcome, cost: u64) -> Map<String, Value> {
    let mut m = Map::new();
    let id = o.limit.split_once(':').map_or("", |(_, id)| id);
    m.insert("id".into(), json!(id));
    m.insert("cost".into(), json!(cost));
    if o.shadow_denied {
        m.insert("shadowDenied".into(), json!(true));
    }
    m
}

/// A library refusal of the input, as a 4xx naming the field, so a caller can fix its request;
/// `Err` for failures of the store, which `handle` answers 503 (worth a retry).
pub(crate) fn kv_error(e: KvError) -> Result<HttpAnswer, shared::Error> {
    Ok(match e {
        KvError::Key(KeyError::UnknownName(n)) => {
            bad(404, "name", format!("no limit named {n:?} is declared"))
        }
        KvError::Key(KeyError::BadId { .. }) => bad(400, "id", e.to_string()),
        KvError::Key(KeyError::NoLimit(_)) => bad(404, "id", e.to_string()),
        KvError::Key(_) => bad(400, "name", e.to_string()),
        // A well-formed cost the limit can never grant: the limits file's conflict, not the
        // request's shape, and no wait helps.
        KvError::Rate(RateError::CostOverBurst { .. }) => bad(409, "cost", e.to_string()),
        KvError::Rate(_) | KvError::ZeroCost => bad(400, "cost", e.to_string()),
        KvError::DuplicateInBatch(_)
        | KvError::ShardedInBatch(_)
        | KvError::ShadowInBatch(_)
        | KvError::EmptyBatch
        | KvError::BatchTooLarge(_) => bad(400, "spends", e.to_string()),
        KvError::ShardedKeyedRefund(_) => bad(409, "name", e.to_string()),
        KvError::BadIdempotencyKey(_) => bad(400, "idempotencyKey", e.to_string()),
        KvError::BadLeaseId(_) => bad(400, "leaseId", e.to_string()),
        KvError::LeaseNotFound(_) => bad(404, "leaseId", e.to_string()),
        KvError::LeaseExpired(_) => bad(410, "leaseId", e.to_string()),
        KvError::LeaseMismatch { .. } => bad(409, "estimate", e.to_string()),
        KvError::Contended(what) => {
            return Err(shared::Error::contended(what, MAX_ATTEMPTS as u32))
        }
        KvError::Store(e) => return Err(e),
    })
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(a) => return Ok(a),
        }
    };
}

macro_rules! kv_try {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return kv_error(e),
        }
    };
}

pub(crate) async fn limits(route: Route, req: &Request<'_>) -> Result<HttpAnswer, shared::Error> {
    let kv = &req.limiters.kv;
    let now = req.now;
    let on = req.on_refusal;
    match route {
        Route::Spend | Route::Check => {
            let body = tri!(Body::of(req.event, &["name", "id", "cost"]));
            let (name, id) = (tri!(body.string("name")), tri!(body.string("id")));
            let spend = route == Route::Spend;
            let cost = tri!(body.uint("cost", u64::from(spend), u64::from(spend), MAX_COST));
            let o = if spend {
                kv_try!(kv.spend(&name, &id, cost, now).await)
            } else {
                kv_try!(kv.check(&name, &id, cost, now).await)
            };
            let detail = || format!("limit {name} for {id:?} has no room for {cost}");
            Ok(decision(
                &verdict(&name, &o),
                &[],
                bucket_members(&o, cost),
                on,
                detail,
            ))
        }
        Route::Refund => {
            let body = tri!(Body::of(
                req.event,
                &["name", "id", "cost", "idempotencyKey"]
            ));
            let (name, id) = (tri!(body.string("name")), tri!(body.string("id")));
            let cost = tri!(body.uint("cost", 1, 1, MAX_COST));
            let key = tri!(body.string("idempotencyKey"));
            let r = kv_try!(kv.refund_keyed(&name, &id, cost, &key, now).await);
            let mut extra = bucket_members(&r.outcome, cost);
            extra.insert("duplicate".into(), json!(r.duplicate));
            let detail = || format!("limit {name} for {id:?} is full: nothing to refund");
            Ok(decision(
                &verdict(&name, &r.outcome),
                &[],
                extra,
                on,
                detail,
            ))
        }
        Route::Batch => {
            let body = tri!(Body::of(req.event, &["spends"]));
            let spends = tri!(batch_spends(tri!(body.array("spends"))));
            let refs: Vec<(&str, &str, u64)> = spends
                .iter()
                .map(|(n, i, c)| (n.as_str(), i.as_str(), *c))
                .collect();
            let b = kv_try!(kv.spend_batch(&refs, now).await);
            let each: Vec<Verdict> = b
                .each
                .iter()
                .map(|o| verdict(o.limit.split_once(':').map_or("", |p| p.0), o))
                .collect();
            let deciding = b.deciding.split_once(':').map_or("", |p| p.0).to_string();
            let mut v = each
                .iter()
                .find(|v| v.policy == deciding)
                .cloned()
                .unwrap_or_else(|| each[0].clone());
            v.allowed = b.decision.allowed;
            v.remaining = b.decision.remaining;
            v.retry_after = Some(b.decision.retry_in);
            v.reset_after = Some(b.decision.reset_in);
            let list: Vec<Value> = b
                .each
                .iter()
                .zip(&each)
                .map(|(o, v)| {
                    let mut m = v.members();
                    m.extend(bucket_members(o, 0));
                    m.remove("cost");
                    Value::Object(m)
                })
                .collect();
            let mut extra = Map::new();
            extra.insert("exact".into(), json!(b.exact));
            extra.insert("each".into(), Value::Array(list));
            let detail = || format!("limit {} refused the batch; nothing was spent", b.deciding);
            Ok(decision(&v, &each, extra, on, detail))
        }
        _ => state(req).await,
    }
}

/// The `spends` of a batch: 1 to 100 `{name, id, cost}`.
fn batch_spends(items: &[Value]) -> Result<Vec<(String, String, u64)>, HttpAnswer> {
    if items.is_empty() || items.len() > shared::kv::limiter::MAX_BATCH {
        return Err(bad(
            400,
            "spends",
            format!(
                "spends must hold 1 to {} limits",
                shared::kv::limiter::MAX_BATCH
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(m) = item else {
                return Err(bad(400, "spends", format!("spends[{i}] must be an object")));
            };
            let f = |k: &str| format!("spends[{i}].{k}");
            if let Some(k) = m
                .keys()
                .find(|k| !["name", "id", "cost"].contains(&k.as_str()))
            {
                return Err(bad(
                    400,
                    &f(k),
                    format!("unknown member {k:?}; expected name, id, cost"),
                ));
            }
            let s = |k: &str| match m.get(k) {
                Some(Value::String(s)) => checked_string(&f(k), s),
                _ => Err(bad(400, &f(k), format!("{} must be a string", f(k)))),
            };
            let cost = match m.get("cost") {
                None | Some(Value::Null) => Some(1),
                Some(Value::Number(n)) => whole(n).filter(|c| (1..=MAX_COST).contains(c)),
                Some(_) => None,
            }
            .ok_or_else(|| {
                bad(
                    400,
                    &f("cost"),
                    format!("{} must be an integer of at least 1", f("cost")),
                )
            })?;
            Ok((s("name")?, s("id")?, cost))
        })
        .collect()
}

/// The outcome a verdict is read from for `bucket` deciding `d` (never a shadow's), and the answer's
/// members beside it: the bucket's id.
fn answered(bucket: &BucketKey, rate: Rate, d: Decision) -> (Outcome, Map<String, Value>) {
    let o = Outcome {
        limit: bucket.display_name(),
        bucket: bucket.key(),
        rate,
        decision: d,
        shadow_denied: false,
    };
    let mut extra = Map::new();
    extra.insert("id".into(), json!(bucket.id));
    (o, extra)
}

/// `GET /v1/limits/state?name=&id=`: the bucket's `RateLimitState` (as `turnstile state` prints it)
/// with the verdict a spend of 1 would get now, so a dashboard reads both in one call. 1 GetItem.
async fn state(req: &Request<'_>) -> Result<HttpAnswer, shared::Error> {
    let q = tri!(query(req.event, &["name", "id"]));
    let (name, id) = (tri!(q.string("name")), tri!(q.string("id")));
    let kv = &req.limiters.kv;
    let (bucket, rate, shards) = kv_try!(kv.bucket_of(&name, &id));
    if shards > 1 {
        return Ok(bad(
            409,
            "name",
            format!("limit {name} is sharded; its state is kept per shard (turnstile state)"),
        ));
    }
    let key = bucket.key();
    let item = kv_try!(kv.read(&key).await);
    let st = match RateLimitState::from_gcra_item(
        &key,
        &name,
        &bucket.id,
        item.as_ref(),
        Some(rate),
        req.now,
    ) {
        Ok(s) => s,
        Err(e) => return Err(shared::Error::Other(e.to_string())),
    };
    let tat = shared::gcra_write::stored_tat(item.as_ref(), shared::gcra_write::attr::TAT);
    // Remaining and reset of the bucket as it is (cost 0), but whether a request of 1 would pass
    // and when (a cost-0 check always passes, so its verdict would say nothing).
    let d0 = kv_try!(shared::gcra::spend(&rate, tat, req.now, 0).map_err(KvError::from));
    let d1 = kv_try!(shared::gcra::spend(&rate, tat, req.now, 1).map_err(KvError::from));
    let decision_now = shared::gcra::Decision {
        allowed: d1.allowed,
        retry_in: d1.retry_in,
        ..d0
    };
    let (o, mut extra) = answered(&bucket, rate, decision_now);
    let mut view = serde_json::to_value(&st).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut view {
        // The stored key names the tenant; callers know their buckets by name and id.
        m.remove("bucket");
    }
    extra.insert("state".into(), view);
    Ok(decision(
        &verdict(&name, &o),
        &[],
        extra,
        req.on_refusal,
        String::new,
    ))
}

pub(crate) async fn leases(route: Route, req: &Request<'_>) -> Result<HttpAnswer, shared::Error> {
    let kv = &req.limiters.kv;
    let now = req.now;
    let fields: &[&str] = match route {
        Route::LeaseAcquire => &["name", "id", "leaseId", "estimate", "ttlSeconds"],
        Route::LeaseAdjust => &["name", "id", "leaseId", "amount"],
        _ => &["name", "id", "leaseId"],
    };
    let body = tri!(Body::of(req.event, fields));
    let (name, id) = (tri!(body.string("name")), tri!(body.string("id")));
    let lease_id = tri!(body.string("leaseId"));
    let out = match route {
        Route::LeaseAcquire => {
            let estimate = tri!(body.required_uint("estimate", 1, MAX_COST));
            let ttl = tri!(body.uint("ttlSeconds", 60, 1, MAX_LEASE_SECS));
            let ttl = Duration::from_secs(ttl);
            kv.acquire_lease(&name, &id, &lease_id, estimate, ttl, now)
                .await
        }
        Route::LeaseAdjust => {
            let amount = tri!(body.required_uint("amount", 0, MAX_COST));
            kv.adjust_lease(&name, &id, &lease_id, amount, now).await
        }
        Route::LeaseCommit => kv.commit_lease(&name, &id, &lease_id).await,
        _ => kv.release_lease(&name, &id, &lease_id, now).await,
    };
    let out = kv_try!(out);
    lease_answer(req, &name, &id, out)
}

fn lease_answer(
    req: &Request<'_>,
    name: &str,
    id: &str,
    out: LeaseOutcome,
) -> Result<HttpAnswer, shared::Error> {
    let kv = &req.limiters.kv;
    let (bucket, rate, _) = kv_try!(kv.bucket_of(name, id));
    // Without a write's decision (a commit, a duplicate), the bucket as this process last saw it;
    // never seen: a full bucket's numbers, marked inexact.
    let (decision_now, exact) = match out.decision {
        Some(d) => (d, out.exact),
        None => match kv_try!(kv.last_seen(name, id, req.now)) {
            Some(o) => (o.decision, false),
            None => (
                kv_try!(shared::gcra::spend(&rate, None, req.now, 0).map_err(KvError::from)),
                false,
            ),
        },
    };
    let decision_now = shared::gcra::Decision {
        allowed: out.granted,
        ..decision_now
    };
    let (o, mut extra) = answered(&bucket, rate, decision_now);
    extra.insert(
        "lease".into(),
        match &out.lease {
            Some(l) => json!({
                "id": l.id,
                "amount": l.amount,
                "deadlineMs": l.deadline_ns.div_euclid(1_000_000),
            }),
            None => Value::Null,
        },
    );
    extra.insert("returned".into(), json!(out.returned));
    extra.insert("duplicate".into(), json!(out.duplicate));
    extra.insert("exact".into(), json!(exact));
    let detail = || format!("limit {name} for {id:?} has no room for the lease");
    Ok(decision(
        &verdict(name, &o),
        &[],
        extra,
        req.on_refusal,
        detail,
    ))
}
