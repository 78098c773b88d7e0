//! The error answers DynamoDB gives, in its JSON protocol's wire shape: HTTP 400,
//! `Content-Type: application/x-amz-json-1.0`, and a body with `__type` (namespace `#` name, which
//! the SDKs match on the part after `#`) and a message. A cancelled transaction also carries
//! `CancellationReasons`, one per `TransactItems` entry in order: `{"Code":"None"}` for an item
//! that did not cause the cancellation, `{"Code": .., "Message": ..}` for one that did.

use serde_json::{json, Value};

/// The JSON protocol's content type (requests and answers).
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The namespace of DynamoDB's own exceptions in `__type`.
pub const NAMESPACE: &str = "com.amazonaws.dynamodb.v20120810";
/// HTTP status of every injected answer (DynamoDB answers client-side errors, throttling included,
/// with 400).
pub const STATUS: u16 = 400;

/// The message DynamoDB gives for an item another transaction is working on.
pub const CONFLICT_MESSAGE: &str = "Transaction is ongoing for the item";
/// The message of a throttled request or transaction item.
pub const THROTTLE_MESSAGE: &str = "Throughput exceeds the current capacity of your table or \
    index. DynamoDB is automatically scaling your table or index so please try again shortly.";
/// The message of `ProvisionedThroughputExceededException`.
pub const PROVISIONED_MESSAGE: &str = "The level of configured provisioned throughput for the \
    table was exceeded. Consider increasing your provisioning level with the UpdateTable API.";

/// Why one item of a cancelled transaction was (or was not) the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// This item did not cause the cancellation.
    None,
    /// Another transaction or write holds the item.
    TransactionConflict,
    /// The item's partition is over its throughput.
    ThrottlingError,
}

impl Reason {
    pub fn code(self) -> &'static str {
        match self {
            Reason::None => "None",
            Reason::TransactionConflict => "TransactionConflict",
            Reason::ThrottlingError => "ThrottlingError",
        }
    }

    fn to_json(self) -> Value {
        match self {
            Reason::None => json!({"Code": "None"}),
            Reason::TransactionConflict => {
                json!({"Code": self.code(), "Message": CONFLICT_MESSAGE})
            }
            Reason::ThrottlingError => json!({"Code": self.code(), "Message": THROTTLE_MESSAGE}),
        }
    }
}

/// Which throttling exception a throttled request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleError {
    /// `ProvisionedThroughputExceededException` (provisioned tables).
    ProvisionedThroughputExceeded,
    /// `ThrottlingException` (on-demand tables and the control plane).
    Throttling,
}

impl ThrottleError {
    pub fn name(self) -> &'static str {
        match self {
            ThrottleError::ProvisionedThroughputExceeded => {
                "ProvisionedThroughputExceededException"
            }
            ThrottleError::Throttling => "ThrottlingException",
        }
    }

    fn message(self) -> &'static str {
        match self {
            ThrottleError::ProvisionedThroughputExceeded => PROVISIONED_MESSAGE,
            ThrottleError::Throttling => THROTTLE_MESSAGE,
        }
    }
}

fn type_of(name: &str) -> String {
    format!("{NAMESPACE}#{name}")
}

/// `TransactionCanceledException` with one reason per transaction item.
pub fn transaction_canceled(reasons: &[Reason]) -> Value {
    let codes: Vec<&str> = reasons.iter().map(|r| r.code()).collect();
    json!({
        "__type": type_of("TransactionCanceledException"),
        "CancellationReasons": reasons.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
        "Message": format!(
            "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
            codes.join(", ")
        ),
    })
}

/// `TransactionConflictException`: a PutItem/UpdateItem/DeleteItem on an item a transaction holds.
pub fn transaction_conflict() -> Value {
    json!({
        "__type": type_of("TransactionConflictException"),
        "message": CONFLICT_MESSAGE,
    })
}

/// A throttled request.
pub fn throttled(error: ThrottleError) -> Value {
    json!({
        "__type": type_of(error.name()),
        "message": error.message(),
    })
}

/// A 500 `InternalServerError`, as DynamoDB answers when it failed (or lost) a request; the SDK's
/// standard retry mode retries it.
pub fn internal_error() -> Value {
    json!({
        "__type": "com.amazon.coral.service#InternalServerError",
        "message": "Internal server error (injected after the request was applied)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_names_the_conflicting_indexes_and_none_elsewhere() {
        let v = transaction_canceled(&[Reason::None, Reason::TransactionConflict, Reason::None]);
        assert_eq!(
            v["__type"],
            "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"
        );
        assert_eq!(
            v["Message"],
            "Transaction cancelled, please refer cancellation reasons for specific reasons \
             [None, TransactionConflict, None]"
        );
        let r = v["CancellationReasons"].as_array().unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], json!({"Code": "None"}));
        assert_eq!(
            r[1],
            json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})
        );
        assert_eq!(r[2], json!({"Code": "None"}));
    }

    #[test]
    fn a_throttled_transaction_item_says_throttling_error() {
        let v = transaction_canceled(&[Reason::ThrottlingError]);
        assert_eq!(v["CancellationReasons"][0]["Code"], "ThrottlingError");
        assert!(v["Message"]
            .as_str()
            .unwrap()
            .ends_with("[ThrottlingError]"));
    }

    #[test]
    fn throttling_and_conflict_exceptions_have_their_types() {
        assert_eq!(
            throttled(ThrottleError::Throttling)["__type"],
            "com.amazonaws.dynamodb.v20120810#ThrottlingException"
        );
        assert_eq!(
            throttled(ThrottleError::ProvisionedThroughputExceeded)["__type"],
            "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
        );
        let c = transaction_conflict();
        assert_eq!(
            c["__type"],
            "com.amazonaws.dynamodb.v20120810#TransactionConflictException"
        );
        assert_eq!(c["message"], CONFLICT_MESSAGE);
    }
}
