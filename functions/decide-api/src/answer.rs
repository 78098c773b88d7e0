//! Every decision as an HTTP answer: the verdict, the remaining capacity and when to retry, in the
//! body and as the IETF `RateLimit-Policy` / `RateLimit` headers (formatted by `shared::refusal`,
//! the one place that does), with `Retry-After` on every refusal.
//!
//! A refusal is a **200 with `"allowed": false`** by default (as Unkey's and Upstash's APIs answer:
//! the caller decides what to do), or, with the query parameter `refusal=status`, a **429
//! `application/problem+json`** carrying the same members (RFC 9457 extension members), so a
//! caller that proxies our answer to its own client can pass it through.

use std::time::Duration;

use serde_json::{json, Map, Value};
use shared::refusal::{policy_header, usage_header, HttpAnswer, Policy, QuotaUnit, Refusal, Usage};

use crate::input::bad;

/// How a refusal is answered (`refusal` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRefusal {
    /// `body` (default): 200, `"allowed": false`.
    #[default]
    Body,
    /// `status`: 429 problem+json.
    Status,
}

impl OnRefusal {
    pub fn parse(v: Option<&str>) -> Result<OnRefusal, HttpAnswer> {
        match v {
            None | Some("body") => Ok(OnRefusal::Body),
            Some("status") => Ok(OnRefusal::Status),
            Some(other) => Err(bad(
                400,
                "refusal",
                format!("refusal must be body or status, not {other:?}"),
            )),
        }
    }
}

/// One policy's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    /// The policy's name as the caller named it (a limit name, a resource).
    pub policy: String,
    /// The quota (`q`): a GCRA limit's burst, a bucket's tokens per window, a reservation limit.
    pub limit: u64,
    /// `w`, absent for concurrency quotas.
    pub window: Option<Duration>,
    pub unit: QuotaUnit,
    pub remaining: u64,
    /// When a request of the same cost can succeed (zero when it could now); `None` when no wait
    /// helps (a blocked account).
    pub retry_after: Option<Duration>,
    /// When the quota is whole again (`None` when unknown).
    pub reset_after: Option<Duration>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Seconds with millisecond precision: the retry hint's one name and unit across the JSON
/// Turnstile writes (docs/cli.md, "JSON").
fn secs(d: Duration) -> f64 {
    ms(d) as f64 / 1000.0
}

impl Verdict {
    fn usage(&self) -> Usage {
        Usage {
            policy: Policy::new(&self.policy, self.limit, self.window).with_unit(self.unit),
            remaining: self.remaining,
            reset: self.reset_after,
        }
    }

    /// The verdict's members of a body.
    pub fn members(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("allowed".into(), json!(self.allowed));
        m.insert("policy".into(), json!(self.policy));
        m.insert("limit".into(), json!(self.limit));
        m.insert("remaining".into(), json!(self.remaining));
        m.insert("retryAfter".into(), json!(self.retry_after.map(secs)));
        m.insert("resetMs".into(), json!(self.reset_after.map(ms)));
        m
    }
}

/// The answer for `verdict` (the deciding one) and the other policies of the request (`others`,
/// a batch's), with `extra` members added to the body.
pub fn decision(
    verdict: &Verdict,
    others: &[Verdict],
    extra: Map<String, Value>,
    on_refusal: OnRefusal,
    detail: impl FnOnce() -> String,
) -> HttpAnswer {
    let mut body = verdict.members();
    body.extend(extra);
    let usages: Vec<Usage> = std::iter::once(verdict)
        .chain(others.iter().filter(|o| o.policy != verdict.policy))
        .map(Verdict::usage)
        .collect();
    let policy = policy_header(usages.iter().map(|u| &u.policy));
    let usage = usage_header(usages.iter());
    let retry = verdict.retry_after;
    if !verdict.allowed && on_refusal == OnRefusal::Status {
        let refusal = Refusal::new(
            verdict.usage(),
            retry.unwrap_or(Duration::from_secs(1)),
            detail(),
        );
        let mut http = refusal.to_http_with(&usages[1..]);
        if let Ok(Value::Object(mut problem)) = serde_json::from_str::<Value>(&http.body) {
            problem.extend(body);
            http.body = Value::Object(problem).to_string();
        }
        if retry.is_none() {
            http.headers.retain(|(n, _)| *n != "Retry-After");
        }
        return http;
    }
    let mut headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("RateLimit-Policy", policy),
        ("RateLimit", usage),
    ];
    if let (false, Some(r)) = (verdict.allowed, retry) {
        headers.push((
            "Retry-After",
            shared::refusal::retry_after_secs(r).to_string(),
        ));
    }
    HttpAnswer {
        status: 200,
        headers,
        body: Value::Object(body).to_string(),
    }
}

/// A 200 JSON answer without a verdict (a release whose capacity is not known here).
pub fn plain(body: Value) -> HttpAnswer {
    HttpAnswer {
        status: 200,
        headers: vec![("Content-Type", "application/json".to_string())],
        body: body.to_string(),
    }
}
