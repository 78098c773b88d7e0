//! Where a coordinate's capacity comes from in the simulation, and what the oracle allows of it:
//! limit rows loaded and changed by the operator (`turnstile limits load`'s library function,
//! unproxied, as the tenant cap changes are), and rows rate-limiter-py wrote before the ledger.
//!
//! A limit change is in effect from the moment its load is sent (an operator whose command died
//! runs it again) until a later load answers; a limiter reads a limit row through its limit cache
//! (`TURNSTILE_LIMIT_CACHE_SECS`), so a grant at `t` may use any limit in effect in
//! `[t − cache, t]`. Lowering a limit does not evict (decision 0101, "Raising and lowering a
//! limit"): entries admitted under a higher limit keep their place, and since a shard admits only
//! below its share of the limit the admitting process uses, the clients of a coordinate hold at
//! most `C + H` at a grant, where `C` is the highest limit in that window and `H` the reservations
//! they hold that were granted when a limit above `C` could be in effect. With no change, `H` is
//! 0 and the bound is the capacity.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use shared::clock::Timestamp;
use shared::limit::load::{self, LimitKind, LimitSpec, LoadOptions};
use shared::limit::LimitStore;
use shared::reservation::Attrs;

use super::draw::Legacy;

/// Added to the limit cache's time: a limit row read just before the cache entry's clock reading
/// (time passing inside an operation, another instance's clock).
const MARGIN: Duration = Duration::from_secs(2);

/// The limit a client passes for a coordinate with a limit row: above any capacity drawn, so a
/// limiter that ignored the row would admit past it.
pub const DECOY_DEFAULT: i64 = 100;

/// One limit of a coordinate and when it may be in effect.
#[derive(Debug, Clone)]
struct Span {
    limit: u64,
    from: Timestamp,
    /// Until a later load answered (`None`: still, or its own load has not answered).
    until: Option<Timestamp>,
    /// Sent, not answered yet (running, or its command died): no other load ends it.
    pending: bool,
}

/// A coordinate's limits over time, as the operator's loads tell them.
#[derive(Debug, Clone)]
pub struct Capacity {
    spans: Vec<Span>,
    /// The limit the operator asked for last (the one in effect once every load answered).
    pub current: u64,
}

impl Capacity {
    pub fn new(limit: u64, start: Timestamp) -> Capacity {
        Capacity {
            spans: vec![Span {
                limit,
                from: start,
                until: None,
                pending: false,
            }],
            current: limit,
        }
    }

    /// A load setting `limit` was sent at `at`; returns its span's number for [`Self::answered`].
    pub fn sent(&mut self, limit: u64, at: Timestamp) -> usize {
        self.current = limit;
        self.spans.push(Span {
            limit,
            from: at,
            until: None,
            pending: true,
        });
        self.spans.len() - 1
    }

    /// Load `span` answered at `at`: every other limit ends then, but one whose own load has not
    /// answered (a died command, whose write may still land) unless it set the same limit.
    pub fn answered(&mut self, span: usize, at: Timestamp) {
        let limit = self.spans[span].limit;
        for (i, s) in self.spans.iter_mut().enumerate() {
            if i == span {
                s.pending = false;
            } else if s.until.is_none() && (!s.pending || s.limit == limit) {
                s.until = Some(at);
                s.pending = false;
            }
        }
    }

    /// The highest limit in effect at any time in `[from, to]`.
    pub fn highest(&self, from: Timestamp, to: Timestamp) -> u64 {
        self.spans
            .iter()
            .filter(|s| s.from <= to && s.until.is_none_or(|u| u >= from))
            .map(|s| s.limit)
            .max()
            .unwrap_or(self.current)
    }
}

/// How far back a grant may read a limit: the limit cache's time and a margin.
pub fn window(vars: &shared::config::Vars) -> Duration {
    LimitStore::cache_ttl(vars).unwrap_or(shared::limit::DEFAULT_CACHE) + MARGIN
}

/// The schedule's limits file: each coordinate with a limit row at its limit.
pub fn file(accounts: &[(String, u64)], resource: &str) -> Vec<LimitSpec> {
    accounts
        .iter()
        .map(|(account, limit)| LimitSpec {
            resource_name: resource.to_string(),
            account_id: account.clone(),
            limit: *limit as i64,
            window_sec: 1,
            kind: Some(LimitKind::NonFungible),
        })
        .collect()
}

/// Loads `specs` as `service`, as `turnstile limits load` does. An error or a refused load is
/// the caller's to report.
pub async fn apply(store: &LimitStore, service: &str, specs: &[LimitSpec]) -> Result<(), String> {
    match load::load(store, service, specs, LoadOptions::default()).await {
        Ok(d) if d.applied && d.conflicts.is_empty() => Ok(()),
        Ok(d) => Err(format!("the load was not applied: {d:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes a coordinate's rows as rate-limiter-py does (its item layout, no ledger): each `(id,
/// row, resource id)` expiring `ttl_secs` after `start`, a token naming its resource.
pub async fn write_legacy(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    attrs: Attrs,
    (resource, account, coordinate): (&str, &str, &str),
    rows: &[(String, Legacy, String)],
    start: Timestamp,
) -> Result<(), String> {
    for (id, row, resource_id) in rows {
        let exp = start.as_secs() + row.ttl_secs as i64;
        let mut put = client
            .put_item()
            .table_name(table)
            .item(
                attrs.resource_coordinate,
                AttributeValue::S(coordinate.into()),
            )
            .item(attrs.reservation_id, AttributeValue::S(id.clone()))
            .item(attrs.resource_name, AttributeValue::S(resource.into()))
            .item(attrs.account_id, AttributeValue::S(account.into()))
            .item(attrs.expiration_time, AttributeValue::N(exp.to_string()));
        if row.bound.is_some() {
            put = put.item(attrs.resource_id, AttributeValue::S(resource_id.clone()));
        }
        put.send().await.map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_in_effect_from_its_send_until_a_later_load_answers() {
        let t = |s: i64| Timestamp::from_secs(1_000 + s);
        let mut c = Capacity::new(10, t(0));
        assert_eq!(c.highest(t(0), t(5)), 10);
        let low = c.sent(3, t(10));
        // Sent, not answered: both may be in effect.
        assert_eq!(c.highest(t(10), t(10)), 10);
        c.answered(low, t(12));
        assert_eq!(c.highest(t(12), t(12)), 10, "until the answer");
        assert_eq!(c.highest(t(13), t(20)), 3);
        // A raise whose command died stays in effect through another load's answer.
        let died = c.sent(20, t(30));
        let other = c.sent(5, t(31));
        c.answered(other, t(32));
        assert_eq!(c.highest(t(40), t(40)), 20);
        let rerun = c.sent(20, t(41));
        c.answered(rerun, t(42));
        assert_eq!(c.highest(t(43), t(50)), 20);
        assert!(c.spans[died].until.is_some(), "ended by its own re-run");
        assert_eq!(c.current, 20);
    }
}
