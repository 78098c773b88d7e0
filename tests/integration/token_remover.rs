//! The token remover: processor configuration (validated, errors naming the field), and the
//! handler against DynamoDB Local with the sample events in `events/token-remover/`.

use std::path::PathBuf;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde_json::{json, Value};
use shared::config::Vars;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use shared::interleave::{Interleave, Point};
use shared::reservation::{NonFungibleLimiter, ReservationError, TokenRow};
use shared::table::TableKind;
use token_remover::{handle, Config, Outcome, Predicate, Processors, Remover, Test};
use turnstile_tests::TestEnv;

const EMR: &str = r#"
processors:
  - source: aws.emr
    detail_type: EMR Cluster State Change
    resource_id: detail.clusterId
    when:
      all:
        - path: detail.state
          in: [TERMINATED, TERMINATED_WITH_ERRORS]
        - path: detail.name
          not_contains: debugging
"#;

#[test]
fn yaml_and_json_configs_parse_to_the_same_processors() {
    let yaml = Processors::parse(EMR).unwrap();
    let json = Processors::parse(
        r#"[{"source":"aws.emr","detail_type":"EMR Cluster State Change",
                "resource_id":"detail.clusterId",
                "when":{"all":[{"path":"detail.state","in":["TERMINATED","TERMINATED_WITH_ERRORS"]},
                               {"path":"detail.name","not_contains":"debugging"}]}}]"#,
    )
    .unwrap();
    assert_eq!(yaml, json);
}

#[test]
fn predicates_combine_with_and_or_not() {
    let p = Processors::parse(EMR).unwrap();
    let when = p.0[0].when.as_ref().unwrap();
    let ev = |state: &str, name: &str| json!({"detail": {"state": state, "name": name}});
    assert!(when.eval(&ev("TERMINATED", "prod")));
    assert!(when.eval(&ev("TERMINATED_WITH_ERRORS", "prod")));
    assert!(!when.eval(&ev("RUNNING", "prod")));
    assert!(!when.eval(&ev("TERMINATED", "debugging-1")));
    let any = Predicate::Any(vec![
        Predicate::Leaf {
            path: "a".into(),
            test: Test::Equals(json!(1)),
        },
        Predicate::Not(Box::new(Predicate::Leaf {
            path: "b".into(),
            test: Test::Exists(true),
        })),
    ]);
    assert!(any.eval(&json!({"a": 1, "b": 2})));
    assert!(any.eval(&json!({"a": 2})));
    assert!(!any.eval(&json!({"a": 2, "b": 0})));
    let tags = Predicate::Leaf {
        path: "resources".into(),
        test: Test::Contains(json!("x")),
    };
    assert!(tags.eval(&json!({"resources": ["x", "y"]})));
}

#[test]
fn selection_prefers_the_detail_type_then_the_source() {
    let p = Processors::parse(
            r#"[{"source":"aws.emr","resource_id":"detail.any"},
                {"source":"aws.emr","detail_type":"EMR Cluster State Change","resource_id":"detail.clusterId"}]"#,
        )
        .unwrap();
    assert_eq!(p.select("aws.emr", "emr cluster statechange").unwrap().0, 1);
    assert_eq!(p.select("aws.emr", "EMR Step Status Change").unwrap().0, 0);
    assert!(p.select("aws.ec2", "EMR Cluster State Change").is_none());
}

