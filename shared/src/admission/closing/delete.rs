//! Closing a session: reading its row, deleting it with its connections' counts, and draining sessions past their expiry.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use futures::future::BoxFuture;

use super::super::release::{self, Attempt};
use super::super::write::ConditionalUpdate;
use crate::counter::keys;
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::interleave::{Interleave, Point};
use crate::session::{attr as session_attr, store as sstore, Session};
use crate::Deps;

/// How long after a row's last join a 410 proves a socket gone: the reconciler's shortest grace
/// (the handlers' timeout plus a margin), which outlasts any `$connect`.
pub const MIN_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// Release transactions one end tries: each refusal is a connection that left meanwhile (its
/// `$disconnect`, usually after this call's own close) or a conflict.
pub(super) const ATTEMPTS: u32 = 12;

/// What one close answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// 2xx: API Gateway closes the socket.
    Closed,
    /// 410 (or 404): gone, or still inside its `$connect`.
    Gone,
    /// The Management API failed (tried twice): the socket may be open.
    Failed,
}

/// The Management API as ending a session uses it, and the points where a test stops an end.
pub trait Sockets: Send + Sync {
    /// Closes each socket (`DELETE @connections/{id}`), in the order given.
    fn close_each<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Vec<(String, Closed)>>;
    /// Run at each [`Point`] of an end (tests force crashes there).
    fn interleave(&self) -> &Interleave;
}

/// No Management API (the benchmarks' setup): nothing can be closed, so an expired session still
/// holding connections is not replaced.
#[derive(Debug, Default)]
pub struct NoSockets(Interleave);

impl Sockets for NoSockets {
    fn close_each<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Vec<(String, Closed)>> {
        Box::pin(async move { ids.iter().map(|c| (c.clone(), Closed::Failed)).collect() })
    }
    fn interleave(&self) -> &Interleave {
        &self.0
    }
}

/// A session row as an end reads it.
#[derive(Debug, Clone)]
pub struct Row {
    pub session: Session,
    /// `endedBy`: a `DELETE` ended it (and gave its session unit back).
    pub ended: Option<String>,
    /// `endedAt`: when (epoch seconds).
    pub ended_at: Option<i64>,
    /// `joinedAt`: when its last connection joined (epoch seconds).
    pub joined_at: Option<i64>,
}

impl Row {
    pub(super) fn of(table: &str, it: &Item) -> Result<Row> {
        Ok(Row {
            session: sstore::from_item(table, it)?,
            ended: item::lenient_opt_str(it, table, session_attr::ENDED_BY)?,
            ended_at: item::num(it, session_attr::ENDED_AT),
            joined_at: item::num(it, session_attr::JOINED_AT),
        })
    }

    /// Every connection of the row joined at or before this (epoch seconds): its last join, and in
    /// any case before its end or its TTL (a join needs `sessionTTL > now`).
    pub fn joined_by(&self) -> i64 {
        let bound = match self.ended {
            Some(_) => self.ended_at.unwrap_or(i64::MAX),
            None => self.session.session_ttl,
        };
        joined_by(self.joined_at, bound)
    }
}

/// See [`Row::joined_by`].
pub fn joined_by(joined_at: Option<i64>, ttl: i64) -> i64 {
    joined_at.map_or(ttl, |j| j.min(ttl))
}

/// Whether a socket of a row whose connections all joined by `joined_by` answered its close in a
/// way that proves it gone at `now` (epoch seconds).
pub fn known_gone(answer: Closed, joined_by: i64, now: i64) -> bool {
    match answer {
        Closed::Closed => true,
        Closed::Gone => now >= joined_by.saturating_add(MIN_GRACE.as_secs() as i64),
        Closed::Failed => false,
    }
}

/// The instant a close's answer is judged at: far ahead under the mutation that takes any 410
/// as proof of a socket gone.
pub(super) fn proof_clock(deps: &Deps) -> i64 {
    if crate::mutation::active(deps, crate::mutation::Mutation::SessionEndWithoutProof) {
        return i64::MAX;
    }
    deps.clock.now().as_secs()
}

/// The row (1 GetItem, strongly consistent), expired or not.
pub async fn read(deps: &Deps, t: &TenantId, sid: &SessionId) -> Result<Option<Row>> {
    let out = deps
        .dynamo
        .get_item()
        .table_name(&deps.tables.sessions)
        .set_key(Some(sstore::key(t, sid)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::dynamo("GetItem", e))?;
    out.item()
        .map(|it| Row::of(&deps.tables.sessions, it))
        .transpose()
}

/// What an end did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The session as it was read.
    pub session: Session,
    /// Sockets known gone and released.
    pub closed: Vec<String>,
    /// Sockets still counted in the ended row (a failed close, a 410 too soon after a join).
    pub closing: Vec<String>,
}

