//! The last decisions the local stack saw, for the dashboard: every function invocation that goes
//! through [`Invoke`] is summarised (function, tenant, session, connection, outcome, the limit that
//! refused, reason) into a bounded ring, and admissions and refusals are counted per second in a
//! [`Series`]. Nothing here changes what the functions answer: [`Recorded`] passes the event and
//! the answer through untouched.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use shared::clock::SharedClock;

use super::series::{Points, Series, DENIED};
use crate::lambda::{Invoke, InvokeError, InvokeFuture};

/// How many decisions the dashboard keeps (the oldest go first).
pub const KEPT: usize = 200;

/// One invocation as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Increases by one per invocation: the page uses it to show only what is new.
    pub seq: u64,
    pub at: String,
    pub function: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_id: Option<String>,
    /// `admitted` (the authorizer's Allow, `$connect`/`$default` 2xx), `refused` (a limit said no:
    /// 429, or the authorizer's Deny), `rejected` (another 4xx: a malformed or unknown request),
    /// `error` (5xx or a failed invocation) or `ok` (any other success: session API, async events).
    pub outcome: &'static str,
    /// The HTTP status a client saw, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The limit that refused, by its tenant-row name (`connectionsPerSession`): the 429 body's
    /// violated policy, or the authorizer Deny's `limit`. `None` when no limit said no.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// Why, in the function's own words (the Deny's reason, the 429 body), shortened.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl Decision {
    /// Whether the decision is one of the chart's: an admission by `$connect` or `$default`, or a
    /// refusal by any function. The authorizer's Allow is only a pre-check (`$connect` decides
    /// next), so counting it too would show every admitted connect twice.
    fn charted(&self) -> Option<Option<&str>> {
        match self.outcome {
            "admitted" if ADMITTING.contains(&self.function.as_str()) => Some(None),
            "refused" => Some(Some(self.limit.as_deref().unwrap_or(DENIED))),
            _ => None,
        }
    }
}

/// A bounded, shared log of decisions, and their counts per second.
#[derive(Debug, Default)]
pub struct DecisionLog {
    inner: Mutex<(u64, VecDeque<Decision>)>,
    series: Mutex<Series>,
}

impl DecisionLog {
    pub fn new() -> Arc<Self> {
        Arc::new(DecisionLog::default())
    }

    /// Logs `d`, made at epoch second `at`.
    fn push(&self, mut d: Decision, at: i64) {
        if let (Some(refused_by), Ok(mut series)) = (d.charted(), self.series.lock()) {
            series.record(at, d.tenant_id.as_deref(), refused_by);
        }
        if let Ok(mut g) = self.inner.lock() {
            g.0 += 1;
            d.seq = g.0;
            if g.1.len() == KEPT {
                g.1.pop_front();
            }
            g.1.push_back(d);
        }
    }

