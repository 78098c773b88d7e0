//! The one place that formats rate-limit answers for HTTP: status 429, `Retry-After`, the draft IETF
//! `RateLimit-Policy` / `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers-11), and an
//! `application/problem+json` body naming the violated policy.
//!
//! The draft is still moving (an open change would rename parameters), so every parameter name and
//! the serialisation live here and nowhere else. Values are Structured Fields (RFC 9651): policy names
//! are sf-strings, `q`/`r`/`t`/`w` are sf-integers, `pk` an sf-binary.

use std::time::Duration;

use serde::Serialize;

use crate::gcra::{Decision, Rate};

/// Problem type the draft registers for a caller exceeding its own quota.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";
const QUOTA_EXCEEDED_TITLE: &str =
    "Request cannot be satisfied as assigned quota has been exceeded";

/// What a quota counts (`qu`); requests is the draft's default and is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuotaUnit {
    #[default]
    Requests,
    ConcurrentRequests,
    Content,
}

impl QuotaUnit {
    fn token(self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
            QuotaUnit::Content => "content-bytes",
        }
    }
}

/// A quota policy as advertised in `RateLimit-Policy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub name: String,
    /// `q`: the quota.
    pub quota: u64,
    /// `w`: the window, in whole seconds (rounded up); absent for quotas without a window
    /// (open connections).
    pub window: Option<Duration>,
    pub unit: QuotaUnit,
    /// `pk`: the partition key the quota applies to, when it is useful for the client to know.
    pub partition_key: Option<Vec<u8>>,
}

impl Policy {
    pub fn new(name: impl Into<String>, quota: u64, window: Option<Duration>) -> Self {
        Policy {
            name: name.into(),
            quota,
            window,
            unit: QuotaUnit::Requests,
            partition_key: None,
        }
    }

    pub fn with_unit(mut self, unit: QuotaUnit) -> Self {
        self.unit = unit;
        self
    }
}

/// The state of one policy for this request: remaining quota and time until it is restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub policy: Policy,
    /// `r`: quota units left.
    pub remaining: u64,
    /// `t`: seconds until the quota is restored (rounded up); absent when unknown.
    pub reset: Option<Duration>,
}

/// A refusal: which policy said no, and when a retry can succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub usage: Usage,
    pub retry_after: Duration,
    /// Human-readable explanation for the problem body.
    pub detail: String,
}

/// An HTTP answer ready for any front end (API Gateway proxy result, the local stack, a wrapper).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An RFC 9457 `application/problem+json` answer (`type` `about:blank`, so `title` is the status
/// phrase). It also carries `message` (= `detail`), the member every other error body of the APIs
/// has, so clients reading `message` keep working.
pub fn problem(status: u16, title: &str, detail: impl Into<String>) -> HttpAnswer {
    let detail = detail.into();
    HttpAnswer {
        status,
        headers: vec![("Content-Type", "application/problem+json".to_string())],
        body: serde_json::json!({
            "type": "about:blank",
            "title": title,
            "status": status,
            "detail": detail,
            "message": detail,
        })
        .to_string(),
    }
}

/// Whole seconds, rounded up: a client told "0" would retry at once and be refused again.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `Retry-After` value for a refusal: whole seconds rounded up, never 0.
pub fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// An RFC 9651 sf-string. Characters outside printable ASCII cannot be carried and become `?`.
pub fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

/// An RFC 9651 sf-binary: `:base64:`.
fn sf_binary(bytes: &[u8]) -> String {
    format!(":{}:", aws_smithy_types::base64::encode(bytes))
}

/// One `RateLimit-Policy` list member.
pub fn policy_item(p: &Policy) -> String {
    let mut s = format!("{};q={}", sf_string(&p.name), p.quota);
    if p.unit != QuotaUnit::Requests {
        s.push_str(&format!(";qu={}", sf_string(p.unit.token())));
    }
    if let Some(w) = p.window {
        s.push_str(&format!(";w={}", ceil_secs(w)));
    }
    s + &pk_param(p)
}

/// The `RateLimit-Policy` field value for several policies (RFC 9651 list: `", "`-separated).
pub fn policy_header<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> String {
    sf_list(policies, policy_item)
}

/// One `RateLimit` list member.
pub fn usage_item(u: &Usage) -> String {
    let mut s = format!("{};r={}", sf_string(&u.policy.name), u.remaining);
    if let Some(t) = u.reset {
        s.push_str(&format!(";t={}", ceil_secs(t)));
    }
    s + &pk_param(&u.policy)
}

/// The `RateLimit` field value for several policies.
pub fn usage_header<'a>(usages: impl IntoIterator<Item = &'a Usage>) -> String {
    sf_list(usages, usage_item)
}