/// Session `DELETE`: ends the session (closed to joins, its session units given back: the
/// tenant's and its owner's, decision 3602) and closes its sockets, then releases the ones known
/// gone with the row when all are. With `own`, only a row that user owns is reached (another's
/// answers `None`, as a missing one, and nothing is closed). `None` when there is no row. Calls:
/// see the module docs (2 for a session without connections).
pub async fn delete(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    own: Option<&str>,
    sockets: &dyn Sockets,
) -> Result<Option<Ended>> {
    let Some(mut row) = read(deps, t, sid).await? else {
        return Ok(None);
    };
    let first = row.session.clone();
    let call = release::request_token();
    let mut closes = Closes::default();
    let mut floored = BTreeSet::new();
    for attempt in 1..=ATTEMPTS {
        // The owner never changes for a row's life; a row recreated by another user is not ours.
        if !row.session.reached_by(own) {
            return Ok((attempt > 1).then(|| closes.ended(first, Vec::new())));
        }
        // A row holding connections is ended first: no join after this, its units given back.
        if row.ended.is_none() && !row.session.connection_ids.is_empty() {
            match end(deps, t, sid, &call, row).await? {
                Some(now) if now.session.reached_by(own) => row = now,
                Some(_) | None if attempt == 1 => return Ok(None),
                Some(_) | None => return Ok(Some(closes.ended(first, Vec::new()))),
            }
            sockets.interleave().at(Point::EndAfterMark).await;
        }
        // Only a row without connections is still unended here: its units leave with it.
        let unit = row.ended.is_none();
        closes.close(sockets, &row, proof_clock(deps)).await;
        sockets.interleave().at(Point::EndAfterClose).await;
        let ids = &row.session.connection_ids;
        let gone: Vec<String> = ids.iter().filter(|c| closes.gone(c)).cloned().collect();
        let everything = gone.len() == ids.len();
        if gone.is_empty() && !everything {
            break;
        }
        let lead = if everything {
            sstore::delete_item(&deps.tables.sessions, t, sid, &row.session)?
        } else {
            take_out(&deps.tables.sessions, t, sid, &row.session, &gone)?
        };
        let mut plan = plan(t, &gone, &row.session.charges)?;
        if unit {
            plan.extend(units(t, &row.session)?);
        }
        plan.retain(|(counter, _)| !floored.contains(counter));
        let seed = format!("end|{t}|{sid}|{call}|{attempt}");
        match release::exactly_once(deps, lead, &plan, None, &seed).await? {
            Attempt::Committed if everything => {
                closes.released.extend(gone);
                return Ok(Some(closes.ended(first, Vec::new())));
            }
            Attempt::Committed => {
                row.session.connection_ids.retain(|c| !gone.contains(c));
                closes.released.extend(gone);
                break;
            }
            Attempt::LeadRefused(None) => {
                // Deleted meanwhile (by DynamoDB's TTL: the sweep releases what it held).
                row.session.connection_ids.clear();
                break;
            }
            Attempt::LeadRefused(Some(now)) => row = Row::of(&deps.tables.sessions, &now)?,
            Attempt::CountersRefused(refused) => {
                // A count already at its floor (repaired lower): nothing of it to give back.
                for counter in refused {
                    tracing::warn!(tenant = %t, counter = %counter.0, "a count at its floor: not decremented");
                    floored.insert(counter);
                }
            }
            Attempt::Again => Backoff::TRANSACTION.wait(attempt).await,
        }
    }
    let closing = row.session.connection_ids.clone();
    Ok(Some(closes.ended(first, closing)))
}

