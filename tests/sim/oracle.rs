//! The oracle (decision 2300), judged only from what clients saw and did, at every step: the
//! answers they got, the sockets they hold, the limits the operator set. It reads none of the
//! product's state (session rows, counter items) and calls none of its functions to judge.
//!
//! - **0 over-admission**: when a `$connect` is answered 200, the sockets clients hold open in
//!   the tenant (admitted, not yet left and not closed through the Management API) are at most
//!   the highest `tenantConnections` in effect during the round (a socket admitted under a higher
//!   cap may outlive a lowered one, but nothing is admitted past the cap in effect; a sharded
//!   tenant, whose lowered cap is exact only once every shard is under its new share, is allowed
//!   the highest cap since its last reshard); the sockets held in the session (in the incarnation
//!   the client knows: every PUT, DELETE or TTL deletion starts another) at most
//!   `connectionsPerSession`. A capacity released twice shows here, as the admission it lets in.
//! - **rates**: the admissions clients were answered 200 never exceed `tenantPerMinute` /
//!   `sessionPerMinute` per fixed minute (or, GCRA, `burst + elapsed / emission interval`
//!   between any two), nor messages `messagesPerMinute`.
//! - **0 leaked capacity** (at the end, [`crate::run`]): after every record is delivered and the
//!   reconciler has run (the documented repair), as many new sockets as the cap leaves free
//!   beside the held ones are admitted.
//! - **documented answers**: every status a client saw is one the docs name; a 5xx (or a handler
//!   error) only in a round with an injected fault, or in which DynamoDB Local itself was slow.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use shared::clock::Timestamp;
use shared::counter::window::MinuteWindow;

use crate::clocks::UNCERTAINTY;
use turnstile_local::management::Received;

use crate::run::Answer;
use crate::schedule::{Caps, Op, Schedule};

/// A session as its clients know it: tenant, session, incarnation.
type Key = (usize, usize, u32);

/// What clients saw and hold, and the violations found from it.
#[derive(Debug, Default)]
pub struct Seen {
    round: usize,
    faulted: bool,
    names: Vec<String>,
    gcra: Vec<bool>,
    answers: Vec<(Op, Answer, bool)>,
    caps: BTreeMap<usize, Vec<(Timestamp, Caps)>>,
    /// The highest caps in effect during the current round, per tenant.
    round_high: Vec<Caps>,
    /// Per tenant, the cap allowed while a lowered cap is not yet exact (sharded tenants).
    lowered: Vec<u64>,
    /// How long the authorizer's tenant cache may serve a tenant's old limits to `$connect`
    /// (and `$default`'s cache to messages): a change is in effect for admissions from its
    /// write, and the caps it replaced until this much later.
    stale: Duration,
    /// Sockets clients hold open: id → the session they joined.
    held: BTreeMap<String, Key>,
    /// Sockets the Management API closed (answered 204), and how much of its log was read.
    closed: BTreeSet<String>,
    /// Sockets whose clients left (a `$connect` answered after that opens nothing they hold).
    left: BTreeSet<String>,
    log_read: usize,
    incarnation: HashMap<(usize, usize), u32>,
    tenant_admits: Vec<Vec<Timestamp>>,
    session_admits: HashMap<Key, Vec<Timestamp>>,
    messages: HashMap<Key, Vec<Timestamp>>,
    violations: Vec<String>,
}

impl Seen {
    pub fn new(sch: &Schedule, names: Vec<String>, stale: Duration) -> Seen {
        let n = names.len();
        Seen {
            names,
            stale,
            gcra: sch.tenants.iter().map(|t| t.gcra).collect(),
            round_high: sch.tenants.iter().map(|t| t.caps).collect(),
            lowered: vec![0; n],
            tenant_admits: vec![Vec::new(); n],
            ..Seen::default()
        }
    }

    /// A new round: the caps in effect at its start are its highest so far.
    pub fn round_start(&mut self, round: usize, now: Timestamp, faulted: bool, caps: &[Caps]) {
        self.round = round;
        self.faulted = faulted;
        self.answers.clear();
        self.round_high = caps.to_vec();
        for (t, c) in caps.iter().enumerate() {
            self.caps.entry(t).or_default().push((now, *c));
        }
    }

