//! DynamoDB items: records to items and back (`serde_dynamo`), keys and attribute values.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use lambdafusion::error::StoreErrorKind;
use lambdafusion::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// One item: attribute name to value.
pub(super) type Item = HashMap<String, AttributeValue>;

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn encode_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::store(
        StoreErrorKind::Invalid,
        format!("cannot encode {what}: {e}"),
    )
}

pub(super) fn to_item<T: Serialize>(pk: &str, sk: &str, record: &T) -> Result<Item> {
    let mut item: Item = serde_dynamo::to_item(record).map_err(|e| encode_err(sk, e))?;
    item.insert("pk".into(), s(pk));
    item.insert("sk".into(), s(sk));
    Ok(item)
}

pub(super) fn from_item<T: DeserializeOwned>(item: Item) -> Result<T> {
    let sk = match item.get("sk") {
        Some(AttributeValue::S(sk)) => sk.clone(),
        _ => "?".into(),
    };
    serde_dynamo::from_item(item)
        .map_err(|e| Error::store(StoreErrorKind::Corrupt, format!("corrupt {sk} item: {e}")))
}

pub(super) fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([("pk".to_string(), s(pk)), ("sk".to_string(), s(sk))])
}

pub(super) fn state_value<T: Serialize>(state: T) -> AttributeValue {
    serde_dynamo::to_attribute_value(state).unwrap_or_else(|_| s("?"))
}