#[test]
fn errors_name_the_bad_field() {
    let err = |t: &str| Processors::parse(t).unwrap_err();
    assert_eq!(err("[]"), "processors: at least one processor is required");
    assert!(err(r#"[{"resource_id":"detail.x"}]"#).starts_with("processors[0].source: required"));
    assert!(err(r#"[{"source":"s","resource_id":"detail..x"}]"#)
        .starts_with("processors[0].resource_id: \"detail..x\" is not a dotted path"));
    assert!(err(r#"[{"source":"s","resource_id":"x","sauce":1}]"#)
        .starts_with("processors[0].sauce: unknown field"));
    assert!(err(r#"[{"source":"s","resource_id":"x","when":{"all":[{"path":"a","equals":"b"},{"path":"a","equal":"b"}]}}]"#)
            .starts_with("processors[0].when.all[1].equal: unknown test"));
    assert!(
        err(r#"[{"source":"s","resource_id":"x","when":{"path":"a","in":[]}}]"#)
            .starts_with("processors[0].when.in: expected a non-empty list")
    );
    assert!(
        err(r#"[{"source":"s","resource_id":"x","when":{"any":[{"equals":"b"}]}}]"#)
            .starts_with("processors[0].when.any[0].path: required")
    );
    assert!(
        err("processors: [ {source: s, resource_id: x, when: {path: a}} ]")
            .starts_with("processors[0].when: expected exactly one test")
    );
    assert!(err("{\"procesors\": []}").starts_with("unknown top-level key"));
}

fn event(name: &str) -> EventBridgeEvent<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../events/token-remover")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("sample event");
    serde_json::from_str(&text).expect("a valid EventBridge event")
}

fn example_config() -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../functions/token-remover/processors.example.yaml");
    Config::from_vars(&Vars::from_pairs([(
        "TOKEN_REMOVER_PROCESSORS_FILE",
        path.to_string_lossy().to_string(),
    )]))
    .expect("the example config is valid")
}

#[test]
fn config_comes_from_exactly_one_variable_and_errors_name_it() {
    let err = Config::from_vars(&Vars::from_pairs::<&str, &str>([])).unwrap_err();
    assert!(
        err.to_string()
            .contains("TOKEN_REMOVER_PROCESSORS is required"),
        "{err}"
    );
    let err = Config::from_vars(&Vars::from_pairs([(
        "TOKEN_REMOVER_PROCESSORS",
        r#"[{"source":"aws.emr","resource_id":"detail.clusterId","when":{"path":"detail.state","is":"X"}}]"#,
    )]))
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("TOKEN_REMOVER_PROCESSORS="), "{msg}");
    assert!(msg.contains("processors[0].when.is: unknown test"), "{msg}");
    let err = Config::from_vars(&Vars::from_pairs([(
        "TOKEN_REMOVER_PROCESSORS_FILE",
        "/no/such/file.yaml",
    )]))
    .unwrap_err();
    assert!(err.to_string().contains("cannot read the file"), "{err}");
    assert_eq!(example_config().processors.0.len(), 1);
}

async fn setup() -> (TestEnv, Remover, NonFungibleLimiter) {
    let env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let remover = Remover::new(&env.deps, example_config());
    let limiter = NonFungibleLimiter::from_deps(&env.deps).unwrap();
    (env, remover, limiter)
}

#[tokio::test]
async fn terminated_clusters_lose_their_tokens_and_release_capacity() {
    let (env, remover, l) = setup().await;
    let a = l.get_reservation("emr", "acct", 2).await.unwrap();
    a.create_token("j-1YONHTCP3YZKC").await.unwrap();
    let b = l.get_reservation("emr", "acct", 2).await.unwrap();
    b.create_token("j-3GRZ8AC8Q6X4E").await.unwrap();
    assert!(l.get_reservation("emr", "acct", 2).await.is_err(), "full");

    // Running: nothing is removed (and nothing is called).
    env.counter.reset();
    let out = handle(&remover, event("emr-running.json")).await.unwrap();
    assert_eq!(out, Outcome::Skipped { processor: 0 });
    assert_eq!(env.counter.total(), 0);

    // Terminated: the token goes and its capacity is free again.
    env.counter.reset();
    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    match &out {
        Outcome::Removed {
            resource_id,
            tokens,
            ..
        } => {
            assert_eq!(resource_id, "j-1YONHTCP3YZKC");
            assert_eq!(tokens.len(), 1);
            assert_eq!(tokens[0].reservation_id, a.id);
        }
        other => panic!("expected Removed, got {other:?}"),
    }
    assert_eq!(
        env.counter.by_operation(),
        [
            ("DeleteItem".to_string(), 1),
            ("PutItem".to_string(), 1),
            ("Query".to_string(), 2),
            ("UpdateItem".to_string(), 1)
        ]
        .into(),
        "the ended marker, the resource's partition (its bound row), the token's ledger entry and \
         row, then the resource index (rows written before bound rows)"
    );
    let c = l
        .get_reservation("emr", "acct", 2)
        .await
        .expect("capacity released");

    // Terminated with errors: removed too.
    let out = handle(&remover, event("emr-terminated-with-errors.json"))
        .await
        .unwrap();
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.len() == 1),
        "{out:?}"
    );

    // The same event again: a no-op.
    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.is_empty()),
        "{out:?}"
    );
    let rows = l.list("emr", "acct").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].reservation_id, c.id);
}

