//! Property tests (docs/testing.md): the stored item a failed condition returns is outside input.

use super::plan::*;
use crate::clock::Timestamp;
use crate::gcra::{self, Rate};
use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

fn instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MAX),
        Just(i64::MIN),
        1_700_000_000_000_000_000i64..1_900_000_000_000_000_000,
    ]
}

fn tat_text() -> impl Strategy<Value = String> {
    prop_oneof![
        instant().prop_map(|n| n.to_string()),
        any::<i128>().prop_map(|n| n.to_string()),
        crate::fuzz::text(),
        Just("1e400".to_string()),
    ]
}

proptest! {
    #![proptest_config(crate::fuzz::config(1))]

    /// `fuzz_spend_plans`: for any valid rate, instant, cost, hint and stored item, building
    /// the expression, deciding from a failed condition and deciding an admitted write never
    /// panic; a refusal decided from the old item is exactly `gcra::spend` on it.
    #[test]
    fn fuzz_spend_plans(
        burst in 1u64..=100_000,
        count in 1u64..=100_000,
        period_s in 1u64..=86_400 * 365,
        now in instant(),
        hint in proptest::option::of(instant()),
        cost_pick in any::<prop::sample::Index>(),
        refund in any::<bool>(),
        old in proptest::option::of(tat_text()),
        margin in any::<u64>(),
        named in any::<bool>(),
        pending in 0u64..3,
        refund_id in proptest::option::of(any::<i128>()),
        stamp_known in any::<bool>(),
    ) {
        let Ok(rate) = Rate::new(burst, count, Duration::from_secs(period_s)) else {
            return Ok(());
        };
        let cost = 1 + cost_pick.index(burst as usize) as u64;
        let (now, hint) = (Timestamp::from_nanos(now), hint.map(Timestamp::from_nanos));
        let plan = if refund {
            SpendPlan::refund(rate, now, cost, hint)
        } else {
            SpendPlan::spend(rate, now, cost, hint)
        }
        .unwrap()
        .with_state(StateWrite {
            limit_name: named.then(|| "L".into()),
            pending_throttles: pending,
            first_throttle: Some(now),
            stamp_known,
        });
        let plan = match refund_id {
            Some(id) => plan.with_refund_id(RefundId(id)),
            None => plan,
        };
        let target = Target::bucket("t", "1:x", Duration::from_secs(margin));
        let e = plan.expression(&target);
        prop_assert!(!e.condition.is_empty() && e.update.starts_with("SET "));
        prop_assert_eq!(super::expr::placeholders_match(&e), Ok(()));
        let bare = SpendPlan { state: None, ..plan.clone() };
        let bare = bare.expression(&Target { ttl_attr: None, ..target.clone() });
        prop_assert_eq!(super::expr::placeholders_match(&bare), Ok(()));
        let item = old.map(|v| HashMap::from([(attr::TAT.to_string(), AttributeValue::N(v))]));
        let stored = stored_tat(item.as_ref(), attr::TAT);
        match plan.on_condition_failed(item.as_ref(), attr::TAT) {
            Next::Refused(d) if !refund => {
                prop_assert_eq!(Ok(d), gcra::spend(&rate, stored, now, cost));
            }
            Next::Refused(d) => prop_assert!(!d.allowed),
            Next::Retry(p) => {
                let _ = p.expression(&target);
            }
        }
        let d = plan.admitted(stored, hint);
        prop_assert!(d.remaining <= burst);
    }
}
