//! `template.yaml` and `samconfig.toml`, checked offline against the code: every function crate has
//! exactly one function; every table matches `shared::catalog::catalog`; every variable a function
//! reads is set on it (and nothing else is); the tenant role's IAM condition accepts exactly the keys
//! the code's key guard accepts; the stream mapping, APIs, rule and outputs are wired as documented.
//!
//! The template is parsed with its short-form tags (`!Ref`, `!If`, ...) turned into their long forms
//! and evaluated by a small interpreter of the intrinsics it uses, under chosen parameter values, so
//! each check sees what CloudFormation would create for those parameters.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{json, Map, Value};
use shared::catalog::catalog;
use shared::config::Vars;
use shared::ids::TenantId;
use shared::isolation::{key_in_tenant, IsolationConfig, TenantClients, TENANT_ROLE_ARN_VAR};
use shared::table::{AttrType, AttributeStyle, TableKind, TableNames};

// ------------------------------------------------------------------------------------------------
// What each function reads. MERGE POINT: when a function crate exposes `Config::from_vars`, add it
// to `function_readers` (and delete that function's entries from `AWAITING_READER`).
// ------------------------------------------------------------------------------------------------

pub(crate) type Reader = fn(&Vars) -> Result<(), String>;

/// Readers every function runs at start-up (`shared::Deps::from_env`).
const COMMON_READERS: &[(&str, Reader)] = &[
    ("TableNames::from_vars", |v| {
        TableNames::from_vars(v)
            .map(drop)
            .map_err(|e| e.to_string())
    }),
    ("AttributeStyle::from_vars", |v| {
        AttributeStyle::from_vars(v)
            .map(drop)
            .map_err(|e| e.to_string())
    }),
    ("metrics::Settings::from_vars", |v| {
        shared::telemetry::metrics::Settings::from_vars(v)
            .map(drop)
            .map_err(|e| e.to_string())
    }),
];

/// The functions that touch tenant rows and so read `TENANT_ROLE_ARN` (shared::isolation).
const TENANT_FUNCTIONS: &[&str] = &[
    "authorizer",
    "connect",
    "disconnect",
    "message",
    "session-api",
    "ttl-sweeper",
    "reconciler",
];

