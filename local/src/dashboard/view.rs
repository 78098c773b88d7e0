//! What the page draws, from one [`Snapshot`] at one instant: each tenant's open connections
//! against its cap, each session's sockets against the per-session cap and its expiry, each
//! key-value bucket's capacity now and each fungible bucket's tokens now. Pure, so it is tested
//! with exact items and instants. The bucket levels come from the limiters' own arithmetic
//! (`shared::gcra::spend` with cost 0, `shared::token::bucket::refill`), never a copy of it.
//!
//! Everything here is a number or an id; the page turns names into words (no attribute names or
//! epoch numbers reach the screen).

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use shared::clock::Timestamp;
use shared::counter::attr as counter_attr;
use shared::counter::window::MinuteWindow;
use shared::dynamo::item::{num, string_set, Item};
use shared::gcra::{self, Rate};
use shared::gcra_write::attr as gattr;
use shared::kv::attr as kattr;
use shared::limit::LimitRow;
use shared::session::attr as session_attr;
use shared::tenant::{Limits, WindowAlgorithm};
use shared::token::bucket::{parse_ms, refill, time_for, BucketState};

use super::snapshot::{Rows, Snapshot};

/// Gauges of each kind sent at most (the rest are counted in `more`).
pub const GAUGES: usize = 48;

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub tenants: Vec<TenantView>,
    pub sessions: Vec<SessionView>,
    pub kv_buckets: Vec<KvGauge>,
    pub token_buckets: Vec<TokenGauge>,
    /// Gauges beyond [`GAUGES`] not sent: (key-value, token).
    pub more_gauges: (usize, usize),
    /// Rows and settings that could not be read, with why.
    pub problems: Vec<String>,
    /// Tables holding more items than were read (`sessions`, `counters`, ...).
    pub truncated: Vec<&'static str>,
    /// Tables that do not exist here.
    pub missing: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    pub tenant_id: String,
    pub limits: Limits,
    /// Connections open now (its counter item, and its shards').
    pub open_connections: u64,
    /// Connections opened this minute (fixed windows only; `None` under GCRA).
    pub connections_this_minute: Option<u64>,
    pub sessions: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub tenant_id: String,
    pub session_id: String,
    pub sockets: Vec<String>,
    /// The tenant's connections per session (`None`: tenant not found).
    pub cap: Option<u64>,
    /// Seconds until the session expires (negative: expired, not yet deleted).
    pub expires_in_secs: Option<i64>,
    pub messages_this_minute: u64,
    pub connections_this_minute: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KvGauge {
    /// The item key, `{nameId}:{id}` (`{nameId}/{shard}:{id}` for a shard).
    pub bucket: String,
    /// The limit's name as stored with the bucket (`None`: written before names were stored).
    pub limit: Option<String>,
    pub id: String,
    pub shard: Option<u32>,
    /// Whole tokens a spend could take now.
    pub available: u64,
    pub capacity: u64,
    pub refill_per_sec: f64,
    /// Until the bucket is full again.
    pub full_in_ms: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenGauge {
    pub resource: String,
    pub account: String,
    pub shard: Option<u32>,
    /// Tokens now, the refill since the last take included (as stored when the limit is unknown).
    pub available: u64,
    /// Tokens per window (`None`: no limit row for the bucket, so its default is the caller's).
    pub capacity: Option<u64>,
    pub window_secs: Option<i64>,
    pub full_in_ms: Option<u64>,
}

fn flags(v: &mut View, name: &'static str, rows: &Rows) {
    if rows.truncated {
        v.truncated.push(name);
    }
    if rows.missing {
        v.missing.push(name);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn text(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn count(item: &Item, name: &str) -> u64 {
    num(item, name).map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// A per-minute counter that belongs to the minute of `now` (else it counts an older minute: 0).
fn this_minute(item: &Item, minute_attr: &str, count_attr: &str, now: Timestamp) -> u64 {
    if num(item, minute_attr) == Some(MinuteWindow::at(now).start) {
        count(item, count_attr)
    } else {
        0
    }
}

pub fn build(s: &Snapshot, now: Timestamp) -> View {
    let mut v = View {
        problems: s.bad_tenants.clone(),
        ..View::default()
    };
    v.problems.extend(s.problems.iter().cloned());
    for (name, rows) in [
        ("sessions", &s.sessions),
        ("counters", &s.counters),
        ("buckets", &s.buckets),
        ("fungible tokens", &s.tokens),
        ("limits", &s.limits),
    ] {
        flags(&mut v, name, rows);
    }
    let limits: HashMap<&str, &Limits> = s
        .tenants
        .iter()
        .map(|t| (t.tenant_id.as_str(), &t.limits))
        .collect();
    sessions(&mut v, s, &limits, now);
    tenants(&mut v, s, now);
    kv_gauges(&mut v, &s.buckets.items, now);
    token_gauges(&mut v, s, now);
    v
}

fn sessions(v: &mut View, s: &Snapshot, limits: &HashMap<&str, &Limits>, now: Timestamp) {
    for item in &s.sessions.items {
        let (Some(tenant), Some(session)) = (
            text(item, session_attr::TENANT_ID),
            text(item, session_attr::SESSION_ID),
        ) else {
            v.problems
                .push("a session item without its tenant or session id".into());
            continue;
        };
        let mut sockets = string_set(item, session_attr::CONNECTION_IDS);
        sockets.sort();
        v.sessions.push(SessionView {
            cap: limits
                .get(tenant.as_str())
                .map(|l| l.connections_per_session),
            tenant_id: tenant,
            session_id: session,
            sockets,
            expires_in_secs: num(item, session_attr::SESSION_TTL).map(|t| t - now.as_secs()),
            messages_this_minute: this_minute(
                item,
                session_attr::MSG_MINUTE,
                session_attr::MSG_COUNT,
                now,
            ),
            connections_this_minute: this_minute(
                item,
                session_attr::CONN_MINUTE,
                session_attr::CONN_MINUTE_COUNT,
                now,
            ),
        });
    }
    v.sessions
        .sort_by(|a, b| (&a.tenant_id, &a.session_id).cmp(&(&b.tenant_id, &b.session_id)));
}

/// Which tenant a counter item counts open connections for: `{tenant}` or `{tenant}:shard:{i}`
/// (`shared::counter::keys`; ids hold no `:`, so the formats parse one way). Tombstones are not.
fn open_count_tenant(key: &str) -> Option<&str> {
    let mut parts = key.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(t), None, _, _) => Some(t),
        (Some(t), Some("shard"), Some(_), None) => Some(t),
        _ => None,
    }
}

fn tenants(v: &mut View, s: &Snapshot, now: Timestamp) {
    let mut open: HashMap<&str, u64> = HashMap::new();
    let mut minute: HashMap<&str, u64> = HashMap::new();
    for item in &s.counters.items {
        let Some(key) = item.get(counter_attr::KEY).and_then(|k| k.as_s().ok()) else {
            continue;
        };
        if let Some(t) = open_count_tenant(key) {
            *open.entry(t).or_default() += count(item, counter_attr::ITEM_COUNT);
            *minute.entry(t).or_default() += this_minute(
                item,
                counter_attr::CONN_MINUTE,
                counter_attr::CONN_MINUTE_COUNT,
                now,
            );
        }
    }
    for t in &s.tenants {
        let id = t.tenant_id.as_str();
        v.tenants.push(TenantView {
            tenant_id: id.to_string(),
            limits: t.limits,
            open_connections: open.get(id).copied().unwrap_or(0),
            connections_this_minute: (t.limits.rate_algorithm == WindowAlgorithm::Fixed)
                .then(|| minute.get(id).copied().unwrap_or(0)),
            sessions: v.sessions.iter().filter(|x| x.tenant_id == id).count(),
        });
    }
}

/// `{nameId}:{id}` or `{nameId}/{shard}:{id}` (`shared::kv`); lease items (`~lease:...`) are not
/// buckets.
fn kv_key(key: &str) -> Option<(Option<u32>, &str)> {
    let (head, id) = key.split_once(':')?;
    match head.split_once('/') {
        None => head.parse::<u16>().ok().map(|_| (None, id)),
        Some((name, shard)) => {
            name.parse::<u16>().ok()?;
            shard.parse().ok().map(|i| (Some(i), id))
        }
    }
}

fn kv_gauges(v: &mut View, items: &[Item], now: Timestamp) {
    for item in items {
        let Some(key) = item.get(kattr::BUCKET).and_then(|k| k.as_s().ok()) else {
            continue;
        };
        let Some((shard, id)) = kv_key(key) else {
            continue;
        };
        let stored = (
            num(item, gattr::BURST),
            num(item, gattr::COUNT),
            num(item, gattr::PERIOD_NS),
        );
        let rate = match stored {
            (Some(b), Some(c), Some(p)) => u64::try_from(p).ok().and_then(|p| {
                Rate::new(
                    u64::try_from(b).ok()?,
                    u64::try_from(c).ok()?,
                    Duration::from_nanos(p),
                )
                .ok()
            }),
            _ => None,
        };
        let Some(rate) = rate else {
            v.problems.push(format!(
                "key-value bucket {key}: no valid stored rate (burst, count, period)"
            ));
            continue;
        };
        let tat = num(item, gattr::TAT).map(Timestamp::from_nanos);
        // A spend of 0 is a check: the limiter's own answer to "how much is there now".
        let Ok(now_state) = gcra::spend(&rate, tat, now, 0) else {
            continue;
        };
        if v.kv_buckets.len() == GAUGES {
            v.more_gauges.0 += 1;
            continue;
        }
        v.kv_buckets.push(KvGauge {
            bucket: key.clone(),
            limit: text(item, gattr::LIMIT_NAME),
            id: id.to_string(),
            shard,
            available: now_state.remaining,
            capacity: rate.burst,
            refill_per_sec: rate.refill_per_sec(),
            full_in_ms: millis(now_state.reset_in),
        });
    }
    v.kv_buckets
        .sort_by(|a, b| (&a.limit, &a.id, a.shard).cmp(&(&b.limit, &b.id, b.shard)));
}

/// `{resource}#shard{i}`: shard `i` of a sharded resource (decision 1500).
fn token_resource(stored: &str) -> (&str, Option<u32>) {
    match stored.rsplit_once("#shard") {
        Some((r, i)) => match i.parse() {
            Ok(i) => (r, Some(i)),
            Err(_) => (stored, None),
        },
        None => (stored, None),
    }
}

fn token_gauges(v: &mut View, s: &Snapshot, now: Timestamp) {
    let Some(a) = s.token_attrs else {
        return;
    };
    let rows: HashMap<(&str, &str), &LimitRow> = s
        .limit_rows
        .iter()
        .map(|r| ((r.resource_name.as_str(), r.account_id.as_str()), r))
        .collect();
    let now_ns = now.as_nanos();
    for item in &s.tokens.items {
        let (Some(stored), Some(account)) = (text(item, a.resource_name), text(item, a.account_id))
        else {
            continue;
        };
        let (resource, shard) = token_resource(&stored);
        let tokens = num(item, a.tokens).unwrap_or(0);
        let last_refill = item
            .get(a.last_refill)
            .and_then(|v| v.as_n().ok())
            .and_then(|ms| parse_ms(ms));
        // The limit row's tokens per window; a shard holds its share of them.
        let limit = rows
            .get(&(resource, account.as_str()))
            .and_then(|r| Some((r.limit, r.window_sec?)))
            .and_then(|(limit, window)| {
                let limit = u64::try_from(limit).unwrap_or(0);
                let limit = match shard {
                    None => Some(limit),
                    Some(i) => s
                        .token_shards
                        .get(resource)
                        .map(|n| shared::shard::share(limit, *n, i)),
                }?;
                Some((limit, window))
            });
        if v.token_buckets.len() == GAUGES {
            v.more_gauges.1 += 1;
            continue;
        }
        let gauge = match limit {
            Some((limit, window)) if window > 0 => {
                let window_ns = u64::try_from(window)
                    .unwrap_or(0)
                    .saturating_mul(1_000_000_000);
                let state = BucketState {
                    tokens,
                    last_refill,
                };
                let now_state = refill(Some(&state), limit, window_ns, now_ns);
                let full_at = time_for(
                    now_state.available,
                    limit,
                    now_state.last_refill,
                    limit,
                    window_ns,
                );
                TokenGauge {
                    resource: resource.to_string(),
                    account,
                    shard,
                    available: now_state.available,
                    capacity: Some(limit),
                    window_secs: Some(window),
                    full_in_ms: Some(
                        u64::try_from(full_at.saturating_sub(now_ns).max(0) / 1_000_000)
                            .unwrap_or(0),
                    ),
                }
            }
            _ => TokenGauge {
                resource: resource.to_string(),
                account,
                shard,
                available: u64::try_from(tokens).unwrap_or(0),
                capacity: None,
                window_secs: None,
                full_in_ms: None,
            },
        };
        v.token_buckets.push(gauge);
    }
    v.token_buckets.sort_by(|a, b| {
        (&a.resource, &a.account, a.shard).cmp(&(&b.resource, &b.account, b.shard))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use shared::ids::TenantId;
    use shared::tenant::Tenant;
    use shared::token::Attrs;

    const S: i64 = 1_000_000_000;

    fn n(v: i64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }
    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
    fn rows(items: Vec<Item>) -> Rows {
        Rows {
            items,
            ..Rows::default()
        }
    }

    #[test]
    fn tenants_and_sessions_against_their_caps() {
        let now = Timestamp::from_secs(6_000 + 42); // 42 s into a minute
        let minute = 6_000;
        let snap = Snapshot {
            tenants: vec![Tenant {
                tenant_id: TenantId::parse("acme").unwrap(),
                limits: Limits::example(60, 5, 2, 10, 200, 60),
            }],
            sessions: rows(vec![item(&[
                ("tenantId", s("acme")),
                ("sessionId", s("s1")),
                (
                    "connectionIds",
                    AttributeValue::Ss(vec!["b".into(), "a".into()]),
                ),
                ("sessionTTL", n(6_042 + 240)),
                ("msgMinute", n(minute)),
                ("msgCount", n(7)),
                ("connMinute", n(minute - 60)),
                ("connMinuteCount", n(3)),
            ])]),
            counters: rows(vec![
                item(&[
                    ("key", s("acme")),
                    ("itemCount", n(2)),
                    ("connMinute", n(minute)),
                    ("connMinuteCount", n(4)),
                ]),
                item(&[("key", s("acme:shard:1")), ("itemCount", n(1))]),
                item(&[("key", s("acme:swept:s1:ev")), ("itemCount", n(9))]),
            ]),
            ..Snapshot::default()
        };
        let v = build(&snap, now);
        let t = &v.tenants[0];
        assert_eq!(
            (t.open_connections, t.connections_this_minute, t.sessions),
            (3, Some(4), 1)
        );
        let sv = &v.sessions[0];
        assert_eq!(sv.sockets, ["a", "b"]);
        assert_eq!(sv.cap, Some(2));
        assert_eq!(sv.expires_in_secs, Some(240));
        assert_eq!(
            (sv.messages_this_minute, sv.connections_this_minute),
            (7, 0)
        );
    }

    #[test]
    fn a_kv_bucket_reads_as_the_limiter_would_spend_it() {
        let now = Timestamp::from_secs(1_000);
        // Burst 10, 1 per second; TAT 7 s ahead: 3 tokens now, full in 7 s.
        let bucket = |key: &str| {
            item(&[
                ("bucket", s(key)),
                ("tat", n(now.as_nanos() + 7 * S)),
                ("burst", n(10)),
                ("count", n(1)),
                ("periodNs", n(S)),
                ("limitName", s("Worked")),
            ])
        };
        let snap = Snapshot {
            buckets: rows(vec![
                bucket("2:a"),
                bucket("2/1:a"),
                item(&[("bucket", s("~lease:1:2:a:l1")), ("amount", n(3))]),
                item(&[("bucket", s("3:b")), ("tat", n(0))]),
            ]),
            ..Snapshot::default()
        };
        let v = build(&snap, now);
        assert_eq!(v.kv_buckets.len(), 2, "{:?}", v.kv_buckets);
        let g = &v.kv_buckets[0];
        assert_eq!((g.available, g.capacity, g.full_in_ms), (3, 10, 7_000));
        assert_eq!((g.limit.as_deref(), g.id.as_str()), (Some("Worked"), "a"));
        assert_eq!(v.kv_buckets[1].shard, Some(1));
        assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    }

    #[test]
    fn a_fungible_bucket_refills_to_now() {
        let now = Timestamp::from_secs(1_000);
        let a = Attrs::CAMEL;
        let row = |account: &str| LimitRow {
            resource_name: "api".into(),
            account_id: account.into(),
            limit: 10,
            window_sec: Some(100),
            service_name: None,
        };
        let bucket = |resource: &str, account: &str| {
            item(&[
                (a.resource_name, s(resource)),
                (a.account_id, s(account)),
                (a.tokens, n(4)),
                // 20 s ago at 1 token per 10 s: 2 more tokens since.
                (a.last_refill, n(now.as_millis() - 20_000)),
            ])
        };
        let snap = Snapshot {
            tokens: rows(vec![
                bucket("api", "a1"),
                bucket("api#shard1", "a1"),
                bucket("api", "nobody"),
            ]),
            limit_rows: vec![row("a1")],
            token_attrs: Some(a),
            token_shards: HashMap::from([("api".to_string(), 4)]),
            ..Snapshot::default()
        };
        let v = build(&snap, now);
        let g = &v.token_buckets;
        assert_eq!(
            (
                g[0].account.as_str(),
                g[0].shard,
                g[0].available,
                g[0].capacity
            ),
            ("a1", None, 6, Some(10))
        );
        assert_eq!(g[0].full_in_ms, Some(40_000));
        // Shard 1 of 4 holds 3 of the 10 (shares 3, 3, 2, 2); it is full.
        assert_eq!(
            (g[1].shard, g[1].capacity, g[1].available),
            (Some(1), Some(3), 3)
        );
        assert_eq!(
            (g[2].account.as_str(), g[2].capacity, g[2].available),
            ("nobody", None, 4)
        );
    }
}