/// Marks the row ended by `call` and gives its session units back (the tenant's and its owner's),
/// exactly once (a transaction with a request token). Its `sessionTTL` is removed: every path
/// reads a row without one as expired (joins, messages, tickets and refreshes are refused), and
/// DynamoDB's TTL never deletes it while it still counts sockets. The row as it is afterwards:
/// `seen`, ended (a join that slipped in before is caught by the release's condition), or the
/// image of a row another call ended or another user created meanwhile, left as it is (its units
/// are not this call's to give back); `None` when there is none.
pub(super) async fn end(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    call: &str,
    mut seen: Row,
) -> Result<Option<Row>> {
    let now = deps.clock.now().as_secs();
    let mut plan = units(t, &seen.session)?;
    for attempt in 1..=ATTEMPTS {
        let mut p = ConditionalUpdate::default();
        p.name("#sid", session_attr::SESSION_ID)
            .name("#ttl", session_attr::SESSION_TTL)
            .name("#end", session_attr::ENDED_BY)
            .name("#eat", session_attr::ENDED_AT)
            .name("#owner", session_attr::OWNER);
        p.value(":now", n(now)).value(":call", s(call));
        p.conditions
            .push("attribute_exists(#sid) AND attribute_not_exists(#end)".into());
        // The units given back are the owner's read: only while the row is still that owner's.
        match &seen.session.owner {
            Some(o) => {
                p.value(":owner", s(o));
                p.conditions.push("#owner = :owner".into());
            }
            None => p.conditions.push("attribute_not_exists(#owner)".into()),
        }
        p.set.push("#end = :call".into());
        p.set.push("#eat = :now".into());
        p.remove.push("#ttl".into());
        let lead = lead_update(&deps.tables.sessions, t, sid, p, "ending a session")?;
        let seed = format!("mark|{t}|{sid}|{call}");
        match release::exactly_once(deps, lead, &plan, None, &seed).await? {
            Attempt::Committed => {
                seen.session.session_ttl = 0;
                seen.ended = Some(call.to_string());
                seen.ended_at = Some(now);
                return Ok(Some(seen));
            }
            Attempt::LeadRefused(None) => return Ok(None),
            Attempt::LeadRefused(Some(it)) => return Row::of(&deps.tables.sessions, &it).map(Some),
            Attempt::CountersRefused(refused) => {
                tracing::warn!(tenant = %t, counts = ?refused, "count at zero: not given back");
                plan.retain(|(k, _)| !refused.contains(k));
            }
            Attempt::Again => Backoff::TRANSACTION.wait(attempt).await,
        }
    }
    Err(Error::contended(
        format!("ending a session of tenant {t}"),
        ATTEMPTS,
    ))
}

/// Replaces or deletes an expired row whose sockets are all known gone, closing them first and
/// releasing them with the row (`PUT` over an expired session). The end, or the sockets still
/// closing (the row is then left, counted).
pub async fn drain_expired(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    fresh: Item,
    sockets: &dyn Sockets,
) -> Result<Drained> {
    let Some(mut row) = read(deps, t, sid).await? else {
        return Ok(Drained::Changed);
    };
    let owner = item::lenient_opt_str(&fresh, &deps.tables.sessions, session_attr::OWNER)?;
    let call = release::request_token();
    let mut closes = Closes::default();
    for attempt in 1..=ATTEMPTS {
        let now = deps.clock.now().as_secs();
        // A replacement keeps the owner (no count moves): a row now another's is looked at again.
        if !row.session.is_expired(now) || row.session.owner != owner {
            return Ok(Drained::Changed);
        }
        closes.close(sockets, &row, proof_clock(deps)).await;
        sockets.interleave().at(Point::EndAfterClose).await;
        let ids = &row.session.connection_ids;
        let gone: Vec<String> = ids.iter().filter(|c| closes.gone(c)).cloned().collect();
        if gone.len() != ids.len() {
            let closing = ids.iter().filter(|c| !closes.gone(c)).cloned().collect();
            return Ok(Drained::Closing(closing));
        }
        // An ended row gave its unit back: it is deleted, and the caller creates a counted one.
        let table = &deps.tables.sessions;
        let lead = match row.ended {
            None => sstore::replace_item(table, fresh.clone(), &row.session)?,
            Some(_) => sstore::delete_item(table, t, sid, &row.session)?,
        };
        let plan = plan(t, &gone, &row.session.charges)?;
        let seed = format!("drain|{t}|{sid}|{call}|{attempt}");
        match release::exactly_once(deps, lead, &plan, None, &seed).await? {
            Attempt::Committed if row.ended.is_none() => return Ok(Drained::Replaced(row.session)),
            Attempt::Committed => return Ok(Drained::Deleted(row.session)),
            Attempt::LeadRefused(None) => return Ok(Drained::Changed),
            Attempt::LeadRefused(Some(now)) => row = Row::of(&deps.tables.sessions, &now)?,
            Attempt::CountersRefused(_) | Attempt::Again => {
                Backoff::TRANSACTION.wait(attempt).await
            }
        }
    }
    Err(Error::contended(
        format!("replacing an expired session of tenant {t}"),
        ATTEMPTS,
    ))
}

/// What [`drain_expired`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drained {
    /// Replaced by the fresh row (the session count unchanged); the expired session as it was.
    Replaced(Session),
    /// Deleted (an ended row, whose unit was given back already): create a counted one.
    Deleted(Session),
    /// Not expired any more, or gone: look again.
    Changed,
    /// These sockets are not known gone yet: the row stays, counting them.
    Closing(Vec<String>),
}