/// Per-function config readers.
fn function_readers(function: &str) -> Vec<(&'static str, Reader)> {
    let mut readers: Vec<(&'static str, Reader)> = Vec::new();
    if TENANT_FUNCTIONS.contains(&function) {
        readers.push(("IsolationConfig::from_vars", |v| {
            IsolationConfig::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        }));
    }
    match function {
        "authorizer" => readers.push(("authorizer::Config::from_vars", |v| {
            authorizer::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "connect" => readers.push(("connect::Config::from_vars", |v| {
            connect::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "disconnect" => readers.push(("disconnect::Config::from_vars", |v| {
            disconnect::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "message" => readers.push(("message::Config::from_vars", |v| {
            message::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "session-api" => readers.push(("session_api::Config::from_vars", |v| {
            session_api::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "ttl-sweeper" => readers.push(("ttl_sweeper::Config::from_vars", |v| {
            ttl_sweeper::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "reconciler" => readers.push(("reconciler::Config::from_vars", |v| {
            reconciler::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        "token-remover" => readers.push(("token_remover::Config::from_vars", |v| {
            token_remover::Config::from_vars(v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        // Lambda sets AWS_REGION, which names the region on the ledger.
        "region-rebalancer" => readers.push(("region_rebalancer::Config::from_vars", |v| {
            let v = v.with_overrides([(region_rebalancer::REGION_VAR, REGION)]);
            region_rebalancer::Config::from_vars(&v)
                .map(drop)
                .map_err(|e| e.to_string())
        })),
        // Its own tenant role (DecideTenantRole): tests/integration/decide_template.rs.
        "decide-api" => readers.extend(crate::decide_template::readers()),
        other => panic!("no reader list for function {other}: add it here"),
    }
    readers
}

/// Variables the template sets ahead of the code that will read them (the function crates' `Config`
/// is being written). Each entry must go when that function's reader is added above; the test then
/// proves the reader reads it.
const AWAITING_READER: &[(&str, &str)] = &[];

/// Read but deliberately left unset on a function: an alternative to a variable the template sets.
/// token-remover reads exactly one of `TOKEN_REMOVER_PROCESSORS` (set from the
/// `TokenRemoverProcessors` parameter) and `TOKEN_REMOVER_PROCESSORS_FILE` (for a file packaged with
/// a custom build), so it looks at both.
/// The authorizer and the session API read their ticket keys from `TURNSTILE_TICKET_KEYS_SECRET`
/// (set) or `TURNSTILE_TICKET_KEYS` (the key set inline, for local runs), so they look at both.
const UNSET_ALTERNATIVES: &[(&str, &str)] = &[
    ("token-remover", "TOKEN_REMOVER_PROCESSORS_FILE"),
    ("authorizer", "TURNSTILE_TICKET_KEYS"),
    // The JWKS is found by OIDC discovery from the issuer; the URL only overrides it.
    ("authorizer", "TURNSTILE_CONNECT_JWKS_URL"),
    ("session-api", "TURNSTILE_TICKET_KEYS"),
];

/// Read but deliberately not set in AWS: Lambda provides `AWS_*` itself (region, credentials), and
/// `AWS_ENDPOINT_URL_DYNAMODB` is only for DynamoDB Local.
fn provided_by_lambda(var: &str) -> bool {
    var.starts_with("AWS_")
}

/// The DynamoDB actions each function performs on each table (read from the code; IAM authorises a
/// TransactWriteItems by the actions of its items: Put -> PutItem, Update -> UpdateItem, Delete ->
/// DeleteItem, ConditionCheck -> ConditionCheckItem). `None` as the table means the non-fungible
/// table's resource index. Update this when a function starts or stops an operation: the template
/// must then grant exactly the new set (`dynamo_actions_are_exactly_what_each_function_does`).
fn dynamo_actions(function: &str) -> Vec<(Option<TableKind>, &'static [&'static str])> {
    use TableKind::{Counters, NonFungibleTokens, Sessions, Tenants};
    // The tenant row, through TenantCache (1 GetItem when cold).
    let tenant_read = (Some(Tenants), &["dynamodb:GetItem"][..]);
    // shared::admission::release: the tenant count decremented (decision 0306).
    let release = (Some(Counters), &["dynamodb:UpdateItem"][..]);
    match function {
        // precheck: one BatchGetItem of the session and the tenant's counter.
        "authorizer" => vec![
            tenant_read,
            (Some(Sessions), &["dynamodb:BatchGetItem"]),
            (Some(Counters), &["dynamodb:BatchGetItem"]),
        ],
        // admission: UpdateItem on the tenant's counter, then on the session (no transaction); a
        // sharded tenant whose shard refused reads every shard (BatchGetItem, decision 1502).
        "connect" => vec![
            tenant_read,
            (Some(Sessions), &["dynamodb:UpdateItem"]),
            (
                Some(Counters),
                &["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
            ),
        ],
        // the connection out of the session's set, then the count down.
        "disconnect" => vec![(Some(Sessions), &["dynamodb:UpdateItem"]), release],
        // the message counter (UpdateItem on the session) and pruning (release with the session).
        "message" => vec![
            tenant_read,
            (Some(Sessions), &["dynamodb:UpdateItem"]),
            release,
        ],
        // PUT: UpdateItem (+ PutItem replacing an expired row); GET: GetItem; DELETE: DeleteItem;
        // then the count down for the connections that left with the row.
        "session-api" => vec![
            tenant_read,
            (
                Some(Sessions),
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                ],
            ),
            release,
        ],
        // a tombstone per stream record (PutItem), then the count down.
        "ttl-sweeper" => vec![(Some(Counters), &["dynamodb:PutItem", "dynamodb:UpdateItem"])],
        // reconcile: Scan the tenants (execution role even when isolated: no leading key), Query each
        // tenant's sessions, release gone ids (UpdateItem session + count), read and repair the
        // count (GetItem, UpdateItem).
        // A named tenant's row is read (GetItem) for its connectionShards; a sharded tenant's
        // shards are read with BatchGetItem and repaired in a TransactWriteItems of UpdateItems.
        "reconciler" => vec![
            (Some(Tenants), &["dynamodb:GetItem", "dynamodb:Scan"]),
            // the truth; releasing gone ids; deleting ended sessions left empty (decision 2208)
            (
                Some(Sessions),
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                ],
            ),
            (
                Some(Counters),
                &[
                    "dynamodb:BatchGetItem",
                    "dynamodb:GetItem",
                    "dynamodb:UpdateItem",
                ],
            ),
        ],
        // NonFungibleLimiter::remove_by_resource_id: PutItem of the ended marker, Query the
        // resource's partition and the resource index, then per token an UpdateItem of the ledger
        // item and a DeleteItem of the row.
        "token-remover" => vec![
            (None, &["dynamodb:Query"]),
            (
                Some(NonFungibleTokens),
                &[
                    "dynamodb:DeleteItem",
                    "dynamodb:PutItem",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                ],
            ),
        ],
        "decide-api" => crate::decide_template::dynamo_actions(),
        // its region's demand: the global limit's bucket item (the ledger's actions are
        // `LEDGER_ACTIONS`, on a table the catalogue does not hold)
        "region-rebalancer" => vec![(Some(TableKind::Buckets), &["dynamodb:GetItem"])],
        other => panic!("no DynamoDB action model for function {other}: add it here"),
    }
}

/// What the region rebalancer does on the region ledger (`shared::region::scheduled`): Query the
/// declarations and each limit's partition, GetItem a giver's outbox or a move, UpdateItem a lease
/// and report, a lowering, a raise, a reclaim or a prune, PutItem a move's record, DeleteItem a
/// finished move's record.
const LEDGER_ACTIONS: &[&str] = &[
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
];

/// A tenant-table action a function makes with its execution role even under isolation: the
/// authorizer reads the tenant row before it assumes the tenant role, so ids made up by anonymous
/// clients never reach STS.
fn unscoped_read(function: &str, table: &str, tenants_arn: &str, action: &str) -> bool {
    function == "authorizer" && table == tenants_arn && action == "dynamodb:GetItem"
}

/// The reconciler's cursor statement: every action under a `dynamodb:LeadingKeys` condition that
/// names exactly the cursor's key (decision 2205).
fn is_cursor_statement(s: &Value) -> bool {
    s["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
        == json!([shared::reconcile::budget::CURSOR_KEY])
}

/// Stream reads (the sweeper's event source mapping), checked by their own test.
const STREAM_ACTIONS: &[&str] = &[
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

// ------------------------------------------------------------------------------------------------
// Loading and evaluating the template.
// ------------------------------------------------------------------------------------------------

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn load_template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template.yaml");
    // Short forms in their long forms (`!Ref X` -> `{"Ref": X}`, `!GetAtt A.B` ->
    // `{"Fn::GetAtt": [A, B]}`, `!F x` -> `{"Fn::F": x}`): the local stack's reader.
    turnstile_local::template::to_json(&text).expect("parse template.yaml")
}

const STACK: &str = "turnstile";
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

/// The template under one set of parameter values.
pub(crate) struct Stack<'t> {
    t: &'t Value,
    /// `AWS::StackName` (the table names and prefixes derive from it).
    name: String,
    params: BTreeMap<String, String>,
    conditions: BTreeMap<String, bool>,
}

impl<'t> Stack<'t> {
    fn new(t: &'t Value, overrides: &[(&str, &str)]) -> Stack<'t> {
        Stack::named(t, STACK, overrides)
    }

    /// The template deployed as stack `name` (tests/integration/artifacts.rs: a fresh one per run).
    pub(crate) fn named(t: &'t Value, name: &str, overrides: &[(&str, &str)]) -> Stack<'t> {
        let mut params = BTreeMap::new();
        for (name, p) in t["Parameters"].as_object().unwrap() {
            let default = match &p["Default"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Null => panic!("parameter {name} has no default: `sam deploy` would prompt"),
                other => other.to_string(),
            };
            params.insert(name.clone(), default);
        }
        for (k, v) in overrides {
            assert!(params.contains_key(*k), "no parameter {k}");
            params.insert(k.to_string(), v.to_string());
        }
        let mut stack = Stack {
            t,
            name: name.to_string(),
            params,
            conditions: BTreeMap::new(),
        };
        // Conditions may refer to earlier ones; evaluate until all settle.
        let defs = t["Conditions"].as_object().unwrap();
        for _ in 0..defs.len() {
            for (name, def) in defs {
                if let Some(b) = stack.try_condition(def) {
                    stack.conditions.insert(name.clone(), b);
                }
            }
        }
        assert_eq!(
            stack.conditions.len(),
            defs.len(),
            "unresolvable conditions"
        );
        stack
    }

    fn try_condition(&self, v: &Value) -> Option<bool> {
        let (f, arg) = single(v)?;
        match f {
            "Condition" => self.conditions.get(arg.as_str()?).copied(),
            "Fn::Equals" => {
                let a = self.eval(&arg[0])?;
                let b = self.eval(&arg[1])?;
                Some(a == b)
            }
            "Fn::Not" => Some(!self.try_condition(&arg[0])?),
            "Fn::And" => arg
                .as_array()?
                .iter()
                .map(|c| self.try_condition(c))
                .collect::<Option<Vec<bool>>>()
                .map(|v| v.iter().all(|b| *b)),
            "Fn::Or" => arg
                .as_array()?
                .iter()
                .map(|c| self.try_condition(c))
                .collect::<Option<Vec<bool>>>()
                .map(|v| v.iter().any(|b| *b)),
            other => panic!("unsupported condition function {other}"),
        }
    }

    fn condition(&self, name: &str) -> bool {
        *self
            .conditions
            .get(name)
            .unwrap_or_else(|| panic!("no condition {name}"))
    }

    /// The resources that exist under these parameters, by logical id.
    fn resources(&self) -> BTreeMap<String, &'t Value> {
        self.t["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Condition"].as_str().is_none_or(|c| self.condition(c)))
            .map(|(k, r)| (k.clone(), r))
            .collect()
    }

    fn resource(&self, id: &str) -> &'t Value {
        let r = &self.t["Resources"][id];
        assert!(r.is_object(), "no resource {id}");
        r
    }

    fn exists(&self, id: &str) -> bool {
        self.resources().contains_key(id)
    }

    /// Evaluates intrinsics; `None` is `AWS::NoValue` (dropped from objects and arrays).
    fn eval(&self, v: &Value) -> Option<Value> {
        if let Some((f, arg)) = single(v) {
            return self.intrinsic(f, arg);
        }
        match v {
            Value::Object(m) => Some(Value::Object(
                m.iter()
                    .filter_map(|(k, v)| self.eval(v).map(|v| (k.clone(), v)))
                    .collect(),
            )),
            Value::Array(a) => Some(Value::Array(
                a.iter().filter_map(|v| self.eval(v)).collect(),
            )),
            other => Some(other.clone()),
        }
    }

    fn eval_str(&self, v: &Value) -> String {
        match self.eval(v) {
            Some(Value::String(s)) => s,
            other => panic!("{v} evaluates to {other:?}, not a string"),
        }
    }

    fn intrinsic(&self, f: &str, arg: &Value) -> Option<Value> {
        let s = |x: String| Some(Value::String(x));
        match f {
            "Ref" => self.reference(arg.as_str().unwrap()),
            "Fn::If" => {
                let branch = if self.condition(arg[0].as_str().unwrap()) {
                    &arg[1]
                } else {
                    &arg[2]
                };
                self.eval(branch)
            }
            "Fn::GetAtt" => {
                let id = arg[0].as_str().unwrap();
                let attr = arg[1].as_str().unwrap();
                let ty = self.logical_type(id);
                match (ty.as_str(), attr) {
                    ("AWS::IAM::Role", "Arn") => s(format!("arn:aws:iam::{ACCOUNT}:role/{id}")),
                    ("AWS::DynamoDB::Table" | "AWS::DynamoDB::GlobalTable", "Arn") => s(format!(
                        "arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}",
                        self.table_name(id)
                    )),
                    ("AWS::DynamoDB::Table", "StreamArn") => s(format!(
                        "arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}/stream/label",
                        self.table_name(id)
                    )),
                    (_, "Arn") => s(format!("arn:aws:x:{REGION}:{ACCOUNT}:{id}")),
                    _ => s(format!("{id}.{attr}")),
                }
            }
            "Fn::Sub" => {
                let (template, vars) = match arg {
                    Value::String(t) => (t.clone(), Map::new()),
                    Value::Array(a) => (
                        a[0].as_str().unwrap().to_string(),
                        a[1].as_object().unwrap().clone(),
                    ),
                    other => panic!("bad Fn::Sub {other}"),
                };
                let mut out = String::new();
                let mut rest = template.as_str();
                while let Some(start) = rest.find("${") {
                    out.push_str(&rest[..start]);
                    let end = rest[start..].find('}').unwrap() + start;
                    let name = &rest[start + 2..end];
                    let value = if let Some(v) = vars.get(name) {
                        self.eval_str(v)
                    } else if let Some((res, attr)) = name.split_once('.') {
                        self.eval_str(&json!({ "Fn::GetAtt": [res, attr] }))
                    } else {
                        self.eval_str(&json!({ "Ref": name }))
                    };
                    out.push_str(&value);
                    rest = &rest[end + 1..];
                }
                out.push_str(rest);
                s(out)
            }
            "Fn::Join" => {
                let sep = arg[0].as_str().unwrap();
                let parts = self.eval(&arg[1])?;
                let parts: Vec<String> = parts
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_string())
                    .collect();
                s(parts.join(sep))
            }
            "Fn::Split" => {
                let sep = arg[0].as_str().unwrap();
                let text = self.eval_str(&arg[1]);
                Some(Value::Array(text.split(sep).map(|p| json!(p)).collect()))
            }
            "Condition" => Some(Value::Bool(self.condition(arg.as_str().unwrap()))),
            "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" => {
                self.try_condition(&json!({ f: arg })).map(Value::Bool)
            }
            other => panic!("unsupported intrinsic {other}"),
        }
    }

    fn reference(&self, name: &str) -> Option<Value> {
        let s = |x: &str| Some(Value::String(x.to_string()));
        match name {
            "AWS::NoValue" => None,
            "AWS::StackName" => s(&self.name),
            "AWS::Region" => s(REGION),
            "AWS::AccountId" => s(ACCOUNT),
            "AWS::Partition" => s("aws"),
            "AWS::URLSuffix" => s("amazonaws.com"),
            _ if self.params.contains_key(name) => s(&self.params[name]),
            _ if self.logical_type(name).starts_with("AWS::DynamoDB::") => {
                s(&self.table_name(name))
            }
            _ => s(&format!("ref-{name}")),
        }
    }

    /// A resource's type, including the roles SAM generates (`{Function}Role`).
    fn logical_type(&self, id: &str) -> String {
        if let Some(ty) = self.t["Resources"][id]["Type"].as_str() {
            return ty.to_string();
        }
        if let Some(f) = id.strip_suffix("Role") {
            if self.t["Resources"][f]["Type"] == "AWS::Serverless::Function" {
                return "AWS::IAM::Role".into();
            }
        }
        panic!("reference to unknown resource {id}")
    }

    fn table_name(&self, id: &str) -> String {
        assert!(self.exists(id), "{id} is referenced but not created");
        self.eval_str(&self.resource(id)["Properties"]["TableName"])
    }

    /// A function's properties with `Globals.Function` merged in (maps merge, the function wins).
    pub(crate) fn function(&self, id: &str) -> Value {
        let mut merged = self.t["Globals"]["Function"].clone();
        merge(&mut merged, &self.resource(id)["Properties"]);
        merged
    }

    /// The environment a function gets: name -> evaluated value.
    pub(crate) fn environment(&self, id: &str) -> BTreeMap<String, String> {
        let f = self.function(id);
        let vars = self
            .eval(&f["Environment"]["Variables"])
            .unwrap_or(Value::Null);
        vars.as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("string env value").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Function logical id -> its crate (`Metadata.BuildProperties.Binary`).
    pub(crate) fn functions(&self) -> BTreeMap<String, String> {
        self.resources()
            .into_iter()
            .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
            .map(|(id, r)| {
                let bin = r["Metadata"]["BuildProperties"]["Binary"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{id} has no Metadata.BuildProperties.Binary"));
                (id, bin.to_string())
            })
            .collect()
    }

    fn function_id(&self, binary: &str) -> String {
        let ids: Vec<String> = self
            .functions()
            .into_iter()
            .filter(|(_, b)| b == binary)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids.len(), 1, "functions building {binary}: {ids:?}");
        ids[0].clone()
    }

    /// Every IAM statement of a function's execution role: its SAM `Policies` plus separate
    /// `AWS::IAM::Policy` resources attached to `{Function}Role`.
    fn role_statements(&self, function_id: &str) -> Vec<Value> {
        let role = format!("{function_id}Role");
        let mut out = Vec::new();
        let policies = self
            .eval(&self.function(function_id)["Policies"])
            .unwrap_or(json!([]));
        for p in policies.as_array().unwrap() {
            out.extend(p["Statement"].as_array().unwrap().iter().cloned());
        }
        for (_, r) in self.resources() {
            if r["Type"] == "AWS::IAM::Policy" {
                let p = self.eval(&r["Properties"]).unwrap();
                if p["Roles"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(format!("ref-{role}")))
                {
                    out.extend(
                        p["PolicyDocument"]["Statement"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .cloned(),
                    );
                }
            }
        }
        out
    }
}

impl Stack<'_> {
    /// The DynamoDB actions (stream reads aside) a function's execution role grants, by resource.
    fn dynamo_grants(&self, function_id: &str) -> BTreeMap<String, BTreeSet<String>> {
        let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        // The reconciler's cursor, confined to its one key, is checked on its own.
        for s in self
            .role_statements(function_id)
            .into_iter()
            .filter(|s| !is_cursor_statement(s))
        {
            let actions: Vec<String> = strings(&s["Action"])
                .into_iter()
                .filter(|a| a.starts_with("dynamodb:") && !STREAM_ACTIONS.contains(&a.as_str()))
                .collect();
            for r in strings(&s["Resource"]) {
                if !actions.is_empty() {
                    granted
                        .entry(r)
                        .or_default()
                        .extend(actions.iter().cloned());
                }
            }
        }
        granted
    }

    /// What `TenantRole` grants, by table (every statement under the one leading-key condition).
    fn tenant_role_grants(&self) -> BTreeMap<String, BTreeSet<String>> {
        let role = self
            .eval(&self.resource("TenantRole")["Properties"])
            .unwrap();
        let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in role["Policies"][0]["PolicyDocument"]["Statement"]
            .as_array()
            .unwrap()
        {
            for r in strings(&s["Resource"]) {
                granted.entry(r).or_default().extend(strings(&s["Action"]));
            }
        }
        granted
    }
}

/// `{"Ref": x}` / `{"Fn::If": x}` / `{"Condition": x}` -> (name, argument).
fn single(v: &Value) -> Option<(&str, &Value)> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    let (k, arg) = m.iter().next().unwrap();
    (k == "Ref" || k == "Condition" || k.starts_with("Fn::")).then_some((k.as_str(), arg))
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing)
                        if existing.is_object() && v.is_object() && single(v).is_none() =>
                    {
                        merge(existing, v)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        Value::Null => vec![],
        other => panic!("expected string(s), got {other}"),
    }
}

fn crates_in_functions_dir() -> BTreeSet<String> {
    std::fs::read_dir(root().join("functions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .map(|p| {
            let manifest = std::fs::read_to_string(p.join("Cargo.toml")).unwrap();
            let name = manifest
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .expect("package name");
            name.to_string()
        })
        .collect()
}

/// The parameter sets the checks run under: defaults, snake-case attributes, isolation off, JWT,
/// and every table pre-existing. Each IAM one names the backend roles `SessionCallerRole` trusts,
/// without which the template refuses to deploy.
fn variants() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    let mut all = base_variants();
    for (_, params) in &mut all {
        if !params.contains(&("SessionApiAuth", "JWT")) {
            params.push(("SessionCallerPrincipal", BACKEND_ROLES));
        }
    }
    all
}

fn base_variants() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        ("defaults", vec![]),
        ("snake", vec![("AttributeStyle", "snake")]),
        ("isolation off", vec![("TenantIsolation", "Disabled")]),
        (
            "jwt",
            vec![
                ("SessionApiAuth", "JWT"),
                ("JwtIssuer", "https://issuer.example.com"),
                ("JwtAudience", "turnstile"),
            ],
        ),
        // JWTs on `$connect` only (decision 2101): the session API stays on IAM.
        (
            "connect jwt",
            vec![
                ("JwtIssuer", "https://issuer.example.com"),
                ("JwtAudience", "turnstile"),
                ("SessionTenantClaim", "custom:tenantId"),
            ],
        ),
        (
            "existing tables",
            vec![
                ("TenantTableName", "acme-tenants"),
                ("SessionTableName", "acme-sessions"),
                (
                    "SessionTableStreamArn",
                    "arn:aws:dynamodb:us-east-1:123456789012:table/acme-sessions/stream/2024-01-01T00:00:00.000",
                ),
                ("CounterTableName", "acme-counters"),
                ("BucketTableName", "acme-buckets"),
                ("FungibleTableName", "acme-limiter-fungible-tokens"),
                ("LimitTableName", "acme-limiter-limits"),
                ("LimitServiceIndexName", "acme-limiter-limits-service-index"),
                ("NonFungibleTableName", "acme-limiter-non-fungible-tokens"),
                ("NonFungibleResourceIndexName", "acme-limiter-resource-index"),
                ("AttributeStyle", "snake"),
            ],
        ),
        // One limit across regions (decision 4200): the ledger created here, or another stack's.
        (
            "region ledger",
            vec![
                ("RegionLedger", "Create"),
                ("RegionLedgerReplicaRegions", "us-east-2,us-west-2"),
                ("RegionRebalanceRateMinutes", "5"),
            ],
        ),
        (
            "existing region ledger",
            vec![
                ("RegionLedger", "Existing"),
                ("RegionLedgerTableName", "acme-region-ledger"),
            ],
        ),
    ]
}

/// The parameters under which every function exists (the region rebalancer only with a ledger).
const ALL_FUNCTIONS: &[(&str, &str)] = &[
    ("RegionLedger", "Create"),
    ("RegionLedgerReplicaRegions", "us-east-2,us-west-2"),
];

fn table_resource_id(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Tenants => "TenantsTable",
        TableKind::Sessions => "SessionsTable",
        TableKind::Counters => "CountersTable",
        TableKind::Buckets => "BucketsTable",
        TableKind::FungibleTokens => "FungibleTokensTable",
        TableKind::Limits => "LimitsTable",
        TableKind::NonFungibleTokens => "NonFungibleTokensTable",
    }
}

fn arn_of_table(name: &str) -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}")
}

// ------------------------------------------------------------------------------------------------
// The checks.
// ------------------------------------------------------------------------------------------------

#[test]
fn every_function_crate_has_exactly_one_function_built_by_cargo_lambda() {
    let t = load_template();
    let stack = Stack::new(&t, ALL_FUNCTIONS);
    let crates = crates_in_functions_dir();
    assert_eq!(crates.len(), 10, "{crates:?}");
    // A single-region stack (the default) has no rebalancer, and nothing else changes.
    let single: BTreeSet<String> = Stack::new(&t, &[]).functions().into_values().collect();
    let mut without = crates.clone();
    without.remove("region-rebalancer");
    assert_eq!(single, without, "functions of a single-region stack");
    let built: BTreeSet<String> = stack.functions().into_values().collect();
    assert_eq!(
        built, crates,
        "functions in template.yaml vs crates in functions/"
    );
    for name in &crates {
        let id = stack.function_id(name);
        let r = stack.resource(&id);
        assert_eq!(r["Metadata"]["BuildMethod"], "rust-cargolambda", "{id}");
        let f = stack.function(&id);
        assert_eq!(f["Runtime"], "provided.al2023", "{id}");
        // The `Architecture` parameter (default arm64; `make test` builds x86_64 through `sam build`).
        assert_eq!(
            stack.eval(&f["Architectures"]),
            Some(json!(["arm64"])),
            "{id}"
        );
        let x86 = Stack::new(&t, &[ALL_FUNCTIONS, &[("Architecture", "x86_64")]].concat());
        assert_eq!(
            x86.eval(&x86.function(&id)["Architectures"]),
            Some(json!(["x86_64"])),
            "{id}"
        );
        assert_eq!(f["Handler"], "bootstrap", "{id}");
        assert_eq!(f["CodeUri"], ".", "{id}: one workspace, one target/");
        let log_group = stack.eval_str(&f["LoggingConfig"]["LogGroup"]);
        assert!(
            log_group.starts_with("ref-"),
            "{id} logs to a group with retention"
        );
        let group = stack.resource(log_group.trim_start_matches("ref-"));
        assert!(group["Properties"]["RetentionInDays"].is_object());
        for alarm in ["Errors", "Throttles"] {
            let found = stack.resources().values().any(|a| {
                a["Type"] == "AWS::CloudWatch::Alarm"
                    && a["Properties"]["MetricName"] == alarm
                    && a["Properties"]["Dimensions"][0]["Value"] == json!({ "Ref": id })
            });
            assert!(found, "{id} has no {alarm} alarm");
        }
    }
}

#[test]
fn every_table_matches_its_definition_in_shared() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        // The names the functions get are the names of the tables created (or given).
        let env = stack.environment(&stack.function_id("connect"));
        let vars = Vars::from_pairs(env.clone());
        let names = TableNames::from_vars(&vars).unwrap();
        let style = AttributeStyle::from_vars(&vars).unwrap();
        let existing = variant == "existing tables";
        if !existing {
            assert_eq!(
                names,
                TableNames::with_prefix(&format!("{STACK}-")),
                "{variant}"
            );
        } else {
            assert_eq!(names.tenants, "acme-tenants");
            assert_eq!(names.resource_index, "acme-limiter-resource-index");
        }
        let created: BTreeSet<String> = stack
            .resources()
            .into_iter()
            .filter(|(_, r)| r["Type"] == "AWS::DynamoDB::Table")
            .map(|(id, _)| id)
            .collect();
        if existing {
            assert!(created.is_empty(), "{variant}: {created:?} created anyway");
            continue;
        }
        let expected: BTreeSet<String> = TableKind::ALL
            .iter()
            .map(|k| table_resource_id(*k).to_string())
            .collect();
        assert_eq!(created, expected, "{variant}");

        for def in catalog(&names, style) {
            let id = table_resource_id(def.kind);
            let r = stack.resource(id);
            let p = stack.eval(&r["Properties"]).unwrap();
            let ctx = format!("{variant}: {id}");
            assert_eq!(p["TableName"], def.name.as_str(), "{ctx}");
            assert_eq!(p["BillingMode"], "PAY_PER_REQUEST", "{ctx}");
            assert_eq!(
                p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], true,
                "{ctx}"
            );
            assert_eq!(r["DeletionPolicy"], "Retain", "{ctx}");

            let key_schema = |pk: &shared::table::KeyAttr, sk: Option<&shared::table::KeyAttr>| {
                let mut v = vec![json!({"AttributeName": pk.name, "KeyType": "HASH"})];
                if let Some(sk) = sk {
                    v.push(json!({"AttributeName": sk.name, "KeyType": "RANGE"}));
                }
                Value::Array(v)
            };
            assert_eq!(
                p["KeySchema"],
                key_schema(&def.partition_key, def.sort_key.as_ref()),
                "{ctx}"
            );

            let mut want_attrs = BTreeMap::new();
            let mut add = |a: &shared::table::KeyAttr| {
                let ty = match a.ty {
                    AttrType::S => "S",
                    AttrType::N => "N",
                };
                want_attrs.insert(a.name.to_string(), ty.to_string());
            };
            add(&def.partition_key);
            def.sort_key.iter().for_each(&mut add);
            for ix in &def.indexes {
                add(&ix.partition_key);
                ix.sort_key.iter().for_each(&mut add);
            }
            let got_attrs: BTreeMap<String, String> = p["AttributeDefinitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    (
                        a["AttributeName"].as_str().unwrap().to_string(),
                        a["AttributeType"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            assert_eq!(got_attrs, want_attrs, "{ctx}: attribute definitions");

            let want_gsis: Vec<Value> = def
                .indexes
                .iter()
                .map(|ix| {
                    json!({
                        "IndexName": ix.name,
                        "KeySchema": key_schema(&ix.partition_key, ix.sort_key.as_ref()),
                        "Projection": {"ProjectionType": "ALL"},
                    })
                })
                .collect();
            let got_gsis = p["GlobalSecondaryIndexes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert_eq!(got_gsis, want_gsis, "{ctx}: indexes");

            match def.ttl_attribute {
                Some(attr) => assert_eq!(
                    p["TimeToLiveSpecification"],
                    json!({"AttributeName": attr, "Enabled": true}),
                    "{ctx}: TTL"
                ),
                None => assert!(p["TimeToLiveSpecification"].is_null(), "{ctx}: no TTL"),
            }
            match def.stream {
                Some(view) => assert_eq!(
                    p["StreamSpecification"],
                    json!({"StreamViewType": view}),
                    "{ctx}: stream"
                ),
                None => assert!(p["StreamSpecification"].is_null(), "{ctx}: no stream"),
            }
        }
    }
}

#[test]
fn every_variable_a_function_reads_is_set_on_it_and_nothing_else_is() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        for (id, function) in stack.functions() {
            let env = stack.environment(&id);
            let (vars, log) = Vars::from_pairs(env.clone()).recording();
            let mut readers: Vec<(&str, Reader)> = COMMON_READERS.to_vec();
            readers.extend(function_readers(&function));
            for (name, read) in &readers {
                if let Err(e) = read(&vars) {
                    panic!("{variant}: {function}: {name} fails on the template's values: {e}");
                }
            }
            let read = log.names();
            let set: BTreeSet<String> = env.keys().cloned().collect();
            let missing: Vec<&String> = read
                .iter()
                .filter(|v| !set.contains(*v) && !provided_by_lambda(v))
                .filter(|v| !UNSET_ALTERNATIVES.contains(&(function.as_str(), v.as_str())))
                .collect();
            assert!(
                missing.is_empty(),
                "{variant}: {function} ({id}) reads {missing:?} but template.yaml does not set them"
            );
            let awaiting: BTreeSet<&str> = AWAITING_READER
                .iter()
                .filter(|(f, _)| *f == function)
                .map(|(_, v)| *v)
                .collect();
            let unread: Vec<&String> = set
                .iter()
                .filter(|v| !read.contains(*v) && !awaiting.contains(v.as_str()))
                .collect();
            assert!(
                unread.is_empty(),
                "{variant}: template.yaml sets {unread:?} on {function}, which no reader of it reads"
            );
            for v in &awaiting {
                assert!(
                    !read.contains(*v),
                    "{function} now reads {v}: remove it from AWAITING_READER"
                );
                assert!(set.contains(*v), "{function}: awaited {v} is not set");
            }
            // TENANT_ROLE_ARN: the role when isolation is on, empty (= execution role) when off.
            if function == "decide-api" {
                crate::decide_template::check_tenant_role_var(&env, stack.condition("IsolationOn"));
            } else if TENANT_FUNCTIONS.contains(&function.as_str()) {
                let arn = &env[TENANT_ROLE_ARN_VAR];
                let cfg = IsolationConfig::from_vars(&vars).unwrap();
                if stack.condition("IsolationOn") {
                    assert_eq!(arn, &format!("arn:aws:iam::{ACCOUNT}:role/TenantRole"));
                    assert_eq!(cfg.tenant_role_arn.as_deref(), Some(arn.as_str()));
                } else {
                    assert_eq!(cfg.tenant_role_arn, None, "{variant}: {function}");
                }
            } else {
                assert!(!env.contains_key(TENANT_ROLE_ARN_VAR), "{function}");
            }
        }
    }
}

/// `StringLike` as IAM evaluates it: `*` any run of characters, `?` any one; case-sensitive.
fn string_like(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi, mut star, mut mark) = (0, 0, None, 0);
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Evaluates one Allow statement's `Condition` for a request with these leading keys and this
/// principal tag; only the operators the tenant role uses are supported (others fail the test).
fn condition_allows(condition: &Value, tenant_tag: &str, leading_keys: &[&str]) -> bool {
    let subst = |p: &str| p.replace("${aws:PrincipalTag/tenantId}", tenant_tag);
    condition.as_object().unwrap().iter().all(|(op, kv)| {
        let patterns: Vec<String> = strings(&kv["dynamodb:LeadingKeys"])
            .iter()
            .map(|p| subst(p))
            .collect();
        match op.as_str() {
            "ForAllValues:StringLike" => leading_keys
                .iter()
                .all(|k| patterns.iter().any(|p| string_like(p, k))),
            "ForAllValues:StringEquals" => {
                leading_keys.iter().all(|k| patterns.iter().any(|p| p == k))
            }
            "Null" => {
                let want_null = patterns == ["true"];
                leading_keys.is_empty() == want_null
            }
            other => panic!("tenant role uses condition operator {other}, unknown to this test"),
        }
    })
}

#[test]
fn the_tenant_role_allows_exactly_the_keys_the_key_guard_allows() {
    let t = load_template();
    let stack = Stack::new(&t, &[]);
    let role = stack
        .eval(&stack.resource("TenantRole")["Properties"])
        .unwrap();

    // Who may assume it: the tenant functions' execution roles, with a tenantId tag and no other.
    let trust = &role["AssumeRolePolicyDocument"]["Statement"];
    assert_eq!(trust.as_array().unwrap().len(), 1);
    let principals: BTreeSet<String> = strings(&trust[0]["Principal"]["AWS"]).into_iter().collect();
    let want: BTreeSet<String> = TENANT_FUNCTIONS
        .iter()
        .map(|f| format!("arn:aws:iam::{ACCOUNT}:role/{}Role", stack.function_id(f)))
        .collect();
    assert_eq!(principals, want);
    let mut actions = strings(&trust[0]["Action"]);
    actions.sort();
    assert_eq!(actions, ["sts:AssumeRole", "sts:TagSession"]);
    assert_eq!(
        trust[0]["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
        json!(["tenantId"])
    );
    assert_eq!(
        role["MaxSessionDuration"],
        shared::isolation::SESSION_DURATION.as_secs()
    );

    // What it reaches: the three WebSocket tables, by leading key only, never Scan. One statement
    // per table (each with only the actions the functions perform on that table), all under the
    // same leading-key condition.
    let statements = role["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap();
    assert!(!statements.is_empty());
    let mut resources: BTreeSet<String> = BTreeSet::new();
    for s in statements {
        assert_eq!(s["Effect"], "Allow");
        let actions = strings(&s["Action"]);
        assert!(
            !actions
                .iter()
                .any(|a| a.contains("Scan") || a.contains('*')),
            "{actions:?}"
        );
        assert_eq!(
            s["Condition"], statements[0]["Condition"],
            "every statement has the same leading-key condition"
        );
        resources.extend(strings(&s["Resource"]));
    }
    let names = TableNames::with_prefix(&format!("{STACK}-"));
    let want: BTreeSet<String> = [&names.tenants, &names.sessions, &names.counters]
        .iter()
        .map(|n| arn_of_table(n))
        .collect();
    assert_eq!(resources, want);
    let s = &statements[0];

    let condition = &s["Condition"];
    let tenants = ["ab", "abc", "a", "a.b", "x-1"];
    let keys = [
        "ab",
        "ab:",
        "ab:minute:1700000040",
        "ab:s1:minute:1700000040",
        "ab:conn:L0SM9cOFvHcCIhw=",
        "abc",
        "abc:minute:1700000040",
        "a",
        "a:b",
        "a.b",
        "a.b:x",
        "aXb:x",
        "x-1",
        "x-1:z",
        "x-10",
        ":ab",
        "",
    ];
    for tenant in tenants {
        let id = TenantId::parse(tenant).unwrap();
        for key in keys {
            assert_eq!(
                condition_allows(condition, tenant, &[key]),
                key_in_tenant(&id, key),
                "IAM and the key guard disagree: tenant {tenant:?}, key {key:?}"
            );
        }
        // A request's keys must all belong to the tenant; a request without leading keys (Scan)
        // is refused.
        let own = format!("{tenant}:minute:1");
        assert!(condition_allows(condition, tenant, &[tenant, &own]));
        assert!(!condition_allows(condition, tenant, &[tenant, "zzz"]));
        assert!(!condition_allows(condition, tenant, &[]));
    }
}

#[test]
fn execution_roles_are_least_privilege() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let env = stack.environment(&stack.function_id("connect"));
        let names = TableNames::from_vars(&Vars::from_pairs(env)).unwrap();
        let tenant_tables: BTreeSet<String> = [&names.tenants, &names.sessions, &names.counters]
            .iter()
            .map(|n| arn_of_table(n))
            .collect();
        let api = "ref-WebSocketApi";
        for (id, function) in stack.functions() {
            let statements = stack.role_statements(&id);
            let ctx = format!("{variant}: {function}");
            let mut touched_tenant_tables = false;
            for s in &statements {
                assert_eq!(s["Effect"], "Allow", "{ctx}");
                if is_cursor_statement(s) {
                    assert_eq!(function, "reconciler", "{ctx}: the reconcile cursor");
                    continue;
                }
                let actions = strings(&s["Action"]);
                let resources = strings(&s["Resource"]);
                for a in &actions {
                    assert!(!a.ends_with('*'), "{ctx}: wildcard action {a}");
                }
                // One Scan in the stack: the reconciler listing the tenant ids, and nothing else
                // in that statement (a Scan has no leading key for TenantRole to scope).
                if actions.iter().any(|a| a == "dynamodb:Scan") {
                    assert_eq!(function, "reconciler", "{ctx}: Scan");
                    assert_eq!(actions, ["dynamodb:Scan"], "{ctx}");
                    assert_eq!(resources, [arn_of_table(&names.tenants)], "{ctx}");
                    continue;
                }
                if resources.iter().any(|r| r == "*") {
                    assert_eq!(
                        actions,
                        ["dynamodb:ListStreams"],
                        "{ctx}: only ListStreams on *"
                    );
                }
                if actions.iter().any(|a| a == "execute-api:ManageConnections") {
                    assert_eq!(actions.len(), 1, "{ctx}");
                    for r in &resources {
                        assert!(
                            r.starts_with(&format!(
                                "arn:aws:execute-api:{REGION}:{ACCOUNT}:{api}/"
                            )),
                            "{ctx}: ManageConnections beyond the WebSocket API: {r}"
                        );
                    }
                    assert!(
                        ["message", "session-api", "ttl-sweeper", "reconciler"]
                            .contains(&function.as_str()),
                        "{ctx}: posts to connections"
                    );
                }
                if resources.iter().any(|r| tenant_tables.contains(r)) {
                    touched_tenant_tables = true;
                }
            }
            let isolated = stack.condition("IsolationOn");
            let tenant_fn = TENANT_FUNCTIONS.contains(&function.as_str());
            assert_eq!(
                touched_tenant_tables,
                tenant_fn && (!isolated || function == "authorizer"),
                "{ctx}: direct access to tenant tables only without isolation (and the \
                 authorizer's tenant-row read)"
            );
            let can_assume = statements.iter().any(|s| {
                strings(&s["Action"]).contains(&"sts:AssumeRole".to_string())
                    && strings(&s["Resource"])
                        == [format!("arn:aws:iam::{ACCOUNT}:role/TenantRole")]
            });
            assert_eq!(
                can_assume,
                tenant_fn && isolated,
                "{ctx}: assumes TenantRole"
            );
        }
    }
}

/// Only the reconciler may touch its cursor, an item of the tenant table it reads and writes once a
/// run (GetItem, PutItem), and nothing else through that statement, in every variant.
#[test]
fn the_reconcile_cursor_is_one_key_of_the_tenant_table() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let env = stack.environment(&stack.function_id("connect"));
        let names = TableNames::from_vars(&Vars::from_pairs(env)).unwrap();
        for (id, function) in stack.functions() {
            let cursor: Vec<Value> = stack
                .role_statements(&id)
                .into_iter()
                .filter(is_cursor_statement)
                .collect();
            let ctx = format!("{variant}: {function}");
            if function != "reconciler" {
                assert!(cursor.is_empty(), "{ctx}: the reconcile cursor");
                continue;
            }
            assert_eq!(cursor.len(), 1, "{ctx}");
            assert_eq!(
                strings(&cursor[0]["Action"]),
                ["dynamodb:GetItem", "dynamodb:PutItem"],
                "{ctx}"
            );
            assert_eq!(
                strings(&cursor[0]["Resource"]),
                [arn_of_table(&names.tenants)],
                "{ctx}"
            );
        }
    }
}

#[test]
fn dynamo_actions_are_exactly_what_each_function_does() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let env = stack.environment(&stack.function_id("connect"));
        let names = TableNames::from_vars(&Vars::from_pairs(env)).unwrap();
        let arn = |kind: Option<TableKind>| match kind {
            Some(TableKind::Tenants) => arn_of_table(&names.tenants),
            Some(TableKind::Sessions) => arn_of_table(&names.sessions),
            Some(TableKind::Counters) => arn_of_table(&names.counters),
            Some(TableKind::NonFungibleTokens) => arn_of_table(&names.non_fungible_tokens),
            Some(TableKind::Buckets) => arn_of_table(&names.buckets),
            Some(TableKind::FungibleTokens) => arn_of_table(&names.fungible_tokens),
            Some(TableKind::Limits) => arn_of_table(&names.limits),
            None => format!(
                "{}/index/{}",
                arn_of_table(&names.non_fungible_tokens),
                names.resource_index
            ),
        };
        let tenant_tables: BTreeSet<String> =
            [TableKind::Tenants, TableKind::Sessions, TableKind::Counters]
                .into_iter()
                .map(|k| arn(Some(k)))
                .collect();
        let isolated = stack.condition("IsolationOn");
        let tenants_arn = arn(Some(TableKind::Tenants));
        // What TenantRole grants, per table (by leading key).
        let role_actions: BTreeMap<String, BTreeSet<String>> = if isolated {
            stack.tenant_role_grants()
        } else {
            assert!(
                !stack.exists("TenantRole"),
                "{variant}: TenantRole without isolation"
            );
            BTreeMap::new()
        };
        let mut tenant_needs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, function) in stack.functions() {
            let ctx = format!("{variant}: {function}");
            let mut need: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (kind, actions) in dynamo_actions(&function) {
                let e = need.entry(arn(kind)).or_default();
                e.extend(actions.iter().map(|a| a.to_string()));
            }
            if function == "region-rebalancer" {
                let ledger = &stack.environment(&id)[shared::region::ledger::TABLE_VAR];
                let e = need.entry(arn_of_table(ledger)).or_default();
                e.extend(LEDGER_ACTIONS.iter().map(|a| a.to_string()));
            }
            let granted = stack.dynamo_grants(&id);
            if isolated {
                // Tenant rows only through TenantRole, which must allow all of it — except a Scan
                // (the reconciler listing tenants), which has no leading key for TenantRole to
                // scope and so stays on the execution role.
                for (table, actions) in need.iter_mut() {
                    if tenant_tables.contains(table) {
                        let (unscoped, scoped): (BTreeSet<String>, BTreeSet<String>) =
                            actions.iter().cloned().partition(|a| {
                                a == "dynamodb:Scan"
                                    || unscoped_read(&function, table, &tenants_arn, a)
                            });
                        let granted = role_actions.get(table).cloned().unwrap_or_default();
                        let missing: Vec<&String> = scoped.difference(&granted).collect();
                        assert!(
                            missing.is_empty(),
                            "{ctx}: TenantRole lacks {missing:?} on {table}"
                        );
                        tenant_needs
                            .entry(table.clone())
                            .or_default()
                            .extend(scoped);
                        *actions = unscoped;
                    }
                }
                need.retain(|_, actions| !actions.is_empty());
                if function == "decide-api" {
                    // Its own tenant role: tests/integration/decide_template.rs.
                    need.clear();
                }
            }
            assert_eq!(
                granted, need,
                "{ctx}: the execution role's DynamoDB actions (left) vs what the code does (right)"
            );
        }
        if isolated {
            assert_eq!(
                role_actions, tenant_needs,
                "{variant}: TenantRole grants, table by table, exactly what the functions do on \
                 tenant rows (left: the role, right: the union of the functions' actions)"
            );
        }
    }
}

/// A session policy as (resource -> actions), with its shape checked: Allow statements only, no
/// condition (the role holds the leading-key one), no wildcard, no `Not*` element.
fn session_policy_grants(policy: &str, ctx: &str) -> BTreeMap<String, BTreeSet<String>> {
    assert!(
        policy.chars().count() <= shared::isolation::policy::MAX_SESSION_POLICY_CHARS,
        "{ctx}: STS refuses a session policy over 2048 characters"
    );
    let p: Value = serde_json::from_str(policy).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(p["Version"], "2012-10-17", "{ctx}");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in p["Statement"].as_array().unwrap() {
        let keys: BTreeSet<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["Action", "Effect", "Resource"].into(), "{ctx}: {s}");
        assert_eq!(s["Effect"], "Allow", "{ctx}");
        let actions = strings(&s["Action"]);
        assert!(actions.iter().all(|a| !a.contains('*')), "{ctx}: {s}");
        for r in strings(&s["Resource"]) {
            assert!(!r.contains('*'), "{ctx}: {r}");
            out.entry(r).or_default().extend(actions.iter().cloned());
        }
    }
    out
}

/// The session policy function `function` sends with its AssumeRole, built as its process builds
/// it: `Deps` from its environment in the template, named as `serve` names it (its crate).
fn session_policy_of(stack: &Stack, function: &'static str) -> Option<String> {
    let env = stack.environment(&stack.function_id(function));
    let vars = Vars::from_pairs(env);
    let mut deps = shared::Deps::local(
        "http://127.0.0.1:9",
        TableNames::from_vars(&vars).unwrap(),
        shared::clock::system(),
        None,
    );
    assert_eq!(
        deps.dynamo.config().region().map(|r| r.to_string()),
        Some(REGION.to_string()),
        "the template stack's region"
    );
    deps.vars = vars;
    let sdk = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let clients = TenantClients::from_deps_with(&deps.for_function(function), &sdk)
        .unwrap_or_else(|e| panic!("{function}: {e}"));
    clients.session_policy().map(str::to_string)
}

/// With `TenantIsolation=Enabled` a function's tenant credentials allow what `TenantRole` allows
/// *and* its session policy allows (decision 2202). Per function, that must be exactly what its
/// execution role is granted on the tenant tables with `TenantIsolation=Disabled` (which
/// `dynamo_actions_are_exactly_what_each_function_does` holds to the model of the code), less what
/// stays on the execution role (the reconciler's Scan, the authorizer's tenant-row read); and the
/// policy itself names exactly that, nothing the role lacks.
#[test]
fn tenant_credentials_allow_exactly_what_each_function_does() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        if !stack.condition("IsolationOn") {
            continue;
        }
        let mut without = params.clone();
        without.push(("TenantIsolation", "Disabled"));
        let without = Stack::new(&t, &without);
        let env = stack.environment(&stack.function_id("connect"));
        let names = TableNames::from_vars(&Vars::from_pairs(env)).unwrap();
        let tenant_tables: BTreeSet<String> = [&names.tenants, &names.sessions, &names.counters]
            .iter()
            .map(|n| arn_of_table(n))
            .collect();
        let role = stack.tenant_role_grants();
        for function in TENANT_FUNCTIONS {
            let ctx = format!("{variant}: {function}");
            let mut own = without.dynamo_grants(&without.function_id(function));
            own.retain(|table, _| tenant_tables.contains(table));
            // Made with the execution role even under isolation: the reconciler's Scan, the
            // authorizer's tenant-row read.
            let tenants_arn = arn_of_table(&names.tenants);
            for (table, actions) in own.iter_mut() {
                actions.retain(|a| {
                    a != "dynamodb:Scan" && !unscoped_read(function, table, &tenants_arn, a)
                });
            }
            own.retain(|_, actions| !actions.is_empty());

            let policy = session_policy_of(&stack, function);
            // What the tenant credentials allow: the role, cut down by the session policy if any.
            let allowed: BTreeMap<String, BTreeSet<String>> = match &policy {
                None => role.clone(),
                Some(p) => {
                    let session = session_policy_grants(p, &ctx);
                    assert_eq!(
                        session, own,
                        "{ctx}: the session policy (left) vs the execution role without isolation"
                    );
                    role.iter()
                        .map(|(table, actions)| {
                            let s = session.get(table).cloned().unwrap_or_default();
                            (table.clone(), actions.intersection(&s).cloned().collect())
                        })
                        .filter(|(_, a): &(String, BTreeSet<String>)| !a.is_empty())
                        .collect()
                }
            };
            assert_eq!(
                allowed, own,
                "{ctx}: what its tenant credentials allow (left) vs what its execution role is \
                 granted without isolation (right)"
            );
        }
    }
}

/// `serve`'s name is the key of a function's session policy: each `main.rs` passes its crate's
/// name, the tenant-facing functions (and only they) have a line in `TENANT_ACCESS`, and those
/// are the functions the template gives `TENANT_ROLE_ARN`.
#[test]
fn each_function_serves_under_its_crate_name_which_keys_its_tenant_access() {
    use shared::isolation::policy::{tenant_access, TENANT_ACCESS};
    let t = load_template();
    let stack = Stack::new(&t, ALL_FUNCTIONS);
    for (id, function) in stack.functions() {
        let dir = root().join("functions").join(&function);
        let main = std::fs::read_to_string(dir.join("src/main.rs")).unwrap();
        let served: Vec<&str> = main
            .split("shared::function::serve(\"")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap())
            .collect();
        assert_eq!(
            served,
            [function.as_str()],
            "{id}: functions/{function}/src/main.rs"
        );
        let tenant_fn = TENANT_FUNCTIONS.contains(&function.as_str()) || function == "decide-api";
        assert_eq!(tenant_access(&function).is_some(), tenant_fn, "{function}");
        assert_eq!(
            stack.environment(&id).contains_key(TENANT_ROLE_ARN_VAR),
            tenant_fn,
            "{function}"
        );
    }
    assert_eq!(
        TENANT_ACCESS.len(),
        TENANT_FUNCTIONS.len() + shared::isolation::policy::OWN_TENANT_ROLE.len()
    );
}

/// `execute-api:ManageConnections` names the HTTP method in its resource
/// (`{api}/{stage}/{METHOD}/@connections/*`): each function may use only the methods it calls —
/// `Gateway::post` (POST), `close` / `close_each` / `close_all` (DELETE), `is_live` (GET).
#[test]
fn manage_connections_allows_only_the_methods_each_function_calls() {
    let methods = |function: &str| -> &[&str] {
        match function {
            // the echo, refusals and fan-out; closes a sender whose tenant or session is gone
            "message" => &["DELETE", "POST"],
            // DELETE /session and the replacement of an expired session close its sockets
            "session-api" => &["DELETE"],
            // a TTL-deleted session's sockets are closed
            "ttl-sweeper" => &["DELETE"],
            // probes whether a counted connection is still open; closes the open sockets of
            // ended sessions (decision 2208)
            "reconciler" => &["DELETE", "GET"],
            _ => &[],
        }
    };
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let stage = &stack.params["WebSocketStageName"];
        for (id, function) in stack.functions() {
            let mut granted: BTreeSet<String> = BTreeSet::new();
            for s in stack.role_statements(&id) {
                if strings(&s["Action"]).contains(&"execute-api:ManageConnections".to_string()) {
                    granted.extend(strings(&s["Resource"]));
                }
            }
            let want: BTreeSet<String> = methods(&function)
                .iter()
                .map(|m| {
                    format!(
                        "arn:aws:execute-api:{REGION}:{ACCOUNT}:ref-WebSocketApi/{stage}/{m}/@connections/*"
                    )
                })
                .collect();
            assert_eq!(granted, want, "{variant}: {function}'s ManageConnections");
        }
    }
}

#[test]
fn the_sweeper_gets_only_ttl_deletions_with_partial_batch_failures() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let m = stack
            .eval(&stack.resource("TtlSweeperStreamMapping")["Properties"])
            .unwrap();
        assert_eq!(m["FunctionName"], "ref-TtlSweeperFunction");
        let stream = m["EventSourceArn"].as_str().unwrap();
        assert!(stream.contains("/stream/"), "{variant}: {stream}");
        let filters = m["FilterCriteria"]["Filters"].as_array().unwrap();
        assert_eq!(filters.len(), 1);
        let pattern: Value = serde_json::from_str(filters[0]["Pattern"].as_str().unwrap()).unwrap();
        assert_eq!(
            pattern,
            json!({"eventName": ["REMOVE"],
                   "userIdentity": {"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]}})
        );
        assert_eq!(
            m["FunctionResponseTypes"],
            json!(["ReportBatchItemFailures"])
        );
        assert_eq!(m["BisectBatchOnFunctionError"], true);
        let retries = m["MaximumRetryAttempts"].as_i64().unwrap();
        assert!((0..=10).contains(&retries), "bounded retries: {retries}");
        assert_eq!(
            m["DestinationConfig"]["OnFailure"]["Destination"],
            "arn:aws:x:us-east-1:123456789012:TtlSweeperFailureQueue"
        );
        // The sweeper may read exactly that stream.
        let reads_stream = stack.role_statements("TtlSweeperFunction").iter().any(|s| {
            strings(&s["Action"]).contains(&"dynamodb:GetRecords".to_string())
                && strings(&s["Resource"]) == [stream.to_string()]
        });
        assert!(reads_stream, "{variant}");
    }
}

#[test]
fn the_apis_rule_and_outputs_are_wired() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let res = stack.resources();
        let props = |id: &str| stack.eval(&res[id]["Properties"]).unwrap();

        let auth = props("ConnectAuthorizer");
        assert_eq!(auth["AuthorizerType"], "REQUEST");
        // No identity source: the credential may be in the query or the subprotocol header, and
        // an identity source would make API Gateway answer 401 when it is not where it names.
        assert_eq!(auth["IdentitySource"], Value::Null);
        assert!(auth["AuthorizerUri"]
            .as_str()
            .unwrap()
            .contains("AuthorizerFunction"));

        let routes: BTreeMap<String, Value> = res
            .iter()
            .filter(|(_, r)| r["Type"] == "AWS::ApiGatewayV2::Route")
            .map(|(id, _)| {
                let p = props(id);
                (p["RouteKey"].as_str().unwrap().to_string(), p)
            })
            .collect();
        let keys: BTreeSet<&str> = routes.keys().map(String::as_str).collect();
        let want: BTreeSet<&str> = [
            "$connect",
            "$disconnect",
            "$default",
            "PUT /session",
            "GET /session",
            "DELETE /session",
            "POST /session/ticket",
            "ANY /v1/{proxy+}",
        ]
        .into();
        assert_eq!(keys, want, "{variant}");
        assert_eq!(routes["$connect"]["AuthorizationType"], "CUSTOM");
        assert_eq!(routes["$connect"]["AuthorizerId"], "ref-ConnectAuthorizer");
        let jwt = stack.condition("UseJwt");
        for k in [
            "PUT /session",
            "GET /session",
            "DELETE /session",
            "POST /session/ticket",
        ] {
            let r = &routes[k];
            assert_eq!(r["ApiId"], "ref-SessionHttpApi");
            assert_eq!(
                r["AuthorizationType"],
                if jwt { "JWT" } else { "AWS_IAM" },
                "{variant}"
            );
            assert_eq!(r["AuthorizerId"].is_string(), jwt, "{variant}");
        }
        assert!(res.contains_key("SessionJwtAuthorizer") == jwt);
        assert!(res.contains_key("WebSocketDeployment") && res.contains_key("WebSocketStage"));
        assert_eq!(
            props("WebSocketStage")["DeploymentId"],
            "ref-WebSocketDeployment"
        );

        // Every function with an event source may be invoked by it, and only by it.
        let permissions: BTreeMap<String, String> = res
            .iter()
            .filter(|(_, r)| r["Type"] == "AWS::Lambda::Permission")
            .map(|(id, _)| {
                let p = props(id);
                (
                    p["FunctionName"].as_str().unwrap().to_string(),
                    p["Principal"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for (f, principal) in [
            ("AuthorizerFunction", "apigateway.amazonaws.com"),
            ("ConnectFunction", "apigateway.amazonaws.com"),
            ("DisconnectFunction", "apigateway.amazonaws.com"),
            ("MessageFunction", "apigateway.amazonaws.com"),
            ("SessionApiFunction", "apigateway.amazonaws.com"),
            ("TokenRemoverFunction", "events.amazonaws.com"),
        ] {
            assert_eq!(
                permissions.get(&format!("ref-{f}")).map(String::as_str),
                Some(principal),
                "{f}"
            );
        }

        let rule = props("TokenRemoverRule");
        let pattern: Value = serde_json::from_str(rule["EventPattern"].as_str().unwrap()).unwrap();
        assert_eq!(pattern["source"], json!(["aws.emr"]));
        assert_eq!(pattern["detail-type"], json!(["EMR Cluster State Change"]));
        assert_eq!(
            rule["Targets"][0]["Arn"],
            "arn:aws:x:us-east-1:123456789012:TokenRemoverFunction"
        );

        let outputs: BTreeSet<&str> = t["Outputs"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for o in [
            "WebSocketUrl",
            "SessionApiUrl",
            "TenantTable",
            "SessionTable",
            "CounterTable",
            "BucketTable",
            "FungibleTable",
            "LimitTable",
            "NonFungibleTable",
        ] {
            assert!(outputs.contains(o), "output {o}");
        }
        let ws = stack.eval_str(&t["Outputs"]["WebSocketUrl"]["Value"]);
        assert_eq!(
            ws,
            "wss://ref-WebSocketApi.execute-api.us-east-1.amazonaws.com/live"
        );
    }
}

/// What API Gateway invokes a function for, and the `execute-api` ARN it presents to Lambda as the
/// invocation's source: one per route (and per method of an `ANY` route), and one per Lambda
/// authorizer.
struct Invocation {
    /// The API's logical id, its route key or `authorizer {id}`, for messages.
    what: String,
    /// Logical id of the function invoked.
    function: String,
    source_arn: String,
}

/// The `execute-api` ARN prefix of one API (`arn:aws:execute-api:{region}:{account}:{api id}`).
fn execute_api_arn(api: &str) -> String {
    format!("arn:aws:execute-api:{REGION}:{ACCOUNT}:{api}")
}

/// A concrete request path for a route's path: `{param}` -> a value, `{proxy+}` -> two segments.
fn sample_path(route_path: &str) -> String {
    route_path
        .split('/')
        .map(|seg| {
            if seg.starts_with('{') && seg.ends_with("+}") {
                "a/b"
            } else if seg.starts_with('{') && seg.ends_with('}') {
                "sample"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl Stack<'_> {
    /// The function an integration or authorizer URI invokes: a function's ARN, alone
    /// (`!GetAtt F.Arn`) or inside the `apigateway:...:lambda:path/.../functions/{arn}/invocations`
    /// form.
    fn invoked_function(&self, uri: &str, ctx: &str) -> String {
        let found: Vec<String> = self
            .functions()
            .into_keys()
            .filter(|id| {
                let arn = self.eval_str(&json!({ "Fn::GetAtt": [id, "Arn"] }));
                uri == arn || uri.contains(&format!("/functions/{arn}/invocations"))
            })
            .collect();
        assert_eq!(found.len(), 1, "{ctx}: {uri} invokes {found:?}");
        found[0].clone()
    }

    /// Every invocation of a function by API Gateway this stack can make, with its source ARN:
    /// `{api}/{stage}/{METHOD}/{path}` for an HTTP API route, `{api}/{stage}/{route key}` for a
    /// WebSocket route, `{api}/authorizers/{id}` for a Lambda authorizer.
    fn api_invocations(&self, variant: &str) -> Vec<Invocation> {
        let res = self.resources();
        for (id, r) in &res {
            let ty = r["Type"].as_str().unwrap_or_default();
            assert!(
                !ty.starts_with("AWS::ApiGateway::")
                    && ty != "AWS::Serverless::Api"
                    && ty != "AWS::Serverless::HttpApi"
                    && ty != "AWS::Serverless::WebSocketApi",
                "{variant}: {id} is a {ty}, which this test does not read yet: teach \
                 api_invocations its routes"
            );
            if ty == "AWS::Serverless::Function" {
                for (name, e) in r["Properties"]["Events"].as_object().into_iter().flatten() {
                    let et = e["Type"].as_str().unwrap_or_default();
                    assert!(
                        et != "Api" && et != "HttpApi",
                        "{variant}: {id}'s event {name} is an {et} route, which this test \
                         does not read yet"
                    );
                }
            }
        }
        let props = |id: &str| self.eval(&res[id]["Properties"]).unwrap();
        let of_type = |ty: &str| -> Vec<String> {
            res.iter()
                .filter(|(_, r)| r["Type"] == ty)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut out = Vec::new();
        for api in of_type("AWS::ApiGatewayV2::Api") {
            let api_ref = format!("ref-{api}");
            let protocol = props(&api)["ProtocolType"].as_str().unwrap().to_string();
            let stages: Vec<String> = of_type("AWS::ApiGatewayV2::Stage")
                .iter()
                .map(|s| props(s))
                .filter(|p| p["ApiId"] == api_ref.as_str())
                .map(|p| p["StageName"].as_str().unwrap().to_string())
                .collect();
            assert!(!stages.is_empty(), "{variant}: {api} has no stage");
            let arn = execute_api_arn(&api_ref);
            let routes: Vec<Value> = of_type("AWS::ApiGatewayV2::Route")
                .iter()
                .map(|r| props(r))
                .filter(|p| p["ApiId"] == api_ref.as_str())
                .collect();
            assert!(!routes.is_empty(), "{variant}: {api} has no route");
            for route in routes {
                let key = route["RouteKey"].as_str().unwrap().to_string();
                let ctx = format!("{variant}: {api} {key}");
                let target = route["Target"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{ctx}: no Target"));
                let integration = target
                    .strip_prefix("integrations/ref-")
                    .unwrap_or_else(|| panic!("{ctx}: target {target}"));
                let uri = props(integration)["IntegrationUri"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let function = self.invoked_function(&uri, &ctx);
                // What follows `{stage}/` in the source ARN, per request the route takes.
                let suffixes: Vec<String> = match protocol.as_str() {
                    "WEBSOCKET" => vec![key.clone()],
                    "HTTP" if key == "$default" => vec!["*/*".to_string()],
                    "HTTP" => {
                        let (method, path) = key
                            .split_once(' ')
                            .unwrap_or_else(|| panic!("{ctx}: not `METHOD /path`"));
                        let path = sample_path(path);
                        let methods: Vec<&str> = if method == "ANY" {
                            vec!["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
                        } else {
                            vec![method]
                        };
                        methods.iter().map(|m| format!("{m}{path}")).collect()
                    }
                    other => panic!("{ctx}: protocol {other}"),
                };
                for stage in &stages {
                    for suffix in &suffixes {
                        out.push(Invocation {
                            what: ctx.clone(),
                            function: function.clone(),
                            source_arn: format!("{arn}/{stage}/{suffix}"),
                        });
                    }
                }
            }
        }
        for auth in of_type("AWS::ApiGatewayV2::Authorizer") {
            let p = props(&auth);
            // JWT authorizers are API Gateway's own: no function is invoked.
            let Some(uri) = p["AuthorizerUri"].as_str() else {
                assert_eq!(p["AuthorizerType"], "JWT", "{variant}: {auth}");
                continue;
            };
            let api = p["ApiId"].as_str().unwrap();
            let ctx = format!("{variant}: authorizer {auth}");
            out.push(Invocation {
                function: self.invoked_function(uri, &ctx),
                what: ctx,
                source_arn: format!("{}/authorizers/ref-{auth}", execute_api_arn(api)),
            });
        }
        out
    }
}

/// Lambda lets API Gateway invoke a function only when the invocation's `execute-api` ARN matches
/// the `SourceArn` of a permission for `apigateway.amazonaws.com` on it (`*` any run of characters,
/// `/` included; `?` one). Every route of every API (HTTP and WebSocket) and every Lambda
/// authorizer must be covered, in every parameter variant, or each call to it is a 500.
#[test]
fn every_route_and_authorizer_may_invoke_its_function() {
    let t = load_template();
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        let res = stack.resources();
        let apis: Vec<String> = res
            .iter()
            .filter(|(_, r)| r["Type"] == "AWS::ApiGatewayV2::Api")
            .map(|(id, _)| execute_api_arn(&format!("ref-{id}")))
            .collect();
        let mut allowed: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, r) in &res {
            if r["Type"] != "AWS::Lambda::Permission" {
                continue;
            }
            let p = stack.eval(&r["Properties"]).unwrap();
            if p["Principal"] != "apigateway.amazonaws.com" {
                continue;
            }
            assert_eq!(p["Action"], "lambda:InvokeFunction", "{variant}: {id}");
            let source = p["SourceArn"]
                .as_str()
                .unwrap_or_else(|| panic!("{variant}: {id} lets any API invoke it"))
                .to_string();
            // Only this stack's APIs, named by id (no wildcard API or account).
            assert!(
                apis.iter().any(|a| source.starts_with(&format!("{a}/"))),
                "{variant}: {id}'s SourceArn {source} names none of this stack's APIs"
            );
            let function = p["FunctionName"]
                .as_str()
                .and_then(|f| f.strip_prefix("ref-"))
                .unwrap_or_else(|| panic!("{variant}: {id}: FunctionName"));
            allowed
                .entry(function.to_string())
                .or_default()
                .push(source);
        }
        let invocations = stack.api_invocations(variant);
        assert!(
            invocations.len() >= 8,
            "{variant}: {} invocations",
            invocations.len()
        );
        for i in &invocations {
            let patterns = allowed.get(&i.function).cloned().unwrap_or_default();
            assert!(
                patterns.iter().any(|p| string_like(p, &i.source_arn)),
                "{}: API Gateway invokes {} as {}, which no permission allows (SourceArn {:?})",
                i.what,
                i.function,
                i.source_arn,
                patterns
            );
        }
        // Under IAM, the session API's callers may invoke every IAM-authorised route.
        if stack.exists("SessionCallerRole") {
            let role = stack
                .eval(&stack.resource("SessionCallerRole")["Properties"])
                .unwrap();
            let resources: Vec<String> = role["Policies"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
                .filter(|s| strings(&s["Action"]).contains(&"execute-api:Invoke".to_string()))
                .flat_map(|s| strings(&s["Resource"]))
                .collect();
            for i in invocations
                .iter()
                .filter(|i| i.function == "SessionApiFunction" && !i.what.contains("authorizer"))
            {
                assert!(
                    resources.iter().any(|r| string_like(r, &i.source_arn)),
                    "{}: SessionCallerRole may not invoke {} ({resources:?})",
                    i.what,
                    i.source_arn
                );
            }
        }
    }
}

/// The matcher above is the one Lambda applies to `SourceArn`: `*` crosses `/`.
#[test]
fn source_arn_patterns_match_as_lambda_matches_them() {
    let api = "arn:aws:execute-api:us-east-1:123456789012:abc";
    assert!(string_like(
        &format!("{api}/*/*/session"),
        &format!("{api}/$default/PUT/session")
    ));
    assert!(!string_like(
        &format!("{api}/*/*/session"),
        &format!("{api}/$default/POST/session/ticket")
    ));
    assert!(string_like(
        &format!("{api}/*"),
        &format!("{api}/live/$connect")
    ));
    assert!(string_like(
        &format!("{api}/?ive/$connect"),
        &format!("{api}/live/$connect")
    ));
    assert!(!string_like(
        &format!("{api}/*/$connect"),
        &format!("{api}/live/$default")
    ));
}

impl Stack<'_> {
    /// The `AssertDescription` of every rule assertion these parameters fail: CloudFormation then
    /// creates nothing and shows them.
    fn rule_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        for (name, rule) in self.t["Rules"].as_object().into_iter().flatten() {
            let applies = match rule.get("RuleCondition") {
                None => true,
                Some(c) => self
                    .try_condition(c)
                    .unwrap_or_else(|| panic!("rule {name}: condition {c}")),
            };
            if !applies {
                continue;
            }
            for a in rule["Assertions"].as_array().unwrap() {
                let holds = self
                    .try_condition(&a["Assert"])
                    .unwrap_or_else(|| panic!("rule {name}: assertion {}", a["Assert"]));
                if !holds {
                    failed.push(a["AssertDescription"].as_str().unwrap().to_string());
                }
            }
        }
        failed
    }
}

/// Backend roles the IAM variants name as `SessionCallerPrincipal`.
const BACKEND_ROLES: &str =
    "arn:aws:iam::123456789012:role/backend-a,arn:aws:iam::123456789012:role/team/backend-b";

/// The roles whose session name is the caller's tenant: the session API's and the decide API's.
const CALLER_ROLES: [&str; 2] = ["SessionCallerRole", "DecideCallerRole"];

/// The principals caller role `name` trusts, or `None` when these parameters create no such role.
fn caller_principals(stack: &Stack, name: &str) -> Option<Vec<String>> {
    if !stack.exists(name) {
        return None;
    }
    let role = stack.eval(&stack.resource(name)["Properties"]).unwrap();
    let statements = role["AssumeRolePolicyDocument"]["Statement"]
        .as_array()
        .unwrap();
    let mut principals = Vec::new();
    for s in statements {
        assert_eq!(s["Effect"], "Allow");
        assert_eq!(
            s["Condition"],
            json!({"StringEquals": {"sts:RoleSessionName": "${aws:PrincipalTag/tenantId}"}}),
            "every trust statement pins the session name to the caller's tenantId tag"
        );
        principals.extend(strings(&s["Principal"]["AWS"]));
    }
    Some(principals)
}

/// `SessionCallerRole` and `DecideCallerRole` take the caller's tenant from its `tenantId` principal tag, so whoever may
/// assume it must be a named backend role: trusting the account would let any principal that can
/// tag itself (`iam:TagUser`, `iam:TagRole`) or pass session tags act as any tenant. With IAM and
/// `role-session-name`, the template refuses to deploy until `SessionCallerPrincipal` names roles,
/// and the trust policy names exactly those.
#[test]
fn the_session_caller_role_trusts_only_named_backend_roles() {
    let t = load_template();
    let binding = [
        ("SessionApiAuth", "IAM"),
        ("SessionIamTenantBinding", "role-session-name"),
    ];
    // Without the roles: refused, with a message naming the parameter.
    let unnamed = Stack::new(&t, &binding);
    let failures = unnamed.rule_failures();
    assert!(
        failures
            .iter()
            .any(|f| f.contains("SessionCallerPrincipal")),
        "deploying IAM role-session-name without SessionCallerPrincipal must fail: {failures:?}"
    );
    // With them: exactly those roles, never an account or everyone.
    let mut named = binding.to_vec();
    named.push(("SessionCallerPrincipal", BACKEND_ROLES));
    let stack = Stack::new(&t, &named);
    assert_eq!(stack.rule_failures(), Vec::<String>::new());
    for role in CALLER_ROLES {
        let principals = caller_principals(&stack, role).expect(role);
        assert_eq!(
            principals,
            BACKEND_ROLES.split(',').collect::<Vec<_>>(),
            "{role}"
        );
    }
    // The parameter takes role ARNs only (CloudFormation checks AllowedPattern).
    let param = &t["Parameters"]["SessionCallerPrincipal"];
    let pattern = param["AllowedPattern"].as_str().unwrap_or_default();
    assert!(
        pattern.contains(":role/") && !pattern.contains("root"),
        "SessionCallerPrincipal's AllowedPattern admits role ARNs only: {pattern:?}"
    );
    // No binding by role session name: no role, nothing to name.
    for other in [
        vec![("SessionIamTenantBinding", "any-tenant")],
        vec![
            ("SessionApiAuth", "JWT"),
            ("JwtIssuer", "https://issuer.example.com"),
            ("JwtAudience", "turnstile"),
        ],
    ] {
        let stack = Stack::new(&t, &other);
        assert_eq!(stack.rule_failures(), Vec::<String>::new(), "{other:?}");
        for role in CALLER_ROLES {
            assert_eq!(caller_principals(&stack, role), None, "{role} {other:?}");
        }
    }
    // Every parameter set the other checks run under deploys.
    for (variant, params) in variants() {
        let stack = Stack::new(&t, &params);
        assert_eq!(stack.rule_failures(), Vec::<String>::new(), "{variant}");
        for role in CALLER_ROLES {
            for arn in caller_principals(&stack, role).unwrap_or_default() {
                assert!(arn.contains(":role/"), "{variant}: {role} trusts {arn}");
            }
        }
    }
}

/// `parameter_overrides` of each `[env.deploy.parameters]` table in samconfig.toml.
fn samconfig_overrides() -> BTreeMap<String, BTreeMap<String, String>> {
    let text = std::fs::read_to_string(root().join("samconfig.toml")).expect("read samconfig.toml");
    let mut out = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some(v) = line.strip_prefix("parameter_overrides = ") {
            let env = section
                .strip_suffix(".deploy.parameters")
                .unwrap_or_else(|| {
                    panic!("parameter_overrides outside a deploy table: [{section}]")
                });
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .expect("quoted");
            let mut params = BTreeMap::new();
            // Key=\"value\" pairs separated by spaces (values contain no quotes).
            let v = v.replace("\\\"", "\"");
            let mut rest = v.as_str();
            while let Some(eq) = rest.find("=\"") {
                let key = rest[..eq].trim().to_string();
                let after = &rest[eq + 2..];
                let end = after.find('"').expect("closing quote");
                params.insert(key, after[..end].to_string());
                rest = &after[end + 1..];
            }
            assert!(
                rest.trim().is_empty(),
                "unparsed parameter_overrides: {rest}"
            );
            out.insert(env.to_string(), params);
        }
    }
    out
}

#[test]
fn samconfig_has_default_and_prod_with_every_parameter() {
    let t = load_template();
    let params: BTreeSet<String> = t["Parameters"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let envs = samconfig_overrides();
    assert_eq!(
        envs.keys().map(String::as_str).collect::<Vec<_>>(),
        ["default", "prod"]
    );
    for (env, overrides) in &envs {
        let keys: BTreeSet<String> = overrides.keys().cloned().collect();
        // JSON documents, left to the template's defaults: quoting them in parameter_overrides is
        // fragile.
        let want: BTreeSet<String> = params
            .iter()
            .filter(|p| *p != "TokenRemoverEventPattern" && *p != "TokenRemoverProcessors")
            .cloned()
            .collect();
        assert_eq!(
            keys, want,
            "samconfig.toml [{env}] sets every parameter, and only those"
        );
        let pairs: Vec<(&str, &str)> = overrides
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // Every value is allowed by the template and the stack it describes is consistent.
        for (k, v) in &pairs {
            if let Some(allowed) = t["Parameters"][*k]["AllowedValues"].as_array() {
                let allowed: Vec<String> = allowed
                    .iter()
                    .map(|a| {
                        a.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| a.to_string())
                    })
                    .collect();
                assert!(
                    allowed.contains(&v.to_string()),
                    "[{env}] {k}={v} not in {allowed:?}"
                );
            }
        }
        let stack = Stack::new(&t, &pairs);
        let env_vars = stack.environment(&stack.function_id("connect"));
        TableNames::from_vars(&Vars::from_pairs(env_vars)).unwrap();
        // The one value only the deployer knows: the backend roles SessionCallerRole trusts. Left
        // empty, the template's rule refuses the deployment and names it; given, every rule holds.
        let failures = stack.rule_failures();
        if overrides["SessionCallerPrincipal"].is_empty() {
            assert!(
                failures.len() == 1 && failures[0].contains("SessionCallerPrincipal"),
                "[{env}]: {failures:?}"
            );
            let filled: Vec<(&str, &str)> = pairs
                .iter()
                .map(|&(k, v)| {
                    if k == "SessionCallerPrincipal" {
                        (k, BACKEND_ROLES)
                    } else {
                        (k, v)
                    }
                })
                .collect();
            assert_eq!(
                Stack::new(&t, &filled).rule_failures(),
                Vec::<String>::new(),
                "[{env}]"
            );
        } else {
            assert_eq!(failures, Vec::<String>::new(), "[{env}]");
        }
    }
}

/// The dashboard's body with `${Ns}` and `${AWS::Region}` filled in, as JSON.
fn dashboard_body(t: &Value) -> Value {
    let sub = &t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"];
    let body = sub[0]
        .as_str()
        .expect("DashboardBody is !Sub [body, {Ns: ...}]");
    assert_eq!(
        sub[1]["Ns"],
        json!({"Fn::Sub": "Turnstile/${AWS::StackName}"}),
        "the dashboard reads the stack's namespace"
    );
    let body = body
        .replace("${Ns}", "Turnstile/stack")
        .replace("${AWS::Region}", "eu-west-1");
    assert!(!body.contains("${"), "an unfilled !Sub variable: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("DashboardBody is not JSON: {e}"))
}

#[test]
fn alarms_and_the_dashboard_use_the_metric_catalogue() {
    use shared::telemetry::catalogue;
    let t = load_template();
    let ns = json!({"Fn::Sub": "Turnstile/${AWS::StackName}"});
    assert_eq!(
        t["Globals"]["Function"]["Environment"]["Variables"]["TURNSTILE_METRICS_NAMESPACE"],
        ns
    );
    // Every alarm on our namespace names a catalogued metric with exactly its dimension names.
    let mut ours = BTreeSet::new();
    let check = |m: &Value, alarm: &str| {
        if m["Namespace"] != ns {
            return None;
        }
        let name = m["MetricName"].as_str().unwrap();
        let spec =
            catalogue::spec_of(name).unwrap_or_else(|| panic!("{alarm}: {name} is not a metric"));
        let dims: Vec<&str> = m["Dimensions"]
            .as_array()
            .map(|d| d.iter().map(|d| d["Name"].as_str().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(dims, spec.dimensions, "{alarm}: {name}'s dimensions");
        Some(name.to_string())
    };
    for (id, r) in t["Resources"].as_object().unwrap() {
        if r["Type"] != "AWS::CloudWatch::Alarm" {
            continue;
        }
        let p = &r["Properties"];
        ours.extend(check(p, id));
        for m in p["Metrics"].as_array().into_iter().flatten() {
            if m.get("MetricStat").is_some() {
                ours.extend(check(&m["MetricStat"]["Metric"], id));
            }
        }
    }
    for want in [
        "Decisions",
        "DynamoDbErrors",
        "DecisionLatency",
        "TicketKeys",
    ] {
        assert!(ours.contains(want), "no alarm on {want}: {ours:?}");
    }
    // The dashboard: every metric and SEARCH names a catalogued metric and its dimensions.
    let body = dashboard_body(&t);
    // Caps and bucket levels are table state, not metrics: a text widget says where to read them.
    assert!(
        body["widgets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["type"] == "text"
                && w["properties"]["markdown"]
                    .as_str()
                    .is_some_and(|m| m.contains("turnstile state"))),
        "no text widget pointing at turnstile state"
    );
    // Text widgets hold no metric to check.
    let widgets: Vec<&Value> = body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["type"] != "text")
        .collect();
    let titles: Vec<&str> = widgets
        .iter()
        .map(|w| w["properties"]["title"].as_str().unwrap())
        .collect();
    // The local dashboard's panels that have a metric, then operations'.
    for want in [
        "Decisions per second: admitted, and refused by limit",
        "Decisions per second by tenant",
        "Refusal reasons",
        "Refusals by limit",
        "Decision latency",
        "DynamoDB errors",
        "Open connections",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(want)),
            "no {want} widget: {titles:?}"
        );
    }
    for w in widgets {
        for m in w["properties"]["metrics"].as_array().unwrap() {
            let m = m.as_array().unwrap();
            if let Some(expr) = m[0]["expression"].as_str() {
                // SEARCH('{Turnstile/stack,Dim,...} MetricName="Name"', ...)
                let inner = &expr[expr.find('{').unwrap() + 1..expr.find('}').unwrap()];
                let mut parts = inner.split(',');
                assert_eq!(parts.next(), Some("Turnstile/stack"), "{expr}");
                let dims: Vec<&str> = parts.collect();
                let name = expr
                    .split("MetricName=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                let spec = catalogue::spec_of(name).unwrap_or_else(|| panic!("{expr}"));
                assert_eq!(dims, spec.dimensions, "{expr}");
            } else {
                assert_eq!(m[0], "Turnstile/stack");
                let name = m[1].as_str().unwrap();
                let spec = catalogue::spec_of(name).unwrap_or_else(|| panic!("{name}"));
                let dims: Vec<&str> = m[2..].iter().filter_map(Value::as_str).step_by(2).collect();
                assert_eq!(dims, spec.dimensions, "{name} in the dashboard");
            }
        }
    }
}
