//! Tenant-scoped credentials end to end, offline: a tiny local HTTP server stands in for STS (it
//! records each AssumeRole request and answers with made-up credentials), and the clients it yields
//! write to DynamoDB Local. Shows the AssumeRole request's shape, the per-tenant cache and its
//! refresh on the manual clock, that the scoped credentials are the ones that sign DynamoDB calls,
//! that each function's AssumeRole carries its own session policy (decision 2202), and that the key
//! guard refuses another tenant's key with either kind of credentials.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::Value;
use shared::clock::Clock;
use shared::ids::TenantId;
use shared::isolation::policy::TENANT_ACCESS;
use shared::isolation::{
    TenantClients, REFRESH_BEFORE_EXPIRY, SESSION_DURATION, TENANT_ROLE_ARN_VAR, TENANT_TAG,
};
use shared::table::TableKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use turnstile_tests::TestEnv;

const ROLE: &str = "arn:aws:iam::123456789012:role/turnstile-TenantRole-ABC";

/// A stand-in for STS: answers every request with fresh credentials (`ASIAFAKE{n}`, expiring one
/// hour after the wall clock's now) and keeps the decoded form parameters of each request.
struct FakeSts {
    url: String,
    requests: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

impl FakeSts {
    async fn start() -> FakeSts {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<BTreeMap<String, String>>>> = Arc::default();
        let log = requests.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    // One request per connection is enough for the SDK (we answer Connection: close).
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let (head_end, content_length) = loop {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..pos]).to_ascii_lowercase();
                            let len = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map(|v| v.trim().parse::<usize>().unwrap())
                                .unwrap_or(0);
                            break (pos + 4, len);
                        }
                    };
                    while buf.len() < head_end + content_length {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let body = String::from_utf8_lossy(&buf[head_end..head_end + content_length]);
                    let form: BTreeMap<String, String> = body
                        .split('&')
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
                        .collect();
                    let n = {
                        let mut l = log.lock().unwrap();
                        l.push(form);
                        l.len()
                    };
                    let expires = shared::clock::SystemClock
                        .now()
                        .plus(Duration::from_secs(3600))
                        .to_rfc3339();
                    let xml = format!(
                        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
                         <AssumeRoleResult><Credentials>\
                         <AccessKeyId>ASIAFAKE{n}</AccessKeyId>\
                         <SecretAccessKey>secret{n}</SecretAccessKey>\
                         <SessionToken>token{n}</SessionToken>\
                         <Expiration>{expires}</Expiration>\
                         </Credentials><AssumedRoleUser>\
                         <AssumedRoleId>AROAFAKE:s{n}</AssumedRoleId>\
                         <Arn>arn:aws:sts::123456789012:assumed-role/TenantRole/s{n}</Arn>\
                         </AssumedRoleUser></AssumeRoleResult>\
                         <ResponseMetadata><RequestId>r{n}</RequestId></ResponseMetadata>\
                         </AssumeRoleResponse>"
                    );
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{xml}",
                        xml.len()
                    );
                    let _ = sock.write_all(response.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        FakeSts { url, requests }
    }

    fn requests(&self) -> Vec<BTreeMap<String, String>> {
        self.requests.lock().unwrap().clone()
    }

    /// The SDK configuration a function would have, with STS pointed here.
    fn sdk_config(&self) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIAEXECUTIONROLE",
                "execution-secret",
                None,
                None,
                "execution-role",
            )))
            .endpoint_url(&self.url)
            .build()
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Records the access key id that signed each DynamoDB request.
#[derive(Debug, Clone, Default)]
struct SigningKeys(Arc<Mutex<Vec<String>>>);

impl SigningKeys {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Intercept for SigningKeys {
    fn name(&self) -> &'static str {
        "SigningKeys"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let auth = context
            .request()
            .headers()
            .get("authorization")
            .unwrap_or_default();
        let key = auth
            .split("Credential=")
            .nth(1)
            .and_then(|c| c.split('/').next())
            .unwrap_or("unsigned")
            .to_string();
        self.0.lock().unwrap().push(key);
        Ok(())
    }
}

