//! The text of one conditional write: a [`SpendPlan`] as condition and update expressions (the
//! case it bets on, the TTL, the `RateLimitState` fields), sent as an `UpdateItem` or as one item
//! of a `TransactWriteItems`.

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
#[cfg(test)]
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '#' || c == ':' || c == '_'))
}

/// What DynamoDB checks of an expression's placeholders: every one the text uses is defined, and
/// every one defined is used. `Err` names the first that is not.
#[cfg(test)]
pub(super) fn placeholders_match(e: &Expr) -> Result<(), String> {
    let text = format!("{} {}", e.condition, e.update);
    let used: std::collections::HashSet<&str> = tokens(&text).collect();
    for word in &used {
        let defined = match word.chars().next() {
            Some('#') => e.names.contains_key(*word),
            Some(':') => e.values.contains_key(*word),
            _ => true,
        };
        if !defined {
            return Err(format!("{word} is used but not defined in {text}"));
        }
    }
    match e
        .names
        .keys()
        .chain(e.values.keys())
        .find(|k| !used.contains(k.as_str()))
    {
        Some(k) => Err(format!("{k} is defined but unused in {text}")),
        None => Ok(()),
    }
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

/// An expression under construction: each placeholder is defined where the text that uses it is
/// written, so nothing unused is ever sent (DynamoDB refuses unused names and values) and nothing
/// has to be filtered afterwards. Built on every admission, so it writes into pre-sized buffers
/// rather than joining formatted fragments (decision 0806).
struct ExprBuilder {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    set: String,
    add: String,
    remove: String,
}

impl ExprBuilder {
    fn new() -> Self {
        ExprBuilder {
            names: HashMap::with_capacity(14),
            values: HashMap::with_capacity(12),
            set: String::with_capacity(192),
            add: String::new(),
            remove: String::new(),
        }
    }

    fn name(&mut self, placeholder: &str, attr: &str) {
        self.names.insert(placeholder.to_string(), attr.to_string());
    }

    fn value(&mut self, placeholder: &str, v: AttributeValue) {
        self.values.insert(placeholder.to_string(), v);
    }

    fn clause(list: &mut String, clause: &str) {
        if !list.is_empty() {
            list.push_str(", ");
        }
        list.push_str(clause);
    }

    fn set(&mut self, clause: &str) {
        Self::clause(&mut self.set, clause);
    }

    fn add(&mut self, clause: &str) {
        Self::clause(&mut self.add, clause);
    }

    fn update(&self) -> String {
        let mut update =
            String::with_capacity(4 + self.set.len() + 5 + self.add.len() + 8 + self.remove.len());
        update.push_str("SET ");
        update.push_str(&self.set);
        if !self.add.is_empty() {
            update.push_str(" ADD ");
            update.push_str(&self.add);
        }
        if !self.remove.is_empty() {
            update.push_str(" REMOVE ");
            update.push_str(&self.remove);
        }
        update
    }
}

impl SpendPlan {
    /// The condition and update for `target`.
    pub fn expression(&self, target: &Target) -> Expr {
        let now = self.now.as_nanos();
        let inc = self.inc;
        let mut p = ExprBuilder::new();
        p.name("#tat", &target.tat_attr);
        // `:now` is used by every case's text but a partial refund's, and by every state write.
        let mut uses_now = self.state.is_some();
        let condition = match self.case {
            Case::Idle => {
                p.value(":newTat", n(now.saturating_add(inc)));
                p.set("#tat = :newTat");
                uses_now = true;
                "attribute_not_exists(#tat) OR #tat <= :now"
            }
            Case::Draining => {
                p.value(":inc", n(inc));
                p.value(
                    ":lim",
                    n(gcra::admit_limit(&self.rate, self.now, self.cost).as_nanos()),
                );
                p.set("#tat = #tat + :inc");
                uses_now = true;
                "#tat > :now AND #tat <= :lim"
            }
            Case::RefundPartial => {
                p.value(":inc", n(inc));
                p.value(":floor", n(now.saturating_add(inc)));
                p.set("#tat = #tat - :inc");
                "#tat >= :floor"
            }
            Case::RefundToFull => {
                p.value(":floor", n(now.saturating_add(inc)));
                p.set("#tat = :now");
                uses_now = true;
                "#tat > :now AND #tat < :floor"
            }
        };
        let condition = match (self.refund_id, self.is_refund()) {
            (Some(id), true) => {
                p.name("#rid", attr::REFUND_ID);
                p.value(":rid", AttributeValue::N(id.0.to_string()));
                p.set("#rid = :rid");
                format!("({condition}) AND (attribute_not_exists(#rid) OR #rid < :rid)")
            }
            _ => condition.to_string(),
        };
        if uses_now {
            p.value(":now", n(now));
        }
        // A refund leaves the TTL alone: it only lowers the TAT, so the TTL the last spend set
        // still outlives it, whereas one derived from the refund's rate would fall before a TAT
        // stored under a larger burst (a lowered rate) and expire a drained bucket early.
        if let Some(ttl) = target.ttl_attr.as_ref().filter(|_| !self.is_refund()) {
            // The TAT after a spend is at most now + burst offset (the admit limit + inc), so the
            // item outlives the moment the bucket is full again by at least the margin.
            let full_at = now.saturating_add(self.rate.burst_offset_nanos());
            let secs = full_at.div_euclid(1_000_000_000)
                + i64::from(full_at.rem_euclid(1_000_000_000) > 0);
            let margin = i64::try_from(target.ttl_margin.as_secs()).unwrap_or(i64::MAX / 4);
            p.name("#ttl", ttl);
            p.value(":ttl", n(secs.saturating_add(margin)));
            p.set("#ttl = :ttl");
        }
        if let Some(state) = &self.state {
            self.state_parts(state, &mut p);
        }
        Expr {
            update: p.update(),
            condition,
            names: p.names,
            values: p.values,
        }
    }

    /// The `RateLimitState` fields (decision 0603), written by the same write; `:now` is defined by
    /// the caller. A spend sets `lastRequestAt` and not `updatedAt` (the state view reads the later
    /// of the two): one attribute fewer to write and to get back on the admission path.
    fn state_parts(&self, state: &super::StateWrite, p: &mut ExprBuilder) {
        p.name("#ver", attr::VERSION);
        p.value(":one", n(1));
        p.add("#ver :one");
        if self.writes_stamp() {
            p.name("#burst", attr::BURST);
            p.name("#count", attr::COUNT);
            p.name("#period", attr::PERIOD_NS);
            p.value(
                ":burst",
                n(i64::try_from(self.rate.burst).unwrap_or(i64::MAX)),
            );
            p.value(
                ":count",
                n(i64::try_from(self.rate.count).unwrap_or(i64::MAX)),
            );
            p.value(":period", n(crate::clock::duration_nanos(self.rate.period)));
            p.set("#burst = :burst, #count = :count, #period = :period");
            if let Some(ln) = &state.limit_name {
                p.name("#ln", attr::LIMIT_NAME);
                p.value(":ln", AttributeValue::S(ln.clone()));
                p.set("#ln = :ln");
            }
        }
        if self.is_refund() {
            p.name("#ua", attr::UPDATED_AT);
            p.set("#ua = :now");
            return;
        }
        p.name("#lr", attr::LAST_REQUEST_AT);
        p.name("#rc", attr::REQUEST_COUNT);
        p.set("#lr = :now");
        if self.case == Case::Idle {
            // A new window: the counters restart. Denials this process still holds were of the
            // window that has ended (the bucket filled up since), so they are dropped.
            p.name("#ws", attr::WINDOW_START);
            p.name("#tc", attr::THROTTLE_COUNT);
            p.name("#ta", attr::THROTTLED_AT);
            p.value(":zero", n(0));
            p.set("#ws = :now, #rc = :one, #tc = :zero");
            p.remove.push_str("#ta");
            return;
        }
        p.add("#rc :one");
        let pending = i64::try_from(state.pending_throttles).unwrap_or(i64::MAX);
        if let (Some(first), true) = (state.first_throttle, pending > 0) {
            p.name("#tc", attr::THROTTLE_COUNT);
            p.name("#ta", attr::THROTTLED_AT);
            p.value(":pend", n(pending));
            p.value(":ft", n(first.as_nanos()));
            p.add("#tc :pend");
            p.set("#ta = if_not_exists(#ta, :ft)");
        }
    }

    /// The write as a single `UpdateItem` (1 call): the old item on a failed condition; on success
    /// the updated attributes only where the new TAT depends on the stored one (draining, partial
    /// refund). An idle spend sets `now + inc` and a refund to full `now`, both known here, so
    /// they ask for nothing back: `UPDATED_NEW` would return every state field written (up to 12
    /// with `RateLimitState`'s) for a value the caller already has (decision 0806). A hot bucket's
    /// draining spend names 5 (`StateWrite::stamp_known`, decision 0603 "The rate stamp").
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

    use super::super::plan::tests::rate;
    use super::super::StateWrite;
    use super::*;
    use crate::clock::Timestamp;

    const S: i64 = 1_000_000_000;

    /// DynamoDB refuses unused names or values, and undefined ones.
    fn all_used(e: &Expr) {
        if let Err(why) = placeholders_match(e) {
            panic!("{why}");
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
                stamp_known: false,
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
        // A refund leaves the TTL as the last spend set it: it only lowers the TAT.
        assert!(!written(&once.expression(&target)).contains(&"expiresAt".to_string()));
        let e = idle.expression(&target);
        assert_eq!(e.condition, "attribute_not_exists(#tat) OR #tat <= :now");
        assert!(e.update.ends_with("REMOVE #ta"), "{}", e.update);
    }

    /// The attributes an update sets, adds or removes, by name.
    fn written(e: &Expr) -> Vec<String> {
        let mut out: Vec<String> = tokens(&e.update)
            .filter(|w| w.starts_with('#'))
            .filter_map(|w| e.names.get(w).cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn a_stamp_the_item_is_known_to_carry_is_left_out_unless_the_write_may_create_the_item() {
        let now = Timestamp::from_nanos(100 * S);
        let target = Target::bucket("b", "1:x", Duration::from_secs(60));
        let state = |stamp_known| StateWrite {
            limit_name: Some("L".into()),
            stamp_known,
            ..StateWrite::default()
        };
        let draining = SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(105))).unwrap();
        let hot = draining.clone().with_state(state(true));
        assert!(!hot.writes_stamp() && hot.stamp().is_none());
        assert_eq!(
            written(&hot.expression(&target)),
            [
                "expiresAt",
                "lastRequestAt",
                "requestCount",
                "tat",
                "version"
            ]
        );
        let first = draining.with_state(state(false));
        let stamp = first.stamp().expect("an unknown stamp is written");
        assert!(stamp.matches(&rate(), Some("L")));
        let e = first.expression(&target);
        for a in [attr::BURST, attr::COUNT, attr::PERIOD_NS, attr::LIMIT_NAME] {
            assert!(written(&e).iter().any(|w| w == a), "{a} in {}", e.update);
        }
        // An idle spend may create the item (or recreate it after its TTL): always stamped.
        let idle = SpendPlan::spend(rate(), now, 1, None)
            .unwrap()
            .with_state(state(true));
        assert!(idle.writes_stamp());
        assert!(written(&idle.expression(&target)).contains(&attr::BURST.to_string()));
        // A spend sets lastRequestAt, not updatedAt; a refund sets updatedAt.
        assert!(!written(&hot.expression(&target)).contains(&attr::UPDATED_AT.to_string()));
        let refund = SpendPlan::refund(rate(), now, 1, Some(Timestamp::from_secs(105)))
            .unwrap()
            .with_state(state(true));
        assert!(written(&refund.expression(&target)).contains(&attr::UPDATED_AT.to_string()));
        // A failed condition teaches the retry what the item carries.
        let mut retry = first_plan_for_learning();
        retry.learn_stamp(Some(&stamp));
        assert!(!retry.writes_stamp());
        retry.learn_stamp(None);
        assert!(retry.writes_stamp());
    }

    fn first_plan_for_learning() -> SpendPlan {
        SpendPlan::spend(
            rate(),
            Timestamp::from_secs(100),
            1,
            Some(Timestamp::from_secs(105)),
        )
        .unwrap()
        .with_state(StateWrite {
            limit_name: Some("L".into()),
            ..StateWrite::default()
        })
    }
}
