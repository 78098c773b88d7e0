//! Reading a coordinate's reservations and tokens, and the token remover's work.
//!
//! A listing merges the coordinate's token rows (rate-limiter-py's, and Turnstile's from before bound
//! rows) with the ledger, the only capacity record: a reservation or token without such a row is
//! listed from its ledger entry (its resource is in the resource's partition, listed by
//! [`NonFungibleLimiter::find_by_resource_id`]), and a row whose ledger entry is gone (released, or
//! left behind by a crash between two writes) is listed as not live.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use super::ended::{marker_key, ENDED_ID};
use super::ledger::{is_live, Binding, Ledger, LEDGER_ID};
use super::shard;
use super::view::View;
use super::{NonFungibleLimiter, TokenRow};
use crate::clock::Timestamp;
use crate::dynamo::item::{lenient_int, lenient_opt_int, lenient_opt_str, lenient_str, s, Item};
use crate::dynamo::pages;
use crate::error::{Error, Result};
use crate::interleave::Point;

/// The listing of a coordinate: each row, live only while its ledger entry is (rows without a
/// ledger keep their own `expirationTime`, as rate-limiter-py wrote them), plus one entry per
/// ledger reservation without a row. Sorted by reservation id.
pub(super) fn merge(
    rows: Vec<TokenRow>,
    ledger: &Ledger,
    pair: (&str, &str),
    coordinate: &str,
    now: Timestamp,
) -> Vec<TokenRow> {
    if !ledger.exists {
        return rows;
    }
    let mut out: Vec<TokenRow> = rows
        .into_iter()
        .map(|mut r| {
            r.live = ledger
                .live
                .get(&r.reservation_id)
                .is_some_and(|(e, _)| is_live(*e, now));
            r
        })
        .collect();
    for (id, (exp, _)) in &ledger.live {
        if out.iter().any(|r| &r.reservation_id == id) {
            continue;
        }
        out.push(TokenRow {
            coordinate: coordinate.to_string(),
            reservation_id: id.clone(),
            resource_name: Some(pair.0.to_string()),
            account_id: Some(pair.1.to_string()),
            resource_id: None,
            expiration_time: Some(*exp),
            live: is_live(*exp, now),
        });
    }
    out.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
    out
}

impl NonFungibleLimiter {
    fn parse_row(&self, item: &Item, now: Timestamp) -> Result<TokenRow> {
        let a = self.inner.attrs;
        let t = &self.inner.table;
        let exp = lenient_opt_int(item, t, a.expiration_time)?;
        Ok(TokenRow {
            coordinate: lenient_str(item, t, a.resource_coordinate)?,
            reservation_id: lenient_str(item, t, a.reservation_id)?,
            resource_name: lenient_opt_str(item, t, a.resource_name)?,
            account_id: lenient_opt_str(item, t, a.account_id)?,
            resource_id: lenient_opt_str(item, t, a.resource_id)?,
            expiration_time: exp,
            live: exp.is_some_and(|e| is_live(e, now)),
        })
    }

    /// Runs the Query `build` describes on the table, one call per page, handing each item to
    /// `each` in order; stops at the first error (no further page is read).
    async fn query_pages(
        &self,
        build: impl Fn(QueryFluentBuilder) -> QueryFluentBuilder,
        each: impl FnMut(&Item) -> Result<()>,
    ) -> Result<()> {
        let query = build(self.inner.client.query().table_name(&self.inner.table));
        pages::query(query, each).await
    }