    /// The operator changed tenant `t`'s caps.
    pub fn caps_in_effect(&mut self, t: usize, caps: Caps, at: Timestamp) {
        self.caps.entry(t).or_default().push((at, caps));
        let h = &mut self.round_high[t];
        h.tenant_connections = h.tenant_connections.max(caps.tenant_connections);
        h.per_session = h.per_session.max(caps.per_session);
    }

    pub fn set_lowered(&mut self, lowered: Vec<u64>) {
        self.lowered = lowered;
    }

    fn violation(&mut self, v: String) {
        let v = format!("round {}: {v}", self.round);
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }

    /// The findings since the last call.
    pub fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
    }

    /// The incarnation of session `s` of `t` its clients know now.
    pub fn incarnation(&self, t: usize, s: usize) -> u32 {
        self.incarnation.get(&(t, s)).copied().unwrap_or(0)
    }

    /// The session may be another from now on (a PUT or DELETE answered, failed or crashed, a
    /// TTL deletion): what clients did in it before is not counted against the next one.
    pub fn churned(&mut self, t: usize, s: usize) {
        *self.incarnation.entry((t, s)).or_default() += 1;
    }

    /// The round's answers are judged as under a fault: DynamoDB Local itself answered slower
    /// than [`crate::run::SLOW`] (the machine's stall, not one the harness injected).
    pub fn excuse_slow(&mut self) {
        for a in &mut self.answers {
            a.2 = true;
        }
    }

    /// Whether a client of this round saw a 5xx or a handler's error.
    pub fn failed(&self) -> bool {
        self.answers.iter().any(|(_, a, _)| match a {
            Answer::Status(s) => *s >= 500,
            Answer::Error(_) => true,
        })
    }

    pub fn answer(&mut self, op: &Op, a: Answer) {
        if let Op::PutSession { t, s } | Op::DeleteSession { t, s } = op {
            self.churned(*t, *s);
        }
        self.answers.push((op.clone(), a, self.faulted));
    }

    pub fn crashed(&mut self, op: &Op) {
        if let Op::PutSession { t, s } | Op::DeleteSession { t, s } = op {
            self.churned(*t, *s);
        }
    }

    /// The Management API's log since the last read: sockets it closed are no longer held.
    pub fn sync_closed(&mut self, log: &[Received]) {
        for r in log.iter().skip(self.log_read) {
            if r.method == "DELETE" && r.status == 204 {
                self.closed.insert(r.connection_id.clone());
                self.held.remove(&r.connection_id);
            }
        }
        self.log_read = log.len();
    }

    /// The client of `cid` left (closed its socket).
    pub fn left(&mut self, cid: &str) {
        self.held.remove(cid);
        self.left.insert(cid.to_string());
    }

    /// The ids of the sockets clients of tenant `t` hold open now (for a violation's message).
    pub fn held_ids(&self, t: usize) -> Vec<String> {
        self.held
            .iter()
            .filter(|(_, k)| k.0 == t)
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// Whether a client holds socket `cid` open.
    pub fn holds(&self, cid: &str) -> bool {
        self.held.contains_key(cid)
    }

    /// Sockets clients of tenant `t` hold open now.
    pub fn held_in(&self, t: usize) -> usize {
        self.held.values().filter(|k| k.0 == t).count()
    }

    /// `$connect` of `cid` to session `s` (incarnation `inc` when it was sent) answered 200 at
    /// `at`: the socket is held (unless already closed), and every limit is checked.
    pub fn admitted(&mut self, t: usize, s: usize, inc: u32, cid: &str, at: Timestamp) {
        let key = (t, s, inc);
        if !self.closed.contains(cid) && !self.left.contains(cid) {
            self.held.insert(cid.to_string(), key);
        }
        let name = self.names[t].clone();
        let n = self.held_in(t) as u64;
        // The instance that admitted read its clock up to UNCERTAINTY away from `at`.
        let since = back(at, self.stale + UNCERTAINTY);
        let until = at.plus(UNCERTAINTY);
        let cap = self.round_high[t]
            .tenant_connections
            .max(self.lowered[t])
            .max(self.max_cap(t, since, until, |c| c.tenant_connections));
        if n > cap {
            self.violation(format!(
                "over-admission: clients of tenant {name} hold {n} open sockets once {cid} is \
                 admitted, cap {cap}"
            ));
        }
        let in_session = self.held.values().filter(|k| **k == key).count() as u64;
        let per = self.round_high[t]
            .per_session
            .max(self.max_cap(t, since, until, |c| c.per_session));
        if in_session > per {
            self.violation(format!(
                "over-admission: session s{s} of {name} has {in_session} open sockets once {cid} \
                 is admitted, cap {per}"
            ));
        }
        self.tenant_admits[t].push(at);
        self.session_admits.entry(key).or_default().push(at);
        let gcra = self.gcra[t];
        let found = over_rate(&self.tenant_admits[t], gcra, |a, b| {
            self.max_cap(t, widened(a, self.stale), b.plus(UNCERTAINTY), |c| {
                c.tenant_per_minute
            })
        });
        if let Some(v) = found {
            self.violation(format!("tenantPerMinute of {name}: {v}"));
        }
        let found = over_rate(&self.session_admits[&key], gcra, |a, b| {
            self.max_cap(t, widened(a, self.stale), b.plus(UNCERTAINTY), |c| {
                c.session_per_minute
            })
        });
        if let Some(v) = found {
            self.violation(format!("sessionPerMinute of s{s} of {name}: {v}"));
        }
    }

    /// A message on `cid` answered 200 at `at`.
    pub fn message(&mut self, cid: &str, at: Timestamp) {
        let Some(key) = self.held.get(cid).copied() else {
            return;
        };
        self.messages.entry(key).or_default().push(at);
        // Messages are counted in fixed minutes whatever the tenant's algorithm.
        let found = over_rate(&self.messages[&key], false, |a, b| {
            self.max_cap(key.0, widened(a, self.stale), b.plus(UNCERTAINTY), |c| {
                c.messages_per_minute
            })
        });
        if let Some(v) = found {
            let name = self.names[key.0].clone();
            self.violation(format!("messagesPerMinute of s{} of {name}: {v}", key.1));
        }
    }

    /// The round's answers against the documented statuses.
    pub fn end_round(&mut self) {
        for (op, a, faulted) in std::mem::take(&mut self.answers) {
            let ok = match &a {
                Answer::Status(s) => documented(&op, *s) || (faulted && *s >= 500),
                Answer::Error(_) => faulted,
            };
            if !ok {
                self.violation(format!(
                    "undocumented answer {} to {op:?} (fault injected: {faulted})",
                    a.describe()
                ));
            }
        }
    }

    /// The largest value of `f` over the caps in effect at any time in `[from, to]`.
    fn max_cap(&self, t: usize, from: Timestamp, to: Timestamp, f: fn(&Caps) -> u64) -> u64 {
        let Some(h) = self.caps.get(&t) else { return 0 };
        // The caps in effect when `from` began, and every change up to `to` (changes at the same
        // instant are all in effect: steps of one round read the model's caps at different times).
        let before = h.iter().rfind(|(at, _)| *at < from);
        before
            .into_iter()
            .chain(h.iter().filter(|(at, _)| *at >= from && *at <= to))
            .map(|(_, c)| f(c))
            .max()
            .unwrap_or(0)
    }
}

