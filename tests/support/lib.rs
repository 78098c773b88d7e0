//! Helpers for tests against DynamoDB Local: each test gets its own uniquely prefixed tables, a
//! manual clock, and a call counter on its client, so tests run in parallel on one DynamoDB Local
//! without seeing each other.

pub mod http;

use shared::catalog;
use shared::clock::{ManualClock, SharedClock};
use shared::dynamo::CallCounter;
use shared::table::{AttributeStyle, TableKind, TableNames};
use shared::Deps;
use std::sync::Arc;

/// The DynamoDB Local endpoint: `TURNSTILE_TEST_DYNAMODB`, else port `DYNAMODB_LOCAL_PORT` (8000).
pub fn endpoint() -> String {
    std::env::var("TURNSTILE_TEST_DYNAMODB").unwrap_or_else(|_| {
        let port = std::env::var("DYNAMODB_LOCAL_PORT").unwrap_or_else(|_| "8000".into());
        format!("http://127.0.0.1:{port}")
    })
}

/// The DynamoDB Local instance reserved for tests that wait for real TTL deletions:
/// `TURNSTILE_TEST_DYNAMODB_TTL`, else port 8001.
///
/// DynamoDB Local's TTL sweep slows down with the number of TTL-enabled tables (measured on 3.3.0:
/// 3 tables → deleted within 0.4 s, 30 tables → not within 90 s), so a suite creating tables in
/// parallel would make TTL tests wait minutes. Those tests get an instance holding only their tables.
pub fn ttl_endpoint() -> String {
    std::env::var("TURNSTILE_TEST_DYNAMODB_TTL").unwrap_or_else(|_| "http://127.0.0.1:8001".into())
}

/// One test's world: its tables, a client that counts calls, and a clock it controls. Its tables
/// are deleted when it is dropped (also when the test fails).
pub struct TestEnv {
    pub deps: Deps,
    pub counter: CallCounter,
    pub clock: ManualClock,
    pub prefix: String,
    pub endpoint: String,
    created: Vec<String>,
}

impl TestEnv {
    /// Creates the given tables under a fresh prefix, with the camelCase attribute style.
    pub async fn new(kinds: &[TableKind]) -> TestEnv {
        Self::with_style(kinds, AttributeStyle::Camel).await
    }

    pub async fn with_style(kinds: &[TableKind], style: AttributeStyle) -> TestEnv {
        Self::build(kinds, style, endpoint()).await
    }

    /// Like [`TestEnv::new`], on the instance reserved for tests that wait for TTL deletions.
    pub async fn for_ttl(kinds: &[TableKind]) -> TestEnv {
        Self::build(kinds, AttributeStyle::Camel, ttl_endpoint()).await
    }

    async fn build(kinds: &[TableKind], style: AttributeStyle, endpoint: String) -> TestEnv {
        let prefix = format!("t{}-", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let counter = CallCounter::new();
        let clock = ManualClock::starting_now();
        let shared_clock: SharedClock = Arc::new(clock.clone());
        let mut deps = Deps::local(
            &endpoint,
            TableNames::with_prefix(&prefix),
            shared_clock,
            Some(&counter),
        );
        deps.style = style;
        let mut created = Vec::new();
        for kind in kinds {
            let def = catalog::definition(*kind, &deps.tables, style);
            if let Err(e) = catalog::ensure(&deps.dynamo, &def).await {
                panic!(
                    "cannot create table {} on DynamoDB Local at {} ({e}). Start it with \
                     `scripts/dynamodb-local.sh start` or run the suite with `make test`.",
                    def.name, endpoint
                );
            }
            created.push(def.name);
        }
        counter.reset();
        TestEnv {
            deps,
            counter,
            clock,
            prefix,
            endpoint,
            created,
        }
    }

    /// Records a table the test created itself, so it is dropped with the others.
    pub fn track_table(&mut self, name: impl Into<String>) {
        self.created.push(name.into());
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let names = std::mem::take(&mut self.created);
        let endpoint = self.endpoint.clone();
        // A fresh client on a thread of its own: the test's runtime may be the current-thread kind,
        // blocked here until the deletes finish.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let client = shared::dynamo::local_client(&endpoint, None);
                for name in names {
                    let _ = client.delete_table().table_name(name).send().await;
                }
            });
        })
        .join();
    }
}
