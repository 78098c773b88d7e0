//! Helpers for tests against DynamoDB Local: each test gets its own uniquely prefixed tables, a
//! manual clock, and a call counter on its client, so tests run in parallel on one DynamoDB Local
//! without seeing each other.

use shared::clock::{ManualClock, SharedClock};
use shared::dynamo::CallCounter;
use shared::table::{self, AttributeStyle, TableKind, TableNames};
use shared::Deps;
use std::sync::Arc;

/// The DynamoDB Local endpoint: `TURNSTILE_TEST_DYNAMODB`, else port `DYNAMODB_LOCAL_PORT` (8000).
pub fn endpoint() -> String {
    std::env::var("TURNSTILE_TEST_DYNAMODB").unwrap_or_else(|_| {
        let port = std::env::var("DYNAMODB_LOCAL_PORT").unwrap_or_else(|_| "8000".into());
        format!("http://127.0.0.1:{port}")
    })
}

/// One test's world: its tables, a client that counts calls, and a clock it controls.
pub struct TestEnv {
    pub deps: Deps,
    pub counter: CallCounter,
    pub clock: ManualClock,
    pub prefix: String,
}

impl TestEnv {
    /// Creates the given tables under a fresh prefix, with the camelCase attribute style.
    pub async fn new(kinds: &[TableKind]) -> TestEnv {
        Self::with_style(kinds, AttributeStyle::Camel).await
    }

    pub async fn with_style(kinds: &[TableKind], style: AttributeStyle) -> TestEnv {
        let prefix = format!("t{}-", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let counter = CallCounter::new();
        let clock = ManualClock::starting_now();
        let shared_clock: SharedClock = Arc::new(clock.clone());
        let mut deps = Deps::local(
            &endpoint(),
            TableNames::with_prefix(&prefix),
            shared_clock,
            Some(&counter),
        );
        deps.style = style;
        for kind in kinds {
            let def = table::definition(*kind, &deps.tables, style);
            if let Err(e) = table::ensure(&deps.dynamo, &def).await {
                panic!(
                    "cannot create table {} on DynamoDB Local at {} ({e}). Start it with \
                     `scripts/dynamodb-local.sh start` or run the suite with `make test`.",
                    def.name,
                    endpoint()
                );
            }
        }
        counter.reset();
        TestEnv {
            deps,
            counter,
            clock,
            prefix,
        }
    }
}