#[tokio::test]
async fn unrelated_and_debugging_events_are_acknowledged_without_removal() {
    let (env, remover, l) = setup().await;
    let r = l.get_reservation("emr", "acct", 5).await.unwrap();
    r.create_token("j-1YONHTCP3YZKC").await.unwrap();
    env.counter.reset();
    let out = handle(&remover, event("unrelated-source.json"))
        .await
        .unwrap();
    assert_eq!(
        out,
        Outcome::Unmatched {
            source: "aws.ec2".into(),
            detail_type: "EC2 Instance State-change Notification".into()
        }
    );
    let mut debugging = event("emr-terminated.json");
    debugging.detail["name"] = json!("debugging cluster");
    assert_eq!(
        handle(&remover, debugging).await.unwrap(),
        Outcome::Skipped { processor: 0 }
    );
    let mut no_id = event("emr-terminated.json");
    no_id.detail.as_object_mut().unwrap().remove("clusterId");
    assert!(matches!(
        handle(&remover, no_id).await.unwrap(),
        Outcome::NoResourceId { .. }
    ));
    assert_eq!(env.counter.total(), 0);
    assert_eq!(l.list("emr", "acct").await.unwrap().len(), 1, "still there");
}

#[tokio::test]
async fn many_tokens_of_one_resource_are_found_across_pages() {
    let (_env, mut remover, l) = setup().await;
    for account in ["a", "b", "c", "d"] {
        let r = l.get_reservation("emr", account, 1).await.unwrap();
        r.create_token("j-1YONHTCP3YZKC").await.unwrap();
    }
    remover.page_size = Some(1);
    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.len() == 4),
        "{out:?}"
    );
    for account in ["a", "b", "c", "d"] {
        assert!(l.get_reservation("emr", account, 1).await.is_ok());
    }
}

/// The cluster `emr-terminated.json` names.
const CLUSTER: &str = "j-1YONHTCP3YZKC";

/// Runs `work` once, the first time an operation reaches `point`.
fn once_at(point: Point, work: BoxFuture<'static, ()>) -> Interleave {
    let work = Arc::new(Mutex::new(Some(work)));
    Interleave::with(move |p| {
        let run = if p == point {
            work.lock().unwrap().take()
        } else {
            None
        };
        async move {
            if let Some(w) = run {
                w.await;
            }
        }
        .boxed()
    })
}

/// The coordinate's live reservations and tokens, and every row the table holds for it.
async fn held(l: &NonFungibleLimiter) -> Vec<TokenRow> {
    l.list("emr", "acct")
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.live)
        .collect()
}