/// `at` moved back by `d` (a cached tenant row's age at most).
fn back(at: Timestamp, d: Duration) -> Timestamp {
    Timestamp::from_nanos(at.as_nanos().saturating_sub(d.as_nanos() as i64))
}

/// The start of the caps a window starting at `a` is judged against: a cached row's age before
/// it, and the instances' clocks' UNCERTAINTY.
fn widened(a: Timestamp, stale: Duration) -> Timestamp {
    back(a, stale + UNCERTAINTY)
}

/// The documented statuses of each step (the functions' module docs and docs/websocket.md).
fn documented(op: &Op, status: i64) -> bool {
    match op {
        // 503 (`Retry-After`) over an expired session whose sockets are not known gone yet.
        Op::PutSession { .. } => [200, 503].contains(&status),
        Op::DeleteSession { .. } => [200, 404].contains(&status),
        Op::Connect { .. } | Op::DisconnectFirst { .. } => [200, 404, 429].contains(&status),
        Op::Leave { .. } => status == 200,
        Op::Message { .. } => [200, 403, 410, 429].contains(&status),
        Op::Deliver { .. }
        | Op::Reconcile { .. }
        | Op::Expire { .. }
        | Op::Limits { .. }
        | Op::Reshard { .. } => status == 200,
        // Checked by the reservation oracle, on the answers themselves.
        Op::Res(_) | Op::Kv(_) => true,
    }
}