/// A policy's trailing `;pk=` parameter (empty without a partition key).
fn pk_param(p: &Policy) -> String {
    p.partition_key
        .as_ref()
        .map(|pk| format!(";pk={}", sf_binary(pk)))
        .unwrap_or_default()
}

/// An RFC 9651 list: the members, `", "`-separated.
fn sf_list<T>(members: impl IntoIterator<Item = T>, member: impl Fn(T) -> String) -> String {
    members
        .into_iter()
        .map(member)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Headers that advertise a policy's state on an admitted response.
pub fn usage_headers(u: &Usage) -> Vec<(&'static str, String)> {
    vec![
        ("RateLimit-Policy", policy_item(&u.policy)),
        ("RateLimit", usage_item(u)),
    ]
}

/// A GCRA limit as a policy: `q` = the burst (no client ever has more), `w` = the burst offset
/// (the time an empty bucket takes to fill), so `r` never exceeds `q` and `t` never exceeds `w`.
pub fn gcra_policy(name: &str, rate: &Rate) -> Policy {
    Policy::new(
        name,
        rate.burst,
        Some(Duration::from_nanos(rate.burst_offset_nanos().max(0) as u64)),
    )
}

/// A GCRA decision as this request's usage: `r` = tokens left, `t` = time until the bucket is full.
pub fn gcra_usage(name: &str, rate: &Rate, decision: &Decision) -> Usage {
    Usage {
        policy: gcra_policy(name, rate),
        remaining: decision.remaining,
        reset: Some(decision.reset_in),
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(rename = "violated-policies")]
    violated_policies: [&'a str; 1],
    /// Seconds; the same value as `Retry-After`, for clients that only read bodies (WebSocket frames).
    #[serde(rename = "retryAfter")]
    retry_after: u64,
}

impl Refusal {
    pub fn new(usage: Usage, retry_after: Duration, detail: impl Into<String>) -> Self {
        Refusal {
            usage,
            retry_after,
            detail: detail.into(),
        }
    }

    /// A refused GCRA spend: retry when the decision says a spend of the same cost can succeed.
    pub fn from_gcra(
        name: &str,
        rate: &Rate,
        decision: &Decision,
        detail: impl Into<String>,
    ) -> Self {
        Refusal::new(gcra_usage(name, rate, decision), decision.retry_in, detail)
    }

    /// The problem+json body, also usable as a WebSocket error frame.
    pub fn problem_json(&self) -> String {
        let problem = Problem {
            kind: QUOTA_EXCEEDED_TYPE,
            title: QUOTA_EXCEEDED_TITLE,
            status: 429,
            detail: &self.detail,
            violated_policies: [&self.usage.policy.name],
            retry_after: retry_after_secs(self.retry_after),
        };
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_string(&problem).unwrap_or_default()
    }

    /// The full HTTP 429 answer.
    pub fn to_http(&self) -> HttpAnswer {
        let mut headers = vec![
            ("Content-Type", "application/problem+json".to_string()),
            (
                "Retry-After",
                retry_after_secs(self.retry_after).to_string(),
            ),
        ];
        headers.extend(usage_headers(&self.usage));
        HttpAnswer {
            status: 429,
            headers,
            body: self.problem_json(),
        }
    }
}

impl Refusal {
    /// The 429 with the state of the other policies that applied to the request (a batch spend)
    /// listed after the violated one in `RateLimit-Policy` and `RateLimit`.
    pub fn to_http_with(&self, others: &[Usage]) -> HttpAnswer {
        let mut http = self.to_http();
        let all: Vec<&Usage> = std::iter::once(&self.usage)
            .chain(
                others
                    .iter()
                    .filter(|u| u.policy.name != self.usage.policy.name),
            )
            .collect();
        for (name, value) in http.headers.iter_mut() {
            if *name == "RateLimit-Policy" {
                *value = policy_header(all.iter().map(|u| &u.policy));
            } else if *name == "RateLimit" {
                *value = usage_header(all.iter().copied());
            }
        }
        http
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn policy_header_matches_the_drafts_examples() {
        // Draft example: RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400
        // RFC 9651 serialises list members separated by ", ".
        let burst = Policy::new("burst", 100, secs(60));
        let daily = Policy::new("daily", 1000, secs(86_400));
        assert_eq!(
            policy_header([&burst, &daily]),
            r#""burst";q=100;w=60, "daily";q=1000;w=86400"#
        );
        let conc = Policy::new("concurrency", 10, None).with_unit(QuotaUnit::ConcurrentRequests);
        assert_eq!(
            policy_item(&conc),
            r#""concurrency";q=10;qu="concurrent-requests""#
        );
        let mut keyed = Policy::new("peruser", 100, secs(60));
        keyed.partition_key = Some(b"user123".to_vec());
        assert_eq!(
            policy_item(&keyed),
            r#""peruser";q=100;w=60;pk=:dXNlcjEyMw==:"#
        );
    }

    #[test]
    fn ratelimit_header_matches_the_drafts_example() {
        // Draft example: RateLimit: "default";r=50;t=30
        let u = Usage {
            policy: Policy::new("default", 100, secs(60)),
            remaining: 50,
            reset: secs(30),
        };
        assert_eq!(usage_header([&u]), r#""default";r=50;t=30"#);
        let partial = Usage {
            reset: Some(Duration::from_millis(29_001)),
            ..u
        };
        assert_eq!(
            usage_item(&partial),
            r#""default";r=50;t=30"#,
            "t rounds up"
        );
    }

    #[test]
    fn names_that_need_quoting_are_escaped() {
        assert_eq!(sf_string(r#"a "quoted" \name"#), r#""a \"quoted\" \\name""#);
        assert_eq!(sf_string("tenant:acme:minute"), r#""tenant:acme:minute""#);
        assert_eq!(sf_string("naïve\n"), r#""na?ve?""#);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(50)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(59)), 59);
    }

    #[test]
    fn a_refusal_is_a_complete_429() {
        let r = Refusal::new(
            Usage {
                policy: Policy::new("tenantPerMinute", 60, secs(60)),
                remaining: 0,
                reset: Some(Duration::from_millis(12_300)),
            },
            Duration::from_millis(1_200),
            "tenant acme opened 60 connections this minute",
        );
        let http = r.to_http();
        assert_eq!(http.status, 429);
        assert_eq!(http.header("retry-after"), Some("2"));
        assert_eq!(
            http.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(
            http.header("RateLimit-Policy"),
            Some(r#""tenantPerMinute";q=60;w=60"#)
        );
        assert_eq!(
            http.header("RateLimit"),
            Some(r#""tenantPerMinute";r=0;t=13"#)
        );
        let body: serde_json::Value = serde_json::from_str(&http.body).unwrap();
        assert_eq!(body["type"], QUOTA_EXCEEDED_TYPE);
        assert_eq!(body["status"], 429);
        assert_eq!(body["violated-policies"][0], "tenantPerMinute");
        assert_eq!(body["retryAfter"], 2);
        assert!(body["detail"].as_str().unwrap().contains("acme"));
    }

    #[test]
    fn a_refused_gcra_spend_says_when_to_retry() {
        // Boulder's example: 20 per second, burst 20; the 21st request in the same instant
        // waits 50 ms.
        let rate = Rate::new(20, 20, Duration::from_secs(1)).unwrap();
        let now = crate::clock::Timestamp::from_secs(5_000);
        let mut tat = None;
        for _ in 0..20 {
            tat = Some(crate::gcra::spend(&rate, tat, now, 1).unwrap().new_tat);
        }
        let denied = crate::gcra::spend(&rate, tat, now, 1).unwrap();
        let http = Refusal::from_gcra("NewFoosPerIPAddress", &rate, &denied, "slow down").to_http();
        assert_eq!(http.status, 429);
        assert_eq!(
            http.header("Retry-After"),
            Some("1"),
            "50 ms rounds up to 1 s"
        );
        assert_eq!(
            http.header("RateLimit-Policy"),
            Some(r#""NewFoosPerIPAddress";q=20;w=1"#)
        );
        assert_eq!(
            http.header("RateLimit"),
            Some(r#""NewFoosPerIPAddress";r=0;t=1"#)
        );
        // Boulder's case: burst 10 at 1 per second, empty: retry in 1 s, full in 10 s.
        let slow = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
        let d = crate::gcra::spend(&slow, Some(now.plus(Duration::from_secs(10))), now, 1).unwrap();
        let http =
            Refusal::from_gcra("per \"account\"", &slow, &d, "x").to_http_with(&[gcra_usage(
                "daily",
                &Rate::new(1000, 1000, Duration::from_secs(86_400)).unwrap(),
                &crate::gcra::spend(&slow, None, now, 0).unwrap(),
            )]);
        assert_eq!(http.header("Retry-After"), Some("1"));
        assert_eq!(
            http.header("RateLimit-Policy"),
            Some(r#""per \"account\"";q=10;w=10, "daily";q=1000;w=86400"#)
        );
        assert_eq!(
            http.header("RateLimit"),
            Some(r#""per \"account\"";r=0;t=10, "daily";r=10;t=0"#)
        );
        let body: serde_json::Value = serde_json::from_str(&http.body).unwrap();
        assert_eq!(body["violated-policies"][0], "per \"account\"");
    }
}
