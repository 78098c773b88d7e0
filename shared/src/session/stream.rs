//! The session table's stream, read: which records are DynamoDB's TTL deletions, and what the
//! expired session held (its old image: tenant, session, connection ids, counter shards). Pure, so
//! `ttl-sweeper` only translates and the parsing is fuzzed without DynamoDB
//! (tests/integration/fuzz.rs).

use aws_lambda_events::dynamodb::EventRecord;
use serde_dynamo::AttributeValue;

use super::attr;
use crate::clock::Timestamp;
use crate::ids::{SessionId, TenantId};

/// True for a deletion by DynamoDB's TTL process: `eventName` `REMOVE` by `userIdentity`
/// `{type: Service, principalId: dynamodb.amazonaws.com}` (a user's delete has no such identity).
pub fn is_ttl_removal(r: &EventRecord) -> bool {
    r.event_name == "REMOVE"
        && r.user_identity
            .as_ref()
            .is_some_and(|u| u.type_ == "Service" && u.principal_id == "dynamodb.amazonaws.com")
}

/// The record's identity for the sweep's tombstone: its `eventID`, else its sequence number (both
/// stay the same when the record is delivered again).
pub fn record_id(r: &EventRecord) -> String {
    if !r.event_id.is_empty() {
        return r.event_id.clone();
    }
    r.change.sequence_number.clone().unwrap_or_default()
}

/// When DynamoDB deleted the item (the record's `ApproximateCreationDateTime`).
pub fn deleted_at(r: &EventRecord) -> Timestamp {
    Timestamp::from_millis(r.change.approximate_creation_date_time.timestamp_millis())
}

/// Where the expired session's connections were charged (`chg:{cid}`).
pub fn charges(r: &EventRecord) -> super::Charges {
    let num = |v: &AttributeValue| match v {
        AttributeValue::N(n) => n.parse().ok(),
        _ => None,
    };
    super::Charges::from_attrs(r.change.old_image.iter(), num)
}

/// The user who created the expired session (`owner`), whose session count it gives back.
pub fn owner(r: &EventRecord) -> Option<String> {
    match r.change.old_image.get(attr::OWNER) {
        Some(AttributeValue::S(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// What one expired session held: tenant, session and connection ids, or why the image is
/// unusable.
pub fn expired_session(r: &EventRecord) -> Result<(TenantId, SessionId, Vec<String>), String> {
    let img = &r.change.old_image;
    let tenant = match img.get(attr::TENANT_ID) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => {
            return Err(
                "the old image has no tenantId (is the stream view NEW_AND_OLD_IMAGES?)".into(),
            )
        }
    };
    let t = TenantId::parse(&tenant).map_err(|e| e.to_string())?;
    let sid = match img.get(attr::SESSION_ID) {
        Some(AttributeValue::S(s)) => SessionId::parse(s).map_err(|e| e.to_string())?,
        _ => return Err("the old image has no sessionId".into()),
    };
    let ids = match img.get(attr::CONNECTION_IDS) {
        Some(AttributeValue::Ss(v)) => v.clone(),
        _ => Vec::new(),
    };
    Ok((t, sid, ids))
}

/// A number of the old image (`None` when absent or not a number).
fn old_number(r: &EventRecord, name: &str) -> Option<i64> {
    match r.change.old_image.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

/// The old image's `joinedAt` (epoch seconds of its last join) and `sessionTTL`.
pub fn joined_at_and_ttl(r: &EventRecord) -> (Option<i64>, Option<i64>) {
    (
        old_number(r, attr::JOINED_AT),
        old_number(r, attr::SESSION_TTL),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stream record as Lambda delivers it; `by_ttl` adds DynamoDB's own `userIdentity`.
    fn record(event_name: &str, by_ttl: bool, image: serde_json::Value) -> EventRecord {
        let mut v = json!({
            "eventID": "e1",
            "eventName": event_name,
            "awsRegion": "eu-west-1",
            "dynamodb": {"ApproximateCreationDateTime": 1700000300, "OldImage": image,
                         "SequenceNumber": "42", "SizeBytes": 100,
                         "StreamViewType": "NEW_AND_OLD_IMAGES"}
        });
        if by_ttl {
            v["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
        }
        serde_json::from_value(v).unwrap()
    }

    fn ttl_record(image: serde_json::Value) -> EventRecord {
        record("REMOVE", true, image)
    }

    #[test]
    fn only_removals_by_dynamodb_itself_are_ttl_deletions() {
        let ttl = ttl_record(json!({}));
        assert!(is_ttl_removal(&ttl));
        assert!(!is_ttl_removal(&record("REMOVE", false, json!({}))));
        assert!(!is_ttl_removal(&record("MODIFY", true, json!({}))));
    }

    #[test]
    fn the_old_image_gives_the_session_its_connections() {
        let r = ttl_record(json!({
            "tenantId": {"S": "t-1"}, "sessionId": {"S": "s-1"},
            "connectionIds": {"SS": ["a=", "b="]}, "connShards": {"N": "4"}
        }));
        let (t, s, ids) = expired_session(&r).unwrap();
        assert_eq!((t.as_str(), s.as_str()), ("t-1", "s-1"));
        assert_eq!(ids, ["a=", "b="]);
        assert_eq!(record_id(&r), "e1");
        assert_eq!(owner(&r), None);
        let owned = ttl_record(json!({"owner": {"S": "user-1"}}));
        assert_eq!(owner(&owned).as_deref(), Some("user-1"));
        assert_eq!(deleted_at(&r), Timestamp::from_millis(1_700_000_300_000));
        assert_eq!(joined_at_and_ttl(&r), (None, None));
        let joined = ttl_record(json!({
            "joinedAt": {"N": "1700000100"}, "sessionTTL": {"N": "1700000200"}
        }));
        assert_eq!(
            joined_at_and_ttl(&joined),
            (Some(1_700_000_100), Some(1_700_000_200))
        );
    }

    #[test]
    fn an_unusable_image_is_a_reason() {
        let no_tenant = ttl_record(json!({"sessionId": {"S": "s-1"}}));
        assert!(expired_session(&no_tenant)
            .unwrap_err()
            .contains("NEW_AND_OLD_IMAGES"));
        let no_session = ttl_record(json!({"tenantId": {"S": "t-1"}}));
        assert_eq!(
            expired_session(&no_session).unwrap_err(),
            "the old image has no sessionId"
        );
        let bad_tenant = ttl_record(json!({"tenantId": {"S": "a:b"}, "sessionId": {"S": "s"}}));
        assert!(expired_session(&bad_tenant).is_err());
        let no_connections = ttl_record(json!({"tenantId": {"S": "t"}, "sessionId": {"S": "s"}}));
        assert!(expired_session(&no_connections).unwrap().2.is_empty());
        let mut unnamed = ttl_record(json!({}));
        unnamed.event_id.clear();
        assert_eq!(record_id(&unnamed), "42");
    }
}
