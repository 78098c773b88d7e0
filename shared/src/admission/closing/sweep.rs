//! The TTL sweeper's part: DynamoDB deleted the row already, so its stream record is all that
//! holds its connections. They are closed first, and released with the session's unit (and its
//! owner's: decision 3602) only once
//! every one is known gone, in the one transaction of the record (`release::swept`: exactly once
//! per record however often it comes). Otherwise nothing is released and the record is reported
//! for redelivery, which closes again and decides again; a record given up on leaves its units
//! counted (the safe side) for the reconciler.

use super::{known_gone, Closed, Sockets};
use crate::admission::release::{self, Expired, Swept};
use crate::error::Result;
use crate::interleave::Point;
use crate::Deps;

/// What one TTL record says DynamoDB deleted, or why its image is unusable.
pub fn expired_of(r: &aws_lambda_events::dynamodb::EventRecord) -> Result<Expired, String> {
    use crate::session::stream;
    let (tenant, session, connection_ids) = stream::expired_session(r)?;
    let (joined_at, ttl) = stream::joined_at_and_ttl(r);
    Ok(Expired {
        tenant,
        session,
        event_id: stream::record_id(r),
        deleted_at: stream::deleted_at(r),
        connection_ids,
        charges: stream::charges(r),
        // DynamoDB deletes only rows whose TTL passed: the deletion time bounds them otherwise.
        joined_by: super::joined_by(joined_at, ttl.unwrap_or(stream::deleted_at(r).as_secs())),
        owner: stream::owner(r),
    })
}

/// What [`sweep`] did with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sweep {
    /// Every socket is known gone; the release as `release::swept` reports it.
    Released(Swept),
    /// These sockets are not known gone: nothing released, the record must come again.
    Closing(Vec<String>),
}

/// Closes the record's sockets (1 DeleteConnection each), then releases them if all are known
/// gone (1 TransactWriteItems; none when there is nothing to give back).
pub async fn sweep(deps: &Deps, e: &Expired, sockets: &dyn Sockets) -> Result<Sweep> {
    let answers = sockets.close_each(&e.connection_ids).await;
    sockets.interleave().at(Point::SweepAfterClose).await;
    let now = super::delete::proof_clock(deps);
    let closing: Vec<String> = answers
        .into_iter()
        .filter(|(_, a)| !known_gone(*a, e.joined_by, now))
        .map(|(c, a)| {
            if a == Closed::Failed {
                tracing::warn!(connection = %c, "closing an expired session's socket failed");
            }
            c
        })
        .collect();
    if !closing.is_empty() {
        return Ok(Sweep::Closing(closing));
    }
    release::swept(deps, e).await.map(Sweep::Released)
}