    /// Newest first.
    pub fn recent(&self) -> Vec<Decision> {
        self.inner
            .lock()
            .map(|g| g.1.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Admissions and refusals per second over the last five minutes up to `now` (epoch seconds).
    pub fn per_second(&self, now: i64) -> Points {
        self.series
            .lock()
            .map(|s| s.points(now))
            .unwrap_or_else(|_| Series::default().points(now))
    }
}

/// Wraps the stack's functions and logs each invocation's decision.
pub struct Recorded {
    inner: Arc<dyn Invoke>,
    log: Arc<DecisionLog>,
    clock: SharedClock,
}

impl Recorded {
    pub fn new(inner: Arc<dyn Invoke>, log: Arc<DecisionLog>, clock: SharedClock) -> Arc<Self> {
        Arc::new(Recorded { inner, log, clock })
    }
}

impl Invoke for Recorded {
    fn invoke<'a>(&'a self, function: &'a str, event: Value) -> InvokeFuture<'a> {
        Box::pin(async move {
            let ids = Ids::of(&event);
            let result = self.inner.invoke(function, event).await;
            let now = self.clock.now();
            self.log.push(
                summarise(function, ids, now.to_rfc3339(), &result),
                now.as_secs(),
            );
            result
        })
    }
}

/// Who the event is about: query string first (`$connect`, the session API), then the
/// authorizer's context that API Gateway passes to every later route.
struct Ids {
    tenant: Option<String>,
    session: Option<String>,
    connection: Option<String>,
}

impl Ids {
    fn of(event: &Value) -> Ids {
        let ctx = &event["requestContext"];
        let pick = |name: &str| {
            [
                &event["queryStringParameters"][name],
                &ctx["authorizer"][name],
                &ctx["authorizer"]["lambda"][name],
            ]
            .iter()
            .find_map(|v| v.as_str().map(str::to_string))
        };
        Ids {
            tenant: pick("tenantId"),
            session: pick("sessionId"),
            connection: ctx["connectionId"].as_str().map(str::to_string),
        }
    }
}

/// The functions whose success is an admission (`$connect`, `$default`).
const ADMITTING: [&str; 2] = ["connect", "message"];

/// At most this many characters of a reason are kept.
const REASON_CHARS: usize = 240;

fn shorten(s: &str) -> String {
    match s.char_indices().nth(REASON_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The response body, and its JSON when it is JSON.
fn body(resp: &Value) -> (String, Option<Value>) {
    let body = match &resp["body"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let parsed = serde_json::from_str(&body).ok();
    (body, parsed)
}

/// The body's `message`/`reason`/`detail` when it is JSON, else the body itself.
fn body_reason(resp: &Value) -> String {
    let (body, parsed) = body(resp);
    let field = parsed.as_ref().and_then(|v| {
        ["detail", "reason", "message", "title"]
            .iter()
            .find_map(|k| v[*k].as_str().map(str::to_string))
    });
    shorten(&field.unwrap_or(body))
}

/// The limit a 429's problem+json names (`violated-policies`, `shared::refusal`).
fn body_limit(resp: &Value) -> Option<String> {
    let (_, parsed) = body(resp);
    parsed?["violated-policies"][0].as_str().map(shorten)
}

fn summarise(
    function: &str,
    ids: Ids,
    at: String,
    result: &Result<Value, InvokeError>,
) -> Decision {
    let mut limit = None;
    let (outcome, status, reason) = match result {
        Err(e) => ("error", None, shorten(&e.to_string())),
        Ok(resp) if resp.get("policyDocument").is_some() => {
            if crate::websocket::policy_allows(resp) {
                ("admitted", None, String::new())
            } else {
                let reason = resp["context"]["reason"].as_str().unwrap_or("denied");
                limit = resp["context"]["limit"].as_str().map(shorten);
                ("refused", Some(403), shorten(reason))
            }
        }
        Ok(resp) => match resp["statusCode"].as_u64() {
            Some(code) => {
                let code = u16::try_from(code).unwrap_or(u16::MAX);
                let outcome = match code {
                    429 => "refused",
                    400..=499 => "rejected",
                    500.. => "error",
                    // Only the admission paths admit; the session API and the rest just succeed.
                    _ if ADMITTING.contains(&function) => "admitted",
                    _ => "ok",
                };
                let reason = if code >= 400 {
                    body_reason(resp)
                } else {
                    String::new()
                };
                if code == 429 {
                    limit = body_limit(resp);
                }
                (outcome, Some(code), reason)
            }
            // Async events (stream batches, EventBridge, schedules): failures are listed.
            None => match resp["batchItemFailures"].as_array() {
                Some(f) if !f.is_empty() => (
                    "error",
                    None,
                    format!("{} record(s) failed and will be retried", f.len()),
                ),
                _ => ("ok", None, String::new()),
            },
        },
    };
    Decision {
        seq: 0,
        at,
        function: function.to_string(),
        tenant_id: ids.tenant,
        session_id: ids.session,
        connection_id: ids.connection,
        outcome,
        status,
        limit,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> Result<Value, InvokeError> {
        Ok(v)
    }

    #[test]
    fn a_429_is_a_refusal_with_the_body_reason() {
        let event = json!({"requestContext": {"connectionId": "c1"},
            "queryStringParameters": {"tenantId": "acme", "sessionId": "s1"}});
        let resp = ok(json!({"statusCode": 429,
            "body": "{\"detail\":\"tenantConnections: 2 of 2 open\",\"violated-policies\":[\"tenantConnections\"]}"}));
        let d = summarise("connect", Ids::of(&event), "t".into(), &resp);
        assert_eq!(d.outcome, "refused");
        assert_eq!(d.status, Some(429));
        assert_eq!(d.reason, "tenantConnections: 2 of 2 open");
        assert_eq!(d.limit.as_deref(), Some("tenantConnections"));
        assert_eq!(d.tenant_id.as_deref(), Some("acme"));
        assert_eq!(d.session_id.as_deref(), Some("s1"));
        assert_eq!(d.connection_id.as_deref(), Some("c1"));
    }

    #[test]
    fn a_deny_is_a_refusal_and_an_allow_an_admission() {
        let deny = ok(
            json!({"policyDocument": {"Statement": [{"Effect": "Deny"}]},
            "context": {"reason": "session expired"}}),
        );
        let d = summarise("authorizer", Ids::of(&json!({})), "t".into(), &deny);
        assert_eq!(
            (d.outcome, d.reason.as_str(), d.limit.as_deref()),
            ("refused", "session expired", None)
        );
        let over = ok(
            json!({"policyDocument": {"Statement": [{"Effect": "Deny"}]},
            "context": {"reason": "over connectionsPerSession (1)", "limit": "connectionsPerSession"}}),
        );
        let o = summarise("authorizer", Ids::of(&json!({})), "t".into(), &over);
        assert_eq!(o.limit.as_deref(), Some("connectionsPerSession"));
        let allow = ok(
            json!({"policyDocument": {"Statement": [{"Effect": "Allow"}]},
            "context": {"tenantId": "acme"}}),
        );
        let a = summarise("authorizer", Ids::of(&json!({})), "t".into(), &allow);
        assert_eq!(a.outcome, "admitted");
    }

    #[test]
    fn failures_and_async_answers_are_told_apart() {
        let failed: Result<Value, InvokeError> = Err(InvokeError::Failed {
            function: "message".into(),
            message: "DynamoDB timed out".into(),
        });
        let d = summarise("message", Ids::of(&json!({})), "t".into(), &failed);
        assert_eq!(d.outcome, "error");
        assert!(d.reason.contains("DynamoDB timed out"));
        let retry = ok(json!({"batchItemFailures": [{"itemIdentifier": "1"}]}));
        assert_eq!(
            summarise("ttl-sweeper", Ids::of(&json!({})), "t".into(), &retry).outcome,
            "error"
        );
        let put = ok(json!({"statusCode": 200}));
        assert_eq!(
            summarise("session-api", Ids::of(&json!({})), "t".into(), &put).outcome,
            "ok"
        );
        let done = ok(json!({"batchItemFailures": []}));
        assert_eq!(
            summarise("ttl-sweeper", Ids::of(&json!({})), "t".into(), &done).outcome,
            "ok"
        );
    }

    #[test]
    fn the_log_keeps_the_newest_and_numbers_them() {
        let log = DecisionLog::default();
        for i in 0..(KEPT + 5) {
            log.push(
                summarise(
                    "message",
                    Ids::of(&json!({})),
                    i.to_string(),
                    &ok(json!({"statusCode": 200})),
                ),
                7,
            );
        }
        let recent = log.recent();
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent[0].seq, (KEPT + 5) as u64);
        assert_eq!(recent[0].at, (KEPT + 4).to_string());
        assert!(shorten(&"x".repeat(1000)).chars().count() == REASON_CHARS + 1);
    }

    /// One admitted connect is one admission on the chart (its authorizer Allow is not counted);
    /// a refusal counts under its limit, or under "denied" when it names none.
    #[test]
    fn the_chart_counts_admissions_once_and_refusals_by_limit() {
        let log = DecisionLog::default();
        let event = json!({"queryStringParameters": {"tenantId": "acme"}});
        let allow = json!({"policyDocument": {"Statement": [{"Effect": "Allow"}]}});
        let deny = json!({"policyDocument": {"Statement": [{"Effect": "Deny"}]},
            "context": {"reason": "no ticket"}});
        let too_many = json!({"statusCode": 429,
            "body": "{\"violated-policies\":[\"messagesPerMinute\"]}"});
        for (function, resp) in [
            ("authorizer", allow),
            ("connect", json!({"statusCode": 200})),
            ("message", too_many),
            ("authorizer", deny),
            ("session-api", json!({"statusCode": 200})),
        ] {
            let d = summarise(function, Ids::of(&event), "t".into(), &ok(resp));
            log.push(d, 50);
        }
        let p = log.per_second(50);
        assert_eq!(p.points.len(), 1, "{p:?}");
        assert_eq!(p.points[0].tenant, "acme");
        assert_eq!(p.points[0].admitted, 1);
        assert_eq!(p.points[0].refused["messagesPerMinute"], 1);
        assert_eq!(p.points[0].refused[DENIED], 1);
        assert_eq!(log.recent().len(), 5);
    }
}
