//! Property tests (docs/testing.md): a stored bucket item is outside input.

use super::*;
use proptest::prelude::*;

fn number() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        any::<i64>().prop_map(|n| AttributeValue::N(n.to_string())),
        any::<u64>().prop_map(|n| AttributeValue::N(n.to_string())),
        any::<i128>().prop_map(|n| AttributeValue::N(n.to_string())),
        crate::fuzz::text().prop_map(AttributeValue::N),
        crate::fuzz::text().prop_map(AttributeValue::S),
    ]
}

proptest! {
    #![proptest_config(crate::fuzz::config(1))]

    /// `fuzz_gcra_state_view`: any stored item (any attribute any value) with any instant
    /// gives a state view or a typed error, never a panic, and never more tokens than the burst.
    #[test]
    fn fuzz_gcra_state_view(
        attrs in proptest::collection::vec(
            (proptest::sample::select(&[
                attr::TAT, attr::BURST, attr::COUNT, attr::PERIOD_NS, attr::WINDOW_START,
                attr::REQUEST_COUNT, attr::LAST_REQUEST_AT, attr::THROTTLED_AT,
                attr::THROTTLE_COUNT, attr::VERSION, attr::UPDATED_AT, attr::LIMIT_NAME,
            ]), number()),
            0..12,
        ),
        now in any::<i64>(),
        fallback in proptest::option::of((1u64..1000, 1u64..1000, 1u64..100_000)),
    ) {
        let item: HashMap<String, AttributeValue> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let rate = fallback.and_then(|(b, c, p)| Rate::new(b, c, Duration::from_secs(p)).ok());
        let now = Timestamp::from_nanos(now);
        if let Ok(s) = RateLimitState::from_gcra_item("1:x", "L", "x", Some(&item), rate, now) {
            prop_assert!(s.tokens_available <= s.token_capacity);
            serde_json::to_string(&s).unwrap();
        }
    }
}
