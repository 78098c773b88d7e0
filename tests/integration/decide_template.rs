//! The decide API in `template.yaml`: its DynamoDB actions (the model `template.rs` checks every
//! function against), its own tenant role whose leading keys are exactly the tenant's key space,
//! and its two front doors.

use serde_json::Value;
use shared::table::TableKind;

use crate::template::load_template;

/// What the decide API does on each table (tenant rows only; under `TenantIsolation=Enabled` with
/// `DecideTenantRole`, else its execution role).
pub(crate) fn dynamo_actions() -> Vec<(Option<TableKind>, &'static [&'static str])> {
    shared::isolation::policy::tenant_access("decide-api")
        .expect("decide-api has a line in TENANT_ACCESS")
        .tables
        .iter()
        .map(|(k, a)| (Some(*k), *a))
        .collect()
}

/// IAM's `StringLike`: `*` any run, `?` one character.
fn like(pattern: &str, value: &str) -> bool {
    fn go(p: &[char], v: &[char]) -> bool {
        match p.first() {
            None => v.is_empty(),
            Some('*') => (0..=v.len()).any(|i| go(&p[1..], &v[i..])),
            Some('?') => !v.is_empty() && go(&p[1..], &v[1..]),
            Some(c) => v.first() == Some(c) && go(&p[1..], &v[1..]),
        }
    }
    go(
        &pattern.chars().collect::<Vec<_>>(),
        &value.chars().collect::<Vec<_>>(),
    )
}

fn patterns(statement: &Value, tag: &str) -> Vec<String> {
    statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
        .as_array()
        .expect("every statement has the leading-key condition")
        .iter()
        .map(|p| {
            p.as_str()
                .unwrap()
                .replace("${aws:PrincipalTag/tenantId}", tag)
        })
        .collect()
}

/// Every key the decide API writes for tenant `acme` is allowed by acme's credentials, and no key
/// of another tenant is, crafted separators included.
#[test]
fn the_decide_tenant_role_reaches_only_the_tenants_keys() {
    let t = load_template();
    let role = &t["Resources"]["DecideTenantRole"];
    assert_eq!(role["Condition"], "IsolationOn");
    let statements = role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap();
    assert_eq!(
        statements.len(),
        4,
        "buckets, token buckets, limit rows, reservations"
    );
    let own = [
        "acme:1:u",
        "acme:1/3:u",
        "acme:~lease:9:acme:1:u:L",
        "acme:~refund:9:acme:1:u:k",
        "acme:emr",
        "acme:emr#shard2",
        "acme:cluster:a1",
        ":ended:acme:j-1",
    ];
    let other = [
        "1:u",
        "acme2:1:u",
        "acm:1:u",
        "b:acme:1:u",
        ":ended:acme2:j",
        ":ended:b:acme:j",
        "~lease:1:acme",
        "",
        "ACME:1:u",
    ];
    let allowed = |key: &str| {
        statements
            .iter()
            .any(|s| patterns(s, "acme").iter().any(|p| like(p, key)))
    };
    for k in own {
        assert!(allowed(k), "{k} must be reachable");
    }
    for k in other {
        assert!(!allowed(k), "{k} must not be reachable by acme");
    }
    for s in statements {
        assert_eq!(s["Condition"]["Null"]["dynamodb:LeadingKeys"], "false");
        for p in patterns(s, "acme") {
            assert!(
                p == "acme" || p.starts_with("acme:") || p.starts_with(":ended:acme:"),
                "{p}"
            );
        }
    }
    let trust = &role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0];
    assert_eq!(
        trust["Principal"]["AWS"]["Fn::GetAtt"][0],
        "DecideApiFunctionRole"
    );
}