/// Whether admissions at `times` exceed a per-minute limit whose largest cap between two instants
/// is `cap(a, b)`: per fixed minute, or (GCRA, burst = count) `cap + elapsed / (60 s / cap)`
/// between any two admissions.
fn over_rate(
    times: &[Timestamp],
    gcra: bool,
    cap: impl Fn(Timestamp, Timestamp) -> u64,
) -> Option<String> {
    let mut ts = times.to_vec();
    ts.sort();
    if !gcra {
        // Counted only where the instance's own clock surely put it in the same minute: at
        // least UNCERTAINTY inside the minute's ends.
        let mut per: BTreeMap<i64, u64> = BTreeMap::new();
        for t in &ts {
            let m = MinuteWindow::at(*t).start;
            let (lo, hi) = (t.minus(UNCERTAINTY), t.plus(UNCERTAINTY));
            if MinuteWindow::at(lo).start == m && MinuteWindow::at(hi).start == m {
                *per.entry(m).or_default() += 1;
            }
        }
        for (m, n) in per {
            let start = Timestamp::from_secs(m);
            let end = start
                .plus(Duration::from_secs(60))
                .minus(Duration::from_nanos(1));
            let c = cap(start, end);
            if n > c {
                return Some(format!(
                    "{n} admitted in the minute starting {start}, cap {c}"
                ));
            }
        }
        return None;
    }
    for i in 0..ts.len() {
        for j in i + 1..ts.len() {
            let c = cap(ts[i], ts[j]).max(1);
            let ei = 60_000_000_000u128 / u128::from(c);
            // Two instances' readings of the two admissions differ by up to twice UNCERTAINTY more.
            let elapsed =
                (ts[j].as_nanos() - ts[i].as_nanos()).max(0) as u128 + 2 * UNCERTAINTY.as_nanos();
            let allowed = u128::from(c) + elapsed / ei;
            let n = (j - i + 1) as u128;
            if n > allowed {
                return Some(format!(
                    "{n} admitted between {} and {}, GCRA allows {allowed}",
                    ts[i], ts[j]
                ));
            }
        }
    }
    None
}

/// The round a side oracle (the reservation and kv lanes') is checking, and what it found: each
/// finding prefixed with its round and kept once.
#[derive(Debug, Default)]
pub struct Lane {
    pub round: usize,
    /// The round's instant (the clock moves only between rounds).
    pub now: Timestamp,
    /// Whether the round has an injected proxy fault.
    pub faulted: bool,
    violations: Vec<String>,
    /// Store errors of an unfaulted round, held until [`Lane::end_round`] knows whether
    /// DynamoDB Local answered slowly in it.
    unless_slow: Vec<String>,
}

impl Lane {
    pub fn start(&mut self, round: usize, now: Timestamp, faulted: bool) {
        self.round = round;
        self.now = now;
        self.faulted = faulted;
    }

    /// A store error or failure with no fault injected: a violation unless the round turns out
    /// slow (see [`Seen::excuse_slow`]).
    pub fn unless_slow(&mut self, v: String) {
        let v = format!("round {}: {v}", self.round);
        self.unless_slow.push(v);
    }

    /// The round is over: its held findings become violations unless it was `slow`.
    pub fn end_round(&mut self, slow: bool) {
        for v in std::mem::take(&mut self.unless_slow) {
            if !slow && !self.violations.contains(&v) {
                self.violations.push(v);
            }
        }
    }

    pub fn violation(&mut self, v: String) {
        let v = format!("round {}: {v}", self.round);
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }

    /// The findings since the last call.
    pub fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
    }
}