    /// The coordinate's rows (live by their own `expirationTime`) and its ledger shards (a complete
    /// view); with `shards_only`, the sort keys from `~ledger` on only (shards sort after every row,
    /// so no row is read). One strongly consistent Query per page.
    async fn read_partition(
        &self,
        coordinate: &str,
        now: Timestamp,
        shards_only: bool,
    ) -> Result<(Vec<TokenRow>, View)> {
        let a = self.inner.attrs;
        let mut rows = Vec::new();
        let mut view = View {
            complete: true,
            ..View::default()
        };
        self.query_pages(
            |q| {
                let q = q
                    .expression_attribute_names("#pk", a.resource_coordinate)
                    .expression_attribute_values(":pk", s(coordinate))
                    .consistent_read(true);
                if shards_only {
                    q.key_condition_expression("#pk = :pk AND begins_with(#sk, :ledger)")
                        .expression_attribute_names("#sk", a.reservation_id)
                        .expression_attribute_values(":ledger", s(LEDGER_ID))
                } else {
                    q.key_condition_expression("#pk = :pk")
                }
            },
            |item| {
                match self.shard_of(item) {
                    Some(k) => {
                        view.shards
                            .insert(k, Ledger::parse(&self.inner.table, Some(item))?);
                    }
                    None => rows.push(self.parse_row(item, now)?),
                }
                Ok(())
            },
        )
        .await?;
        Ok((rows, view))
    }

    /// The ledger shard an item is, `None` for a token row.
    fn shard_of(&self, item: &Item) -> Option<u32> {
        match item.get(self.inner.attrs.reservation_id) {
            Some(AttributeValue::S(sk)) => shard::of_sort_key(sk),
            _ => None,
        }
    }

    /// Every ledger shard of a coordinate (a complete view). One strongly consistent Query per page.
    pub(super) async fn read_shards(&self, coordinate: &str) -> Result<View> {
        let now = self.inner.clock.now();
        Ok(self.read_partition(coordinate, now, true).await?.1)
    }

    /// The coordinate's rows by their own expiry (to seed a new ledger from rows written without one).
    pub(super) async fn list_rows(
        &self,
        coordinate: &str,
        now: Timestamp,
    ) -> Result<Vec<TokenRow>> {
        Ok(self.read_partition(coordinate, now, false).await?.0)
    }

    /// Every reservation and token of (resource, account), live or not, from its rows and ledger
    /// ([`merge`]). One strongly consistent Query per page.
    pub async fn list(&self, resource: &str, account: &str) -> Result<Vec<TokenRow>> {
        let now = self.inner.clock.now();
        let coordinate = Self::coordinate(resource, account)?;
        let (rows, view) = self.read_partition(&coordinate, now, false).await?;
        Ok(merge(
            rows,
            &view.merged(),
            (resource, account),
            &coordinate,
            now,
        ))
    }

