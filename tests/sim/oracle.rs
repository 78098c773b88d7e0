//! The oracle (decision 2300): what may be admitted, checked at every checkpoint (after each
//! round, with nothing in flight) and at the end of a schedule.
//!
//! - **0 over-admission**: a tenant's open connections (the distinct ids in its sessions) never
//!   exceed `max(cap during the round, open connections before it)` — a connection admitted under
//!   a higher cap may outlive a lowered one, but nothing is admitted past the cap in effect; the
//!   same per session; per-minute admissions never exceed the fixed window's cap, or, for GCRA,
//!   `burst + elapsed / emission interval` between any two admissions; admitted messages likewise.
//! - **no capacity released twice**: the tenant's count (the sum of its counter items) is never
//!   below its open connections at a checkpoint.
//! - **0 leaked capacity**: after the final reconciler run, the count equals the truth.
//! - **documented answers**: every status a client saw is one the docs name; a 5xx (or a handler
//!   error) only in a round with an injected fault.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use shared::clock::Timestamp;
use shared::counter::window::MinuteWindow;
use shared::ids::TenantId;

use crate::run::Answer;
use crate::schedule::{Caps, Op, Schedule};

/// One tenant as the oracle read it.
#[derive(Debug, Default)]
pub struct TenantState {
    /// Session id → (its nonce: the incarnation, its connection ids).
    pub sessions: HashMap<String, (String, Vec<String>)>,
    /// The sum of the tenant's counter items (`{tenant}`, or its shards).
    pub count: i64,
    pub at: Timestamp,
}

impl TenantState {
    fn truth(&self) -> BTreeSet<&String> {
        self.sessions.values().flat_map(|(_, ids)| ids).collect()
    }
}

#[derive(Debug, Default)]
pub struct Checkpoint {
    pub tenants: Vec<TenantState>,
}

/// What clients saw during the current round, and the limits' history.
#[derive(Debug, Default)]
pub struct Seen {
    round: usize,
    faulted: bool,
    now: Timestamp,
    answers: Vec<(Op, Answer, bool)>,
    admitted: Vec<(usize, String, String, Timestamp)>,
    messages: Vec<(usize, String, Timestamp)>,
    churned: BTreeSet<(usize, String)>,
    caps: BTreeMap<usize, Vec<(Timestamp, Caps)>>,
}

impl Seen {
    pub fn round_start(&mut self, round: usize, now: Timestamp, faulted: bool) {
        self.round = round;
        self.now = now;
        self.faulted = faulted;
        self.answers.clear();
        self.admitted.clear();
        self.messages.clear();
        self.churned.clear();
    }

    pub fn caps_in_effect(&mut self, t: usize, caps: Caps, at: Timestamp) {
        self.caps.entry(t).or_default().push((at, caps));
    }

    /// The round's answers are judged as under a fault: DynamoDB Local itself answered slower
    /// than [`crate::run::SLOW`] (the machine's stall, not one the harness injected).
    pub fn excuse_slow(&mut self) {
        for a in &mut self.answers {
            a.2 = true;
        }
    }

    pub fn answer(&mut self, op: &Op, a: Answer) {
        if let Op::PutSession { t, s } | Op::DeleteSession { t, s } = op {
            self.churned.insert((*t, format!("s{s}")));
        }
        self.answers.push((op.clone(), a, self.faulted));
    }

    pub fn crashed(&mut self, op: &Op) {
        if let Op::PutSession { t, s } | Op::DeleteSession { t, s } = op {
            self.churned.insert((*t, format!("s{s}")));
        }
    }

    pub fn churned(&mut self, t: usize, sid: &str) {
        self.churned.insert((t, sid.to_string()));
    }

    pub fn admitted(&mut self, t: usize, sid: &str, cid: &str, at: Timestamp) {
        self.admitted
            .push((t, sid.to_string(), cid.to_string(), at));
    }