#[test]
fn the_decide_api_has_a_function_url_and_an_http_api_and_binds_callers() {
    let t = load_template();
    let f = &t["Resources"]["DecideApiFunction"]["Properties"];
    assert_eq!(f["FunctionUrlConfig"]["AuthType"], "AWS_IAM");
    let vars = &f["Environment"]["Variables"];
    // IAM callers bind through DecideCallerRole when backend roles are named; JWT claims otherwise.
    assert_eq!(
        vars["TURNSTILE_DECIDE_AUTH"]["Fn::If"],
        serde_json::json!(["DecideBindsIamCallers", "iam", "jwt"])
    );
    assert_eq!(
        vars["TURNSTILE_DECIDE_IAM_ROLE_ARN"]["Fn::If"][1]["Fn::GetAtt"][0],
        "DecideCallerRole"
    );
    assert_eq!(
        vars["TENANT_ROLE_ARN"]["Fn::If"][1]["Fn::GetAtt"][0],
        "DecideTenantRole"
    );
    let route = &t["Resources"]["DecideRoute"]["Properties"];
    assert_eq!(route["RouteKey"], "ANY /v1/{proxy+}");
    let trust = &t["Resources"]["DecideCallerRole"]["Properties"]["AssumeRolePolicyDocument"]
        ["Statement"][0];
    assert_eq!(
        trust["Condition"]["StringEquals"]["sts:RoleSessionName"],
        "${aws:PrincipalTag/tenantId}"
    );
    for out in [
        "DecideApiUrl",
        "DecideApiFunctionUrl",
        "DecideCallerRoleArn",
    ] {
        assert!(t["Outputs"][out].is_object(), "{out}");
    }
}

/// The decide API's config readers: its tenant role variable and its `Config`.
pub(crate) fn readers() -> Vec<(&'static str, crate::template::Reader)> {
    vec![
        ("IsolationConfig::from_vars", |v| {
            shared::isolation::IsolationConfig::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
        ("decide_api::Config::from_vars", |v| {
            decide_api::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        }),
    ]
}

/// `TENANT_ROLE_ARN`: the decide API's own tenant role when isolation is on, empty when off.
pub(crate) fn check_tenant_role_var(
    env: &std::collections::BTreeMap<String, String>,
    isolated: bool,
) {
    let arn = env
        .get(shared::isolation::TENANT_ROLE_ARN_VAR)
        .map(String::as_str);
    if isolated {
        assert_eq!(arn, Some("arn:aws:iam::123456789012:role/DecideTenantRole"));
    } else {
        assert_eq!(arn, Some(""));
    }
}

/// One statement per table in each of the three places that grant the decide API's actions:
/// its session policy (TENANT_ACCESS), its tenant role, and its execution role without isolation.
#[test]
fn the_decide_apis_actions_are_the_same_in_its_policy_its_tenant_role_and_its_execution_role() {
    let t = load_template();
    let table_res = |kind: TableKind| match kind {
        TableKind::Buckets => "BucketsTable",
        TableKind::FungibleTokens => "FungibleTokensTable",
        TableKind::Limits => "LimitsTable",
        TableKind::NonFungibleTokens => "NonFungibleTokensTable",
        other => panic!("{other:?}"),
    };
    let actions_on = |statements: &Value, res: &str| -> Vec<String> {
        let s = statements
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Resource"][0]["Fn::If"][1]["Fn::GetAtt"][0] == res)
            .unwrap_or_else(|| panic!("no statement on {res}"));
        s["Action"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let role = &t["Resources"]["DecideTenantRole"]["Properties"]["Policies"][0]["PolicyDocument"]
        ["Statement"];
    let exec =
        &t["Resources"]["DecideApiFunction"]["Properties"]["Policies"][0]["Fn::If"][1]["Statement"];
    for (kind, actions) in dynamo_actions() {
        let kind = kind.unwrap();
        let want: Vec<String> = actions.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            actions_on(role, table_res(kind)),
            want,
            "DecideTenantRole on {kind:?}"
        );
        assert_eq!(
            actions_on(exec, table_res(kind)),
            want,
            "execution role on {kind:?}"
        );
    }
}