    /// The tokens bound to `resource_id`: its bound rows (one strongly consistent Query of the
    /// resource's partition per page), then rows written before bound rows existed or by
    /// rate-limiter-py (the resource index, eventually consistent). Pages of `page_size` (None:
    /// DynamoDB's default page). A row is listed live by its own expiry: a token deleted by its
    /// client leaves its bound row until TTL removes it ([`Self::list`] shows what holds capacity).
    pub async fn find_by_resource_id(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<TokenRow>> {
        let mut rows: Vec<TokenRow> = (self.bound_rows(resource_id, page_size).await?)
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        rows.extend(self.indexed_rows(resource_id, page_size).await?);
        Ok(rows)
    }

    /// The bound rows in `resource_id`'s partition ([`super::ended`]), without its marker, each
    /// with the binding it records.
    async fn bound_rows(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<(TokenRow, Binding)>> {
        let key = marker_key(resource_id)?;
        let a = self.inner.attrs;
        let t = &self.inner.table;
        let now = self.inner.clock.now();
        let mut out = Vec::new();
        self.query_pages(
            |q| {
                q.key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", a.resource_coordinate)
                    .expression_attribute_values(":pk", s(&key))
                    .consistent_read(true)
                    .set_limit(page_size)
            },
            |item| {
                let id = lenient_str(item, t, a.reservation_id)?;
                if id == ENDED_ID {
                    return Ok(());
                }
                let resource = lenient_str(item, t, a.resource_name)?;
                let account = lenient_str(item, t, a.account_id)?;
                let coordinate =
                    Self::coordinate(&resource, &account).map_err(|e| Error::MalformedItem {
                        table: t.clone(),
                        reason: format!("bound row {id} of {resource_id}: {e}"),
                    })?;
                let exp = lenient_int(item, t, a.expiration_time)?;
                let row = TokenRow {
                    coordinate,
                    reservation_id: id,
                    resource_name: Some(resource),
                    account_id: Some(account),
                    resource_id: Some(resource_id.to_string()),
                    expiration_time: Some(exp),
                    live: is_live(exp, now),
                };
                out.push((row, self.binding_of(item)?));
                Ok(())
            },
        )
        .await?;
        Ok(out)
    }

    /// Rows keyed by their coordinate and bound to `resource_id`, by the resource index.
    async fn indexed_rows(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<TokenRow>> {
        let a = self.inner.attrs;
        let now = self.inner.clock.now();
        let mut out = Vec::new();
        self.query_pages(
            |q| {
                q.index_name(&self.inner.index)
                    .key_condition_expression("#rid = :rid")
                    .expression_attribute_names("#rid", a.resource_id)
                    .expression_attribute_values(":rid", s(resource_id))
                    .set_limit(page_size)
            },
            |item| {
                out.push(self.parse_row(item, now)?);
                Ok(())
            },
        )
        .await?;
        Ok(out)
    }

    /// Removes every token bound to `resource_id` and releases its capacity (the token remover's
    /// work). First records that the resource ended, so a bind not yet at its ledger write releases
    /// itself ([`super::ended`]). Then each bound row's entry is released only while it still holds
    /// that row's binding or none ([`Self::release_binding`]) and the row deleted; rows found by the
    /// resource index are released and deleted as before. Already removed tokens are a no-op.
    /// Calls: 1 PutItem, 2 Queries (+1 per further page), 2 per token.
    pub async fn remove_by_resource_id(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<TokenRow>> {
        self.mark_ended(resource_id).await?;
        self.inner.interleave.at(Point::RemoverAfterMarker).await;
        let bound = self.bound_rows(resource_id, page_size).await?;
        for (row, binding) in &bound {
            self.release_binding(&row.coordinate, &row.reservation_id, *binding)
                .await?;
            self.delete_bound_row(resource_id, &row.reservation_id, *binding)
                .await;
        }
        let mut rows: Vec<TokenRow> = bound.into_iter().map(|(row, _)| row).collect();
        let indexed = self.indexed_rows(resource_id, page_size).await?;
        for row in &indexed {
            self.release(&row.coordinate, &row.reservation_id).await?;
            self.delete_coordinate_row(&row.coordinate, &row.reservation_id)
                .await?;
        }
        rows.extend(indexed);
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::item::n;

    fn row(id: &str, exp: i64, bound: Option<&str>) -> TokenRow {
        TokenRow {
            coordinate: "emr:1".into(),
            reservation_id: id.into(),
            resource_name: Some("emr".into()),
            account_id: Some("1".into()),
            resource_id: bound.map(String::from),
            expiration_time: Some(exp),
            live: is_live(exp, Timestamp::from_secs(100)),
        }
    }

    #[test]
    fn the_ledger_decides_what_is_live_and_lists_unbound_reservations() {
        let now = Timestamp::from_secs(100);
        let ledger = Ledger {
            exists: true,
            live: [("bound", 200), ("unbound", 150), ("stale", 90)]
                .into_iter()
                .map(|(k, e)| (k.to_string(), (e, n(e))))
                .collect(),
        };
        let rows = vec![
            row("bound", 200, Some("j-1")),
            // Released (entry gone) but its row is still there: not live.
            row("orphan", 200, Some("j-2")),
        ];
        let out = merge(rows, &ledger, ("emr", "1"), "emr:1", now);
        let got: Vec<_> = out
            .iter()
            .map(|r| (r.reservation_id.as_str(), r.resource_id.as_deref(), r.live))
            .collect();
        assert_eq!(
            got,
            [
                ("bound", Some("j-1"), true),
                ("orphan", Some("j-2"), false),
                ("stale", None, false),
                ("unbound", None, true)
            ]
        );
        // Without a ledger, rows keep rate-limiter-py's meaning.
        let legacy = merge(
            vec![row("py", 200, None)],
            &Ledger::default(),
            ("emr", "1"),
            "emr:1",
            now,
        );
        assert!(legacy[0].live);
    }
}