    pub fn message(&mut self, t: usize, sid: &str, at: Timestamp) {
        self.messages.push((t, sid.to_string(), at));
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

/// The documented statuses of each step (the functions' module docs and docs/websocket.md).
fn documented(op: &Op, status: i64) -> bool {
    match op {
        Op::PutSession { .. } => status == 200,
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

type Key = (usize, String, String);

pub struct Oracle {
    gcra: Vec<bool>,
    tenants: Vec<TenantId>,
    prev_truth: Vec<usize>,
    prev_session: HashMap<Key, usize>,
    tenant_admits: Vec<HashMap<String, Timestamp>>,
    session_admits: HashMap<Key, BTreeMap<String, Timestamp>>,
    messages: HashMap<Key, Vec<Timestamp>>,
    violations: Vec<String>,
}

impl Oracle {
    pub fn new(sch: &Schedule, tenants: Vec<TenantId>, _start: Timestamp) -> Oracle {
        let n = tenants.len();
        Oracle {
            gcra: sch.tenants.iter().map(|t| t.gcra).collect(),
            tenants,
            prev_truth: vec![0; n],
            prev_session: HashMap::new(),
            tenant_admits: vec![HashMap::new(); n],
            session_admits: HashMap::new(),
            messages: HashMap::new(),
            violations: Vec::new(),
        }
    }

    pub fn violation(&mut self, v: String) {
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }

    pub fn into_violations(self) -> Vec<String> {
        self.violations
    }

    /// The checks after round `round` (every round's answers, limits and counts). `lowered[t]`:
    /// for a sharded tenant, the highest `tenantConnections` in effect since its last reshard
    /// (else 0). Lowering a sharded tenant's cap is exact only once every shard is under its new
    /// share; meanwhile a shard under its new share admits (decision 1502: at most
    /// `Σ max(cᵢ, sᵢ(new))`, which is at most the highest cap the shards admitted under).
    pub fn check(&mut self, round: usize, cp: &Checkpoint, seen: &Seen, lowered: &[u64]) {
        let from = seen.now;
        for (op, a, faulted) in &seen.answers {
            let ok = match a {
                Answer::Status(s) => documented(op, *s) || (*faulted && *s >= 500),
                Answer::Error(_) => *faulted,
            };
            if !ok {
                self.violation(format!(
                    "round {round}: undocumented answer {} to {op:?} (fault injected: {faulted})",
                    a.describe()
                ));
            }
        }
        for (i, st) in cp.tenants.iter().enumerate() {
            let t = self.tenants[i].clone();
            let truth = st.truth();
            let cap = seen
                .max_cap(i, from, st.at, |c| c.tenant_connections)
                .max(lowered[i]) as usize;
            if truth.len() > cap.max(self.prev_truth[i]) {
                self.violation(format!(
                    "round {round}: over-admission: tenant {t} holds {} open connections, cap {cap} \
                     (and {} before the round)",
                    truth.len(),
                    self.prev_truth[i]
                ));
            }
            self.prev_truth[i] = truth.len();
            if st.count < truth.len() as i64 {
                self.violation(format!(
                    "round {round}: capacity released twice: tenant {t} counts {} but holds {} \
                     open connections",
                    st.count,
                    truth.len()
                ));
            }
            let per = seen.max_cap(i, from, st.at, |c| c.per_session) as usize;
            let mut sessions: Vec<_> = st.sessions.iter().collect();
            sessions.sort();
            for (sid, (nonce, ids)) in sessions {
                let key = (i, sid.clone(), nonce.clone());
                let before = self.prev_session.get(&key).copied().unwrap_or(0);
                if ids.len() > per.max(before) {
                    self.violation(format!(
                        "round {round}: over-admission: session {sid} of {t} holds {} connections, \
                         cap {per} (and {before} before)",
                        ids.len()
                    ));
                }
                self.prev_session.insert(key.clone(), ids.len());
                let admits = self.session_admits.entry(key).or_default();
                for c in ids {
                    admits.entry(c.clone()).or_insert(st.at);
                    self.tenant_admits[i].entry(c.clone()).or_insert(st.at);
                }
            }
            // Admissions clients saw answered 200 (the connection may have left already).
            for (ti, sid, cid, at) in seen.admitted.iter().filter(|a| a.0 == i) {
                self.tenant_admits[*ti].entry(cid.clone()).or_insert(*at);
                if seen.churned.contains(&(*ti, sid.clone())) {
                    continue;
                }
                if let Some((nonce, _)) = st.sessions.get(sid) {
                    self.session_admits
                        .entry((*ti, sid.clone(), nonce.clone()))
                        .or_default()
                        .entry(cid.clone())
                        .or_insert(*at);
                }
            }
            for (ti, sid, at) in seen.messages.iter().filter(|m| m.0 == i) {
                if seen.churned.contains(&(*ti, sid.clone())) {
                    continue;
                }
                if let Some((nonce, _)) = st.sessions.get(sid) {
                    self.messages
                        .entry((*ti, sid.clone(), nonce.clone()))
                        .or_default()
                        .push(*at);
                }
            }
            let gcra = self.gcra[i];
            let times: Vec<Timestamp> = self.tenant_admits[i].values().copied().collect();
            if let Some(v) = over_rate(&times, gcra, |a, b| {
                seen.max_cap(i, a, b, |c| c.tenant_per_minute)
            }) {
                self.violation(format!("round {round}: tenantPerMinute of {t}: {v}"));
            }
            let keys: Vec<Key> = self
                .session_admits
                .keys()
                .filter(|k| k.0 == i)
                .cloned()
                .collect();
            for k in keys {
                let times: Vec<Timestamp> = self.session_admits[&k].values().copied().collect();
                if let Some(v) = over_rate(&times, gcra, |a, b| {
                    seen.max_cap(i, a, b, |c| c.session_per_minute)
                }) {
                    self.violation(format!(
                        "round {round}: sessionPerMinute of {} of {t}: {v}",
                        k.1
                    ));
                }
            }
            let keys: Vec<Key> = self.messages.keys().filter(|k| k.0 == i).cloned().collect();
            for k in keys {
                // Messages are counted in fixed minutes whatever the tenant's algorithm.
                if let Some(v) = over_rate(&self.messages[&k], false, |a, b| {
                    seen.max_cap(i, a, b, |c| c.messages_per_minute)
                }) {
                    self.violation(format!(
                        "round {round}: messagesPerMinute of {} of {t}: {v}",
                        k.1
                    ));
                }
            }
        }
    }

    /// After the final reconciler run: every count is the truth (0 leaked capacity).
    pub fn exact(&mut self, cp: &Checkpoint) {
        for (i, st) in cp.tenants.iter().enumerate() {
            let truth = st.truth().len() as i64;
            if st.count != truth {
                let t = self.tenants[i].clone();
                self.violation(format!(
                    "after the final reconcile: tenant {t} counts {} but holds {truth} (leaked {})",
                    st.count,
                    st.count - truth
                ));
            }
        }
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
        let mut per: BTreeMap<i64, u64> = BTreeMap::new();
        for t in &ts {
            *per.entry(MinuteWindow::at(*t).start).or_default() += 1;
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
            let elapsed = (ts[j].as_nanos() - ts[i].as_nanos()).max(0) as u128;
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