fn t(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

/// `deps` as function `function`'s with `TENANT_ROLE_ARN` set and DynamoDB calls through `client`:
/// what `serve` and the template give a deployed function with `TenantIsolation=Enabled`.
fn isolated(deps: &shared::Deps, client: &Client, function: &'static str) -> shared::Deps {
    shared::Deps {
        dynamo: client.clone(),
        vars: deps.vars.with_overrides([(TENANT_ROLE_ARN_VAR, ROLE)]),
        ..deps.clone()
    }
    .for_function(function)
}

/// A session policy as (table name -> its actions), checking its shape: Version, Allow statements
/// without conditions, one table ARN each in this test's region and account.
fn policy_tables(policy: &str) -> BTreeMap<String, Vec<String>> {
    let p: Value = serde_json::from_str(policy).unwrap();
    assert_eq!(p["Version"], "2012-10-17");
    let mut out = BTreeMap::new();
    for s in p["Statement"].as_array().unwrap() {
        assert_eq!(s["Effect"], "Allow", "{policy}");
        assert!(s.get("Condition").is_none(), "{policy}");
        let arn = s["Resource"].as_str().unwrap();
        let table = arn
            .strip_prefix("arn:aws:dynamodb:us-east-1:123456789012:table/")
            .unwrap_or_else(|| panic!("{arn}"));
        let actions = s["Action"].as_array().unwrap();
        let actions = actions.iter().map(|a| a.as_str().unwrap().to_string());
        out.insert(table.to_string(), actions.collect());
    }
    out
}

/// A counters-table client on DynamoDB Local that also records signing keys.
async fn counters_env() -> (TestEnv, Client, SigningKeys) {
    let env = TestEnv::new(&[TableKind::Counters]).await;
    let keys = SigningKeys::default();
    let config = env
        .deps
        .dynamo
        .config()
        .to_builder()
        .interceptor(keys.clone())
        .build();
    (env, Client::from_conf(config), keys)
}

async fn put_counter(client: &Client, table: &str, key: &str) {
    client
        .put_item()
        .table_name(table)
        .item("key", AttributeValue::S(key.to_string()))
        .item("itemCount", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn without_a_tenant_role_the_execution_role_is_used_and_the_guard_still_applies() {
    let (env, base, keys) = counters_env().await;
    let sts = FakeSts::start().await;
    let deps = shared::Deps {
        dynamo: base,
        ..env.deps.clone()
    }
    .for_function("connect");
    let clients = TenantClients::from_deps_with(&deps, &sts.sdk_config()).unwrap();
    assert_eq!(clients.role_arn(), None);
    assert_eq!(clients.session_policy(), None);
    let ab = clients.for_tenant(&t("ab")).await.unwrap();

    let err = ab.key("abc:minute:1").unwrap_err();
    assert!(err.to_string().contains("outside tenant \"ab\""), "{err}");
    assert!(ab.key("abc").is_err());
    let own = ab.key("ab:minute:1").unwrap();
    put_counter(ab.client(), &env.deps.tables.counters, own).await;

    assert!(
        sts.requests().is_empty(),
        "no STS call without TENANT_ROLE_ARN"
    );
    // What a function's main.rs gets from its Deps when TENANT_ROLE_ARN is unset.
    let from_deps = TenantClients::from_deps(&env.deps).await.unwrap();
    assert_eq!(from_deps.role_arn(), None);
    assert_eq!(
        keys.all(),
        ["local"],
        "signed by the execution role's (local) credentials"
    );
    assert_eq!(env.counter.total(), 1);
}

#[tokio::test]
async fn with_a_tenant_role_each_tenant_gets_tagged_credentials_cached_until_near_expiry() {
    let (env, base, keys) = counters_env().await;
    let sts = FakeSts::start().await;
    // The sweeper: its session policy allows PutItem and UpdateItem on counters, nothing else.
    let deps = isolated(&env.deps, &base, "ttl-sweeper");
    let clients = TenantClients::from_deps_with(&deps, &sts.sdk_config()).unwrap();
    assert_eq!(clients.role_arn(), Some(ROLE));

    // First use of a tenant: one AssumeRole, tagged with the tenant, with the function's policy.
    let ab = clients.for_tenant(&t("ab")).await.unwrap();
    let requests = sts.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r["Action"], "AssumeRole");
    assert_eq!(r["RoleArn"], ROLE);
    assert_eq!(r["RoleSessionName"], "turnstile-ab");
    assert_eq!(r["DurationSeconds"], SESSION_DURATION.as_secs().to_string());
    assert_eq!(r["Tags.member.1.Key"], TENANT_TAG);
    assert_eq!(r["Tags.member.1.Value"], "ab");
    assert_eq!(r["TransitiveTagKeys.member.1"], TENANT_TAG);
    assert!(
        !r.contains_key("Tags.member.2.Key"),
        "only the tenant tag: {r:?}"
    );
    let policy = r.get("Policy").expect("a session policy is sent");
    assert_eq!(Some(policy.as_str()), clients.session_policy());
    assert_eq!(
        policy_tables(policy),
        [(
            env.deps.tables.counters.clone(),
            vec!["dynamodb:PutItem".into(), "dynamodb:UpdateItem".into()]
        )]
        .into(),
        "the sweeper's own actions on its own table"
    );

    // Its DynamoDB calls are signed with the tenant credentials, through the same interceptors.
    put_counter(
        ab.client(),
        &env.deps.tables.counters,
        ab.key("ab").unwrap(),
    )
    .await;
    assert_eq!(keys.all(), ["ASIAFAKE1"]);
    assert_eq!(env.counter.total(), 1, "the call counter still counts");
    // The guard refuses another tenant's key before any call.
    assert!(ab.key("abc").is_err());
    assert!(ab.key("abc:minute:1").is_err());
    assert_eq!(env.counter.total(), 1);

    // Cached per tenant: no second call for "ab"; "abc" is another tenant with its own tag.
    let again = clients.for_tenant(&t("ab")).await.unwrap();
    assert_eq!(sts.requests().len(), 1);
    let abc = clients.for_tenant(&t("abc")).await.unwrap();
    assert_eq!(sts.requests().len(), 2);
    assert_eq!(sts.requests()[1]["Tags.member.1.Value"], "abc");
    assert_eq!(
        sts.requests()[1]["Policy"],
        *policy,
        "one policy for every tenant"
    );
    put_counter(again.client(), &env.deps.tables.counters, "ab:minute:2").await;
    put_counter(
        abc.client(),
        &env.deps.tables.counters,
        abc.key("abc:minute:2").unwrap(),
    )
    .await;
    assert_eq!(keys.all(), ["ASIAFAKE1", "ASIAFAKE1", "ASIAFAKE2"]);

    // Until 5 minutes before expiry (the fake grants one hour), then refreshed once.
    let fresh_for = SESSION_DURATION - REFRESH_BEFORE_EXPIRY;
    env.clock.advance(fresh_for - Duration::from_secs(5));
    clients.for_tenant(&t("ab")).await.unwrap();
    assert_eq!(sts.requests().len(), 2, "still fresh");
    env.clock.advance(Duration::from_secs(5));
    let refreshed = clients.for_tenant(&t("ab")).await.unwrap();
    assert_eq!(sts.requests().len(), 3, "refreshed 5 minutes before expiry");
    clients.for_tenant(&t("ab")).await.unwrap();
    assert_eq!(sts.requests().len(), 3, "and cached again");
    put_counter(refreshed.client(), &env.deps.tables.counters, "ab:minute:3").await;
    assert_eq!(keys.all().last().map(String::as_str), Some("ASIAFAKE3"));
}

/// The WebSocket handlers with `TENANT_ROLE_ARN` set, as `main.rs` wires them: every DynamoDB call
/// they make on tenant rows is signed with that tenant's assumed-role credentials (never the
/// execution role's), one AssumeRole per tenant serves all six functions' states sharing the
/// clients, and the DynamoDB call budgets are those of the execution-role path.
#[tokio::test]
async fn with_a_tenant_role_every_websocket_handler_signs_tenant_calls_with_tenant_credentials() {
    use crate::ws_support::{sample, session_event, typed, ws_event, World, SMALL};
    use shared::function::Tenancy;

    let w = World::new().await;
    // Operator path (execution/admin credentials): the tenants exist.
    w.put_tenant("ab", SMALL).await;
    w.put_tenant("abc", SMALL).await;

    let sts = FakeSts::start().await;
    let keys = SigningKeys::default();
    let base = Client::from_conf(
        w.deps()
            .dynamo
            .config()
            .to_builder()
            .interceptor(keys.clone())
            .build(),
    );
    // The execution role's Deps; handlers must not use its client for tenant rows.
    let deps = shared::Deps {
        dynamo: base.clone(),
        ..w.deps().clone()
    };
    // Each function as its `init` builds it, but with tenant clients on the fake STS, each sending
    // its own session policy (`serve` names the function; `Tenancy::from_deps` reads the name).
    let fd = w.function_deps(&[]);
    let mut policy_of: BTreeMap<&str, String> = BTreeMap::new();
    let mut tenancy = |function: &'static str| {
        let deps = isolated(w.deps(), &base, function);
        let clients = TenantClients::from_deps_with(&deps, &sts.sdk_config()).unwrap();
        policy_of.insert(function, clients.session_policy().unwrap().to_string());
        Tenancy::from(clients)
    };
    let sessions = session_api::State {
        tenancy: tenancy("session-api"),
        ..session_api::init(&fd).await.unwrap()
    };
    let auth = authorizer::State {
        tenancy: tenancy("authorizer"),
        ..authorizer::init(&fd).await.unwrap()
    };
    let conn = connect::State {
        tenancy: tenancy("connect"),
        ..connect::init(&fd).await.unwrap()
    };
    let msg = message::State {
        tenancy: tenancy("message"),
        ..message::init(&fd).await.unwrap()
    };
    let disc = disconnect::State {
        tenancy: tenancy("disconnect"),
    };
    let sweeper = ttl_sweeper::State {
        tenancy: tenancy("ttl-sweeper"),
        ..ttl_sweeper::init(&fd).await.unwrap()
    };
    // Request n (from 1) of the fake STS: (tenant tag, the function whose policy it carries).
    let assumed = || -> Vec<(String, &str)> {
        sts.requests()
            .iter()
            .map(|r| {
                let policy = r
                    .get("Policy")
                    .expect("every AssumeRole sends a session policy");
                let function = policy_of
                    .iter()
                    .find(|(_, p)| *p == policy)
                    .map(|(f, _)| *f)
                    .unwrap_or_else(|| panic!("a policy of no function: {policy}"));
                (r["Tags.member.1.Value"].clone(), function)
            })
            .collect()
    };
    // The access key ids STS issued for `tenant` (ASIAFAKE{n} answers request n).
    let keys_of = |tenant: &str| -> Vec<String> {
        assumed()
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| t == tenant)
            .map(|(i, _)| format!("ASIAFAKE{}", i + 1))
            .collect()
    };

    // (what, DynamoDB calls) for tenant "ab": the budgets of each handler's docs.
    let put = session_event(
        "PUT",
        "/session",
        &[("tenantId", "ab"), ("sessionId", "s1")],
        None,
    );
    w.env.counter.reset();
    let r = session_api::handle(&deps, &sessions, put).await.unwrap();
    assert_eq!(r.status_code, 200);
    assert_eq!(
        w.env.counter.total(),
        3,
        "PUT, cold tenant cache: the tenant row, the refresh (no row), the create's transaction"
    );
    assert_eq!(
        assumed(),
        [("ab".to_string(), "session-api")],
        "first use of ab"
    );

    w.env.counter.reset();
    let ev = w.authorizer_event("ab", "s1").await;
    let r = authorizer::handle(&deps, &auth, ev).await.unwrap();
    assert_eq!(authorizer::decision(&r), authorizer::Decision::Allow);
    assert_eq!(w.env.counter.total(), 2, "authorizer, cold tenant cache");
    assert_eq!(
        assumed()[1],
        ("ab".to_string(), "authorizer"),
        "its own AssumeRole"
    );
    let authorizer_actions: Vec<String> = policy_tables(&policy_of["authorizer"])
        .into_values()
        .flatten()
        .collect();
    assert_eq!(
        authorizer_actions,
        ["dynamodb:BatchGetItem", "dynamodb:BatchGetItem"],
        "the authorizer's tenant credentials only read (the precheck; its tenant-row read is the \
         execution role's)"
    );

    let cid = "L0SM9cOFvHcCIhw=";
    w.env.counter.reset();
    let ev = ws_event("connect/connect.json", "ab", "s1", cid, Some(&SMALL));
    let r = connect::handle(&deps, &conn, ev).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    let mut ev = ws_event("message/message.json", "ab", "s1", cid, Some(&SMALL));
    ev.body = Some("hello".into());
    let r = message::handle(&deps, &msg, ev).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    let ev = ws_event("disconnect/disconnect.json", "ab", "s1", cid, Some(&SMALL));
    let r = disconnect::handle(&deps, &disc, ev).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    assert_eq!(
        w.env.counter.by_operation(),
        [("GetItem".to_string(), 1), ("UpdateItem".to_string(), 6)].into(),
        "connect 2, message 1 and its tenant row (a cold cache), disconnect 3 (decision 2206)"
    );
    let functions: Vec<&str> = assumed().iter().map(|(_, f)| *f).collect();
    assert_eq!(
        functions,
        [
            "session-api",
            "authorizer",
            "connect",
            "message",
            "disconnect"
        ],
        "one AssumeRole per function for ab, each with its own policy"
    );
    // Every call signed by ab's credentials, but the authorizer's (cold) read of the tenant row,
    // which is the execution role's: it comes before any AssumeRole.
    let ab_keys = keys_of("ab");
    let signed = keys.all();
    assert_eq!(
        signed.iter().filter(|k| !ab_keys.contains(k)).count(),
        1,
        "every call but one signed by ab's credentials ({ab_keys:?}): {signed:?}"
    );
    // (after the session API's 3 calls)
    assert_eq!(
        signed[3], "local",
        "the authorizer's tenant read: {signed:?}"
    );
    let ev = w.authorizer_event("ab", "s1").await;
    let r = authorizer::handle(&deps, &auth, ev).await.unwrap();
    assert_eq!(authorizer::decision(&r), authorizer::Decision::Allow);
    assert_eq!(
        sts.requests().len(),
        5,
        "ab's credentials are cached per function"
    );

    // Another tenant: its own AssumeRole, its own credentials; the sweeper scopes per record.
    let n = keys.all().len();
    let put = session_event(
        "PUT",
        "/session",
        &[("tenantId", "abc"), ("sessionId", "s1")],
        None,
    );
    assert_eq!(
        session_api::handle(&deps, &sessions, put)
            .await
            .unwrap()
            .status_code,
        200
    );
    let ev = ws_event("connect/connect.json", "abc", "s1", cid, Some(&SMALL));
    assert_eq!(
        connect::handle(&deps, &conn, ev).await.unwrap().status_code,
        200
    );
    let mut record = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    record["dynamodb"]["Keys"] =
        serde_json::json!({"tenantId": {"S": "abc"}, "sessionId": {"S": "s1"}});
    record["dynamodb"]["OldImage"] = serde_json::json!({
        "tenantId": {"S": "abc"}, "sessionId": {"S": "s1"}, "sessionTTL": {"N": "1"},
        "connectionIds": {"SS": [cid]},
    });
    w.env.counter.reset();
    let r = ttl_sweeper::handle(
        &deps,
        &sweeper,
        typed(serde_json::json!({"Records": [record]})),
    )
    .await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(
        w.env.counter.by_operation(),
        [("TransactWriteItems".to_string(), 1)].into(),
        "the sweep's tombstone, the session count and the connections' count in one transaction (decision 2206)"
    );
    assert_eq!(w.count("abc").await, Some(0), "abc's connection released");
    assert_eq!(
        assumed()[5..],
        [
            ("abc".to_string(), "session-api"),
            ("abc".to_string(), "connect"),
            ("abc".to_string(), "ttl-sweeper")
        ]
    );
    let abc_keys = keys_of("abc");
    assert!(
        keys.all()[n..].iter().all(|k| abc_keys.contains(k)),
        "every call signed by abc's credentials ({abc_keys:?}): {:?}",
        keys.all()
    );
}