/// Found by the random fault schedules (soak seeds 1078 and 1086, decision 0101): the event was
/// handled and acknowledged, then a bind of that resource was stopped (a Lambda timeout under
/// throttling) after extending its ledger entry and before giving it back — an 8-hour unit with no
/// event left to release it. The bind now reads the marker before extending, so a bind stopped
/// right after that read leaves only the reservation, which expires with its TTL.
#[tokio::test]
async fn a_bind_stopped_after_reading_the_marker_holds_nothing_past_the_reservation() {
    let (env, remover, _) = setup().await;
    handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    let stopped = NonFungibleLimiter::from_deps(&env.deps)
        .unwrap()
        .with_interleave(once_at(
            Point::BindAfterMarkerRead,
            futures::future::pending::<()>().boxed(),
        ));
    let r = stopped.get_reservation("emr", "acct", 1).await.unwrap();
    let bind = tokio::time::timeout(Duration::from_secs(2), r.create_token(CLUSTER)).await;
    assert!(bind.is_err(), "the bind was stopped at the point: {bind:?}");
    env.clock.advance(Duration::from_secs(301));
    let l = NonFungibleLimiter::from_deps(&env.deps).unwrap();
    assert!(
        held(&l).await.is_empty(),
        "nothing held after the reservation's TTL"
    );
    l.get_reservation("emr", "acct", 1)
        .await
        .expect("the unit is free again after the reservation's TTL");
}

/// The cluster's TERMINATED event is handled before the bind (the caller was slow,
/// or the index had not caught up). The remover found no token, and the bind then held a unit
/// for the token's 8 hours with no event left to release it. Now the remover records the end first
/// and the bind, reading it, releases its reservation: the capacity is free at once.
#[tokio::test]
async fn an_event_before_the_bind_leaves_the_capacity_free() {
    let (env, remover, l) = setup().await;
    let r = l.get_reservation("emr", "acct", 1).await.unwrap();
    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.is_empty()),
        "nothing bound yet: {out:?}"
    );
    env.counter.reset();
    let err = r.create_token(CLUSTER).await.unwrap_err();
    assert!(
        matches!(err, ReservationError::ResourceEnded { ref resource_id, .. } if resource_id == CLUSTER),
        "{err}"
    );
    let calls = env.counter.by_operation();
    assert_eq!(
        calls,
        [
            ("DeleteItem".to_string(), 1),
            ("GetItem".to_string(), 1),
            ("UpdateItem".to_string(), 2)
        ]
        .into(),
        "the row and the marker read (the entry is not extended); then the release: entry and row"
    );
    assert!(held(&l).await.is_empty(), "no unit held, no row left");
    l.get_reservation("emr", "acct", 1)
        .await
        .expect("the unit is free again");

    // Another cluster binds as always; the marker concerns its own cluster only.
    let other = l.get_reservation("emr", "other", 1).await.unwrap();
    other.create_token("j-OTHER").await.unwrap();

    // The marker lasts one token lifetime; a bind after that is a new story.
    env.clock.advance(Duration::from_secs(8 * 3600 + 1));
    let late = l.get_reservation("emr", "late", 1).await.unwrap();
    late.create_token(CLUSTER)
        .await
        .expect("the marker expired");
}

/// The remover's whole run forced between a bind's row write and its ledger write (the row is in
/// the index, the entry still a reservation): the remover releases the entry and the bind, finding
/// it gone, deletes its row. Nothing is held, nothing is left, whichever error the bind answers.
#[tokio::test]
async fn the_remover_between_a_binds_two_writes_leaves_neither_capacity_nor_row() {
    let (env, remover, _) = setup().await;
    let r_remover = remover.clone();
    let l = NonFungibleLimiter::from_deps(&env.deps)
        .unwrap()
        .with_interleave(once_at(
            Point::BindAfterRow,
            async move {
                let out = handle(&r_remover, event("emr-terminated.json"))
                    .await
                    .unwrap();
                assert!(
                    matches!(out, Outcome::Removed { ref tokens, .. } if tokens.len() == 1),
                    "the row was in the index: {out:?}"
                );
            }
            .boxed(),
        ));
    let r = l.get_reservation("emr", "acct", 1).await.unwrap();
    let err = r.create_token(CLUSTER).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReservationError::Gone { .. } | ReservationError::ResourceEnded { .. }
        ),
        "{err}"
    );
    assert!(held(&l).await.is_empty(), "no unit held, no row left");
    assert!(l.get_reservation("emr", "acct", 1).await.is_ok());
}

