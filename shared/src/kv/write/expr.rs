//! The text of one conditional write: a [`SpendPlan`] as condition and update expressions (the
//! case it bets on, the TTL, the seed 002 state fields), sent as an `UpdateItem` or as one item of
//! a `TransactWriteItems`.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure, Update,
};
use aws_sdk_dynamodb::Client;

use super::{attr, Case, SpendPlan, Target};
use crate::dynamo::item::n;
use crate::gcra;

/// A conditional write as expression parts, for any request builder.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub condition: String,
    pub update: String,
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

/// The words of an expression: placeholders (`#name`, `:value`), attribute paths and keywords.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '#' || c == ':' || c == '_'))
}

/// The one conditional write on `target` with `expr`, returning the old item when the condition
/// fails, on either builder (`UpdateItem`'s and a transaction's `Update` share these setters but
/// no trait).
macro_rules! conditional {
    ($builder:expr, $target:expr, $expr:expr) => {{
        let e: Expr = $expr;
        $builder
            .table_name(&$target.table)
            .set_key(Some($target.key.clone()))
            .condition_expression(e.condition)
            .update_expression(e.update)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }};
}

impl SpendPlan {
    /// The condition and update for `target`.
    pub fn expression(&self, target: &Target) -> Expr {
        let now = self.now.as_nanos();
        let inc = self.inc;
        let mut names: HashMap<String, String> =
            HashMap::from([("#tat".to_string(), target.tat_attr.clone())]);
        let mut values: HashMap<String, AttributeValue> = HashMap::new();
        let mut set: Vec<String> = Vec::new();
        let mut add: Vec<String> = Vec::new();
        let mut remove: Vec<String> = Vec::new();
        values.insert(":now".into(), n(now));
        let condition = match self.case {
            Case::Idle => {
                values.insert(":newTat".into(), n(now.saturating_add(inc)));
                set.push("#tat = :newTat".into());
                "attribute_not_exists(#tat) OR #tat <= :now".to_string()
            }
            Case::Draining => {
                values.insert(":inc".into(), n(inc));
                values.insert(
                    ":lim".into(),
                    n(gcra::admit_limit(&self.rate, self.now, self.cost).as_nanos()),
                );
                set.push("#tat = #tat + :inc".into());
                "#tat > :now AND #tat <= :lim".to_string()
            }
            Case::RefundPartial => {
                values.insert(":inc".into(), n(inc));
                values.insert(":floor".into(), n(now.saturating_add(inc)));
                set.push("#tat = #tat - :inc".into());
                "#tat >= :floor".to_string()
            }
            Case::RefundToFull => {
                values.insert(":floor".into(), n(now.saturating_add(inc)));
                set.push("#tat = :now".into());
                "#tat > :now AND #tat < :floor".to_string()
            }
        };
        let condition = match (self.refund_id, self.is_refund()) {
            (Some(id), true) => {
                names.insert("#rid".into(), attr::REFUND_ID.to_string());
                values.insert(":rid".into(), AttributeValue::N(id.0.to_string()));
                set.push("#rid = :rid".into());
                format!("({condition}) AND (attribute_not_exists(#rid) OR #rid < :rid)")
            }
            _ => condition,
        };
        if let Some(ttl) = &target.ttl_attr {
            // The TAT after this write is at most now + burst offset (the admit limit + inc), so
            // the item outlives the moment the bucket is full again by at least the margin.
            let full_at = now.saturating_add(self.rate.burst_offset_nanos());
            let secs = full_at.div_euclid(1_000_000_000)
                + i64::from(full_at.rem_euclid(1_000_000_000) > 0);
            let margin = i64::try_from(target.ttl_margin.as_secs()).unwrap_or(i64::MAX / 4);
            names.insert("#ttl".into(), ttl.clone());
            values.insert(":ttl".into(), n(secs.saturating_add(margin)));
            set.push("#ttl = :ttl".into());
        }
        if let Some(state) = &self.state {
            let mut name = |placeholder: &str, attr: &str| {
                names.insert(placeholder.to_string(), attr.to_string());
            };
            name("#ver", attr::VERSION);
            name("#ua", attr::UPDATED_AT);
            name("#burst", attr::BURST);
            name("#count", attr::COUNT);
            name("#period", attr::PERIOD_NS);
            values.insert(":one".into(), n(1));
            values.insert(
                ":burst".into(),
                n(i64::try_from(self.rate.burst).unwrap_or(i64::MAX)),
            );
            values.insert(
                ":count".into(),
                n(i64::try_from(self.rate.count).unwrap_or(i64::MAX)),
            );
            values.insert(
                ":period".into(),
                n(crate::clock::duration_nanos(self.rate.period)),
            );
            add.push("#ver :one".into());
            set.push("#ua = :now".into());
            set.push("#burst = :burst".into());
            set.push("#count = :count".into());
            set.push("#period = :period".into());
            if let Some(ln) = &state.limit_name {
                name("#ln", attr::LIMIT_NAME);
                values.insert(":ln".into(), AttributeValue::S(ln.clone()));
                set.push("#ln = :ln".into());
            }
            if !self.is_refund() {
                name("#lr", attr::LAST_REQUEST_AT);
                name("#rc", attr::REQUEST_COUNT);
                set.push("#lr = :now".into());
                let pending = i64::try_from(state.pending_throttles).unwrap_or(i64::MAX);
                let first = state.first_throttle.map(|t| t.as_nanos());
                if self.case == Case::Idle {
                    // A new window: the counters restart. Denials this process still holds were
                    // of the window that has ended (the bucket filled up since), so they are dropped.
                    name("#ws", attr::WINDOW_START);
                    name("#tc", attr::THROTTLE_COUNT);
                    name("#ta", attr::THROTTLED_AT);
                    set.push("#ws = :now".into());
                    set.push("#rc = :one".into());
                    values.insert(":zero".into(), n(0));
                    set.push("#tc = :zero".into());
                    remove.push("#ta".into());
                } else {
                    add.push("#rc :one".into());
                    if let (Some(t), true) = (first, pending > 0) {
                        name("#tc", attr::THROTTLE_COUNT);
                        name("#ta", attr::THROTTLED_AT);
                        values.insert(":pend".into(), n(pending));
                        values.insert(":ft".into(), n(t));
                        add.push("#tc :pend".into());
                        set.push("#ta = if_not_exists(#ta, :ft)".into());
                    }
                }
            }
        }
        let mut update = format!("SET {}", set.join(", "));
        if !add.is_empty() {
            update.push_str(&format!(" ADD {}", add.join(", ")));
        }
        if !remove.is_empty() {
            update.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        // DynamoDB refuses names or values the expressions do not use.
        // The words of both expressions, split once (not once per placeholder).
        let words: std::collections::HashSet<&str> =
            tokens(&condition).chain(tokens(&update)).collect();
        names.retain(|k: &String, _| words.contains(k.as_str()));
        values.retain(|k: &String, _| words.contains(k.as_str()));
        Expr {
            condition,
            update,
            names,
            values,
        }
    }

    /// The write as a single `UpdateItem` (1 call): the old item on a failed condition; on success
    /// the updated attributes only where the new TAT depends on the stored one (draining, partial
    /// refund). An idle spend sets `now + inc` and a refund to full `now`, both known here, so
    /// they ask for nothing back: `UPDATED_NEW` would return every state field written (12 with
    /// seed 002's, ~300 bytes to parse) for a value the caller already has (decision 0806).
    pub fn update_item(&self, client: &Client, target: &Target) -> UpdateItemFluentBuilder {
        let req = conditional!(client.update_item(), target, self.expression(target));
        match self.case {
            Case::Idle | Case::RefundToFull => req,
            Case::Draining | Case::RefundPartial => req.return_values(ReturnValue::UpdatedNew),
        }
    }

    /// The write as one item of a `TransactWriteItems`; a failed condition cancels the transaction
    /// and its `CancellationReason` at this item's index carries the old item.
    pub fn transact_update(&self, target: &Target) -> Result<Update, crate::Error> {
        conditional!(Update::builder(), target, self.expression(target))
            .build()
            .map_err(|err| crate::Error::build_request("a GCRA update", err))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::rate;
    use super::super::StateWrite;
    use super::*;
    use crate::clock::Timestamp;

    const S: i64 = 1_000_000_000;

    /// DynamoDB refuses unused names or values, so every one must appear in the expressions.
    fn all_used(e: &Expr) {
        let text = format!("{} {}", e.condition, e.update);
        let used = |p: &str| tokens(&text).any(|t| t == p);
        for k in e.names.keys().chain(e.values.keys()) {
            assert!(used(k), "{k} unused in {text}");
        }
    }

    #[test]
    fn only_writes_whose_new_tat_depends_on_the_stored_one_ask_for_it_back() {
        let client = crate::dynamo::local_client("http://127.0.0.1:9", None);
        let target = Target::bucket("b", "1:x", Duration::from_secs(60));
        let now = Timestamp::from_nanos(100 * S);
        let idle = SpendPlan::spend(rate(), now, 1, None).unwrap();
        let draining = SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(105))).unwrap();
        assert!(matches!(
            (idle.case, draining.case),
            (Case::Idle, Case::Draining)
        ));
        assert_eq!(
            idle.update_item(&client, &target).get_return_values(),
            &None
        );
        assert_eq!(
            draining.update_item(&client, &target).get_return_values(),
            &Some(ReturnValue::UpdatedNew)
        );
    }