/// Every tenant-facing function's AssumeRole carries its session policy: exactly its line of
/// `TENANT_ACCESS` on this stack's tables (the template test holds those lines equal to the
/// execution roles' grants). A process that names no function does not start with a tenant role.
#[tokio::test]
async fn each_functions_assume_role_sends_its_own_session_policy() {
    let (env, base, _) = counters_env().await;
    let sts = FakeSts::start().await;
    for (n, access) in TENANT_ACCESS.iter().enumerate() {
        let deps = isolated(&env.deps, &base, access.function);
        let clients = TenantClients::from_deps_with(&deps, &sts.sdk_config()).unwrap();
        clients.for_tenant(&t("ab")).await.unwrap();
        let requests = sts.requests();
        assert_eq!(requests.len(), n + 1);
        let sent = requests[n].get("Policy").map(String::as_str);
        assert_eq!(sent, clients.session_policy(), "{}", access.function);
        let want: BTreeMap<String, Vec<String>> = access
            .tables
            .iter()
            .map(|(kind, actions)| {
                let names = &env.deps.tables;
                let table = match kind {
                    TableKind::Tenants => &names.tenants,
                    TableKind::Sessions => &names.sessions,
                    TableKind::Counters => &names.counters,
                    TableKind::Buckets => &names.buckets,
                    TableKind::FungibleTokens => &names.fungible_tokens,
                    TableKind::Limits => &names.limits,
                    TableKind::NonFungibleTokens => &names.non_fungible_tokens,
                };
                (
                    table.clone(),
                    actions.iter().map(|a| a.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(policy_tables(sent.unwrap()), want, "{}", access.function);
    }
    let nameless = shared::Deps {
        function: None,
        ..isolated(&env.deps, &base, "connect")
    };
    let err = TenantClients::from_deps_with(&nameless, &sts.sdk_config()).unwrap_err();
    assert!(err.to_string().contains("names no function"), "{err}");
}

/// Anonymous `$connect`s naming made-up tenants never reach STS. The authorizer
/// reads the tenant row (execution role, cached; unknown ids cached apart and briefly) before it
/// assumes the tenant role, so a flood of connects naming unknown tenants makes 0 AssumeRole calls
/// and leaves the real tenant's credentials cached (before: one AssumeRole each, and each unknown id
/// took a slot of the credential cache, evicting the soonest-expiring: the real tenant's). The flood
/// is larger than that cache ([`shared::isolation::MAX_CACHED_TENANTS`]), so the eviction half can
/// fail too (seen with the tenant read moved after the AssumeRole, as before the fix).
#[tokio::test]
async fn a_flood_of_unknown_tenants_makes_no_sts_call_and_evicts_no_credentials() {
    use crate::ws_support::{authorizer_event, World, SMALL};
    use shared::function::Tenancy;
    use shared::isolation::MAX_CACHED_TENANTS;

    let w = World::new().await;
    w.put_tenant("real", SMALL).await;
    w.put_session("real", "s1").await;
    let sts = FakeSts::start().await;
    let deps = isolated(w.deps(), &w.deps().dynamo, "authorizer");
    let tc = TenantClients::from_deps_with(&deps, &sts.sdk_config()).unwrap();
    let auth = authorizer::State {
        tenancy: Tenancy::from(tc),
        ..authorizer::init(&w.function_deps(&[])).await.unwrap()
    };
    let decide = |ev| async {
        authorizer::decision(&authorizer::handle(w.deps(), &auth, ev).await.unwrap())
    };
    // The real tenant, once: one AssumeRole, its credentials cached.
    assert_eq!(
        decide(w.authorizer_event("real", "s1").await).await,
        authorizer::Decision::Allow
    );
    assert_eq!(sts.requests().len(), 1);
    // Fetched before the flood, the real tenant's credentials expire first: the entry a full
    // credential cache drops first (without the step, every entry's expiry is the same instant
    // give or take STS's latency, and which one goes is left to chance).
    w.env.clock.advance(Duration::from_secs(1));
    // More anonymous connects than the credential cache holds, each naming another made-up tenant
    // (no ticket: the unauthenticated path, the one that reaches the tenant read).
    let flood = MAX_CACHED_TENANTS + 100;
    w.env.counter.reset();
    for i in 0..flood {
        let t = format!("ghost-{i}");
        let d = decide(authorizer_event(&[("tenantId", &t), ("sessionId", "s1")])).await;
        assert!(
            matches!(d, authorizer::Decision::Deny(ref r) if r.contains("does not exist")),
            "{d:?}"
        );
    }
    let (sts_after_flood, calls) = (sts.requests().len(), w.env.counter.by_operation());
    // The real tenant's credentials are still cached: no second AssumeRole (checked before the
    // STS count, so a regression shows this half on its own).
    assert_eq!(
        decide(w.authorizer_event("real", "s1").await).await,
        authorizer::Decision::Allow
    );
    assert_eq!(
        sts.requests().len() - sts_after_flood,
        0,
        "the real tenant's credentials survived {flood} unknown ids \
         (credential cache: {MAX_CACHED_TENANTS})"
    );
    assert_eq!(
        sts_after_flood, 1,
        "no AssumeRole for a tenant that does not exist"
    );
    assert_eq!(
        calls,
        [("GetItem".to_string(), flood as u64)].into(),
        "one tenant read per unknown id, nothing else"
    );
    // Repeats of a known-missing id are answered from memory.
    w.env.counter.reset();
    for _ in 0..100 {
        decide(authorizer_event(&[
            ("tenantId", "ghost-7"),
            ("sessionId", "s1"),
        ]))
        .await;
    }
    assert_eq!(w.env.counter.total(), 0);
    // A tenant created after it was found missing is seen once the short negative entry lapses.
    w.put_tenant("ghost-7", SMALL).await;
    w.put_session("ghost-7", "s1").await;
    w.env.clock.advance(shared::tenant::cache::MISSING_TTL);
    assert_eq!(
        decide(w.authorizer_event("ghost-7", "s1").await).await,
        authorizer::Decision::Allow
    );
    assert_eq!(sts.requests().len(), 2);
}
