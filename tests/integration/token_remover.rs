//! The token remover: processor configuration (validated, errors naming the field), and the
//! handler against DynamoDB Local with the sample events in `events/token-remover/`.

use std::path::PathBuf;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde_json::{json, Value};
use shared::config::Vars;
use shared::reservation::NonFungibleLimiter;
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
            ("Query".to_string(), 1),
            ("UpdateItem".to_string(), 1)
        ]
        .into()
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