/// The closes one end made, across its attempts (an id is closed once per end).
#[derive(Debug, Default)]
pub(super) struct Closes {
    pub(super) answers: BTreeMap<String, Closed>,
    /// The ids known gone (decided when each answered).
    pub(super) gone: BTreeSet<String>,
    pub(super) released: Vec<String>,
}

impl Closes {
    /// Closes the row's sockets not closed yet by this end.
    pub(super) async fn close(&mut self, sockets: &dyn Sockets, row: &Row, now: i64) {
        let todo: Vec<String> = row
            .session
            .connection_ids
            .iter()
            .filter(|c| !self.answers.contains_key(*c))
            .cloned()
            .collect();
        if todo.is_empty() {
            return;
        }
        let by = row.joined_by();
        for (c, answer) in sockets.close_each(&todo).await {
            if known_gone(answer, by, now) {
                self.gone.insert(c.clone());
            } else {
                tracing::info!(connection = %c, ?answer, "not known gone: left counted in its row");
            }
            self.answers.insert(c, answer);
        }
    }

    pub(super) fn gone(&self, c: &str) -> bool {
        self.gone.contains(c)
    }

    pub(super) fn ended(self, session: Session, closing: Vec<String>) -> Ended {
        let mut closed = self.released;
        closed.sort();
        Ended {
            session,
            closed,
            closing,
        }
    }
}

/// The session units a row gives back when it ends: the tenant's and, when a user created it, that
/// user's (decision 3602).
pub(super) fn units(t: &TenantId, session: &Session) -> Result<Vec<((String, bool), u64)>> {
    let mut units = vec![((keys::sessions(t)?, true), 1)];
    if let Some(o) = &session.owner {
        units.push(((keys::subject_sessions(t, o)?, true), 1));
    }
    Ok(units)
}

/// The decrements for `ids`, each on the counter it was charged on: `(counter, floored) → k`.
pub(super) fn plan(
    t: &TenantId,
    ids: &[String],
    charges: &crate::session::Charges,
) -> Result<Vec<((String, bool), u64)>> {
    let mut per: BTreeMap<(String, bool), u64> = BTreeMap::new();
    for c in ids {
        *per.entry(release::target(t, c, charges)?).or_default() += 1;
    }
    Ok(per.into_iter().collect())
}

/// The row's `Update` as a release transaction's lead, its image returned when refused.
pub(super) fn lead_update(
    table: &str,
    t: &TenantId,
    sid: &SessionId,
    p: ConditionalUpdate,
    what: &'static str,
) -> Result<TransactWriteItem> {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(sstore::key(t, sid)))
        .set_condition_expression(p.condition())
        .update_expression(p.update())
        .set_expression_attribute_names(Some(p.names))
        .set_expression_attribute_values((!p.values.is_empty()).then_some(p.values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| Error::build_request(what, e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// Takes `gone` out of the row (their ids and charges), only while it holds exactly the
/// connections of `seen`, so exactly those leave and are released.
pub(super) fn take_out(
    table: &str,
    t: &TenantId,
    sid: &SessionId,
    seen: &Session,
    gone: &[String],
) -> Result<TransactWriteItem> {
    let mut p = ConditionalUpdate::default();
    p.name("#sid", session_attr::SESSION_ID)
        .name("#ids", session_attr::CONNECTION_IDS);
    p.value(":ids", AttributeValue::Ss(seen.connection_ids.clone()))
        .value(":gone", AttributeValue::Ss(gone.to_vec()));
    p.conditions
        .push("attribute_exists(#sid) AND #ids = :ids".into());
    p.delete.push("#ids :gone".into());
    for (i, c) in gone.iter().enumerate() {
        let name = format!("#chg{i}");
        p.name(&name, &crate::session::charge_attr(c));
        p.remove.push(name);
    }
    lead_update(table, t, sid, p, "releasing a session's gone connections")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_410_proves_a_socket_gone_only_a_grace_after_the_last_join() {
        let grace = MIN_GRACE.as_secs() as i64;
        assert!(known_gone(Closed::Closed, 1_000, 1_000));
        assert!(!known_gone(Closed::Gone, 1_000, 1_000 + grace - 1));
        assert!(known_gone(Closed::Gone, 1_000, 1_000 + grace));
        assert!(!known_gone(Closed::Failed, 0, i64::MAX));
        // Every join comes before the TTL: without `joinedAt` the TTL bounds them.
        assert_eq!(joined_by(None, 500), 500);
        assert_eq!(joined_by(Some(400), 500), 400);
        assert_eq!(joined_by(Some(600), 500), 500);
    }
}
