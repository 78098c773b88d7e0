//! The key-value limits table: its attribute names and its definition.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::gcra_write::{attr as gattr, Target};
use crate::table::{TableDef, TableKind};

pub mod attr {
    /// `{nameId}:{id}`, the interned bucket key (Boulder's form).
    pub const BUCKET: &str = "bucket";
    /// Epoch seconds after which an idle bucket is full again and can be forgotten.
    pub const EXPIRES_AT: &str = "expiresAt";
}

pub fn table(name: &str) -> TableDef {
    TableDef::keyed(TableKind::Buckets, name, attr::BUCKET).expiring(attr::EXPIRES_AT)
}

impl Target {
    /// A bucket in the buckets table (`kv::table`).
    pub fn bucket(table: &str, bucket_key: &str, ttl_margin: Duration) -> Self {
        Target {
            table: table.to_string(),
            key: HashMap::from([(
                attr::BUCKET.to_string(),
                AttributeValue::S(bucket_key.to_string()),
            )]),
            tat_attr: gattr::TAT.to_string(),
            ttl_attr: Some(attr::EXPIRES_AT.to_string()),
            ttl_margin,
        }
    }
}