/// A bind made entirely between the remover's marker and its index query (the event and the bind
/// at once): the bind reads the marker and gives the unit back, and the query finds nothing left.
#[tokio::test]
async fn a_bind_between_the_marker_and_the_query_releases_itself() {
    let (env, _, l) = setup().await;
    let r = l.get_reservation("emr", "acct", 1).await.unwrap();
    let answer = Arc::new(Mutex::new(None));
    let seen = answer.clone();
    let remover = Remover {
        limiter: NonFungibleLimiter::from_deps(&env.deps)
            .unwrap()
            .with_interleave(once_at(
                Point::RemoverAfterMarker,
                async move {
                    *seen.lock().unwrap() = Some(r.create_token(CLUSTER).await);
                }
                .boxed(),
            )),
        ..Remover::new(&env.deps, example_config())
    };
    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    let bound = answer.lock().unwrap().take().expect("the bind ran");
    assert!(
        matches!(bound, Err(ReservationError::ResourceEnded { .. })),
        "{bound:?}"
    );
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.is_empty()),
        "{out:?}"
    );
    assert!(held(&l).await.is_empty());
    assert!(l.get_reservation("emr", "acct", 1).await.is_ok());
}

/// Bound rows (decision 0101): a bind stopped after its row write (a crash) leaves that
/// row in the first resource's partition, and the reservation is then bound to another resource.
/// No per-reservation row says which binding is current, so the remover releases an entry only
/// while it holds the expiry its row records (or is still unbound): the first resource's end finds
/// the stale row, deletes it and leaves the unit the second binding holds; the second's end
/// releases it.
#[tokio::test]
async fn a_row_left_by_a_stopped_bind_never_releases_a_later_binding() {
    let (env, remover, l) = setup().await;
    let stopping = NonFungibleLimiter::from_deps(&env.deps)
        .unwrap()
        .with_interleave(once_at(
            Point::BindAfterRow,
            futures::future::pending::<()>().boxed(),
        ));
    let r = stopping.get_reservation("emr", "acct", 1).await.unwrap();
    let stopped = tokio::time::timeout(Duration::from_millis(300), r.create_token(CLUSTER)).await;
    assert!(stopped.is_err(), "the bind stopped after its row");
    assert_eq!(
        l.find_by_resource_id(CLUSTER, None).await.unwrap().len(),
        1,
        "its row is left"
    );
    env.clock.advance(Duration::from_secs(1));
    let token = l
        .reservation("emr", "acct", &r.id)
        .unwrap()
        .create_token("j-OTHER")
        .await
        .expect("still unbound: it binds elsewhere");

    let out = handle(&remover, event("emr-terminated.json"))
        .await
        .unwrap();
    assert!(
        matches!(out, Outcome::Removed { ref tokens, .. } if tokens.len() == 1),
        "the stale row was found: {out:?}"
    );
    let live = held(&l).await;
    assert_eq!(
        live.iter()
            .map(|t| (t.reservation_id.as_str(), t.expiration_time))
            .collect::<Vec<_>>(),
        [(r.id.as_str(), Some(token.expiration_time))],
        "the unit is still held by its binding to j-OTHER"
    );
    assert!(matches!(
        l.get_reservation("emr", "acct", 1).await,
        Err(ReservationError::Limited { .. })
    ));
    assert_eq!(
        l.find_by_resource_id(CLUSTER, None).await.unwrap(),
        [],
        "the stale row is deleted"
    );

    l.remove_by_resource_id("j-OTHER", None).await.unwrap();
    assert!(
        held(&l).await.is_empty(),
        "its own resource's end releases it"
    );
}