    #[test]
    fn expressions_name_every_attribute_and_bound_the_ttl() {
        let now = Timestamp::from_nanos(100 * S + 1);
        let target = Target::bucket("b", "1:x", Duration::from_secs(60));
        let plan = SpendPlan::spend(rate(), now, 3, Some(Timestamp::from_secs(105)))
            .unwrap()
            .with_state(StateWrite {
                limit_name: Some("L".into()),
                pending_throttles: 2,
                first_throttle: Some(now),
            });
        let e = plan.expression(&target);
        assert_eq!(e.condition, "#tat > :now AND #tat <= :lim");
        assert_eq!(e.values[":lim"], n(100 * S + 1 + 7 * S));
        assert!(
            e.update.starts_with("SET #tat = #tat + :inc, #ttl = :ttl"),
            "{}",
            e.update
        );
        assert!(
            e.update.contains("ADD #ver :one, #rc :one, #tc :pend"),
            "{}",
            e.update
        );
        // full at most at now + 10 s → ceil to 111 s, plus the margin.
        assert_eq!(e.values[":ttl"], n(111 + 60));
        for placeholder in tokens(&e.update) {
            if placeholder.starts_with('#') {
                assert!(e.names.contains_key(placeholder), "{placeholder}");
            }
            if placeholder.starts_with(':') {
                assert!(e.values.contains_key(placeholder), "{placeholder}");
            }
        }
        let plain = SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(105)))
            .unwrap()
            .with_state(StateWrite::default());
        all_used(&plain.expression(&target));
        all_used(&e);
        let idle = SpendPlan::spend(rate(), now, 1, None)
            .unwrap()
            .with_state(StateWrite::default());
        all_used(&idle.expression(&target));
        for case_plan in [
            SpendPlan::refund(rate(), now, 1, None).unwrap(),
            SpendPlan::refund(rate(), now, 5, Some(Timestamp::from_secs(102))).unwrap(),
        ] {
            all_used(
                &case_plan
                    .clone()
                    .with_state(StateWrite::default())
                    .expression(&target),
            );
            all_used(&case_plan.expression(&target));
        }
        let once = SpendPlan::refund(rate(), now, 2, None)
            .unwrap()
            .with_refund_id(super::super::RefundId(77));
        let e = once.expression(&target);
        assert_eq!(
            e.condition,
            "(#tat >= :floor) AND (attribute_not_exists(#rid) OR #rid < :rid)"
        );
        assert!(e.update.contains("#rid = :rid"), "{}", e.update);
        assert_eq!(e.values[":rid"], AttributeValue::N("77".into()));
        all_used(&e);
        let e = idle.expression(&target);
        assert_eq!(e.condition, "attribute_not_exists(#tat) OR #tat <= :now");
        assert!(e.update.ends_with("REMOVE #ta"), "{}", e.update);
    }
}
