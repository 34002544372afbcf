//! Update and condition expressions with every attribute name and value bound to a
//! placeholder, and the conditional write a task's identity needs ([`task_identity`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Update};
use lambdafusion::{Error, Result};

use super::item::{n, s, state_value, Item};
use lambdafusion::state::TaskState;

/// Builds update and condition expressions with every attribute name and value bound
/// to a placeholder (so reserved words such as `state` or `partition` are never a problem).
#[derive(Default, Clone)]
pub(super) struct Expr {
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    /// Placeholder to attribute name.
    pub(super) names: HashMap<String, String>,
    /// Placeholder to value.
    pub(super) values: Item,
}

impl Expr {
    pub(super) fn name(&mut self, field: &str) -> String {
        let placeholder = format!("#{field}");
        self.names.insert(placeholder.clone(), field.to_string());
        placeholder
    }

    pub(super) fn value(&mut self, v: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), v);
        placeholder
    }

    pub(super) fn set(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.set.push(format!("{f} = {v}"));
        self
    }

    pub(super) fn set_if_absent(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.set.push(format!("{f} = if_not_exists({f}, {v})"));
        self
    }

    /// `field = if_not_exists(field, start) - step`: a counter that starts at `start`.
    pub(super) fn count_down(
        mut self,
        field: &str,
        start: AttributeValue,
        step: AttributeValue,
    ) -> Self {
        let (f, start, step) = (self.name(field), self.value(start), self.value(step));
        self.set
            .push(format!("{f} = if_not_exists({f}, {start}) - {step}"));
        self
    }

    pub(super) fn add(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.add.push(format!("{f} {v}"));
        self
    }

    pub(super) fn remove(mut self, field: &str) -> Self {
        let f = self.name(field);
        self.remove.push(f);
        self
    }

    /// `field = value` for conditions.
    pub(super) fn eq(&mut self, field: &str, v: AttributeValue) -> String {
        let (f, v) = (self.name(field), self.value(v));
        format!("{f} = {v}")
    }

    /// `field <> value` for conditions.
    pub(super) fn ne(&mut self, field: &str, v: AttributeValue) -> String {
        let (f, v) = (self.name(field), self.value(v));
        format!("{f} <> {v}")
    }

    /// `field <op> value` for conditions.
    pub(super) fn cmp(&mut self, field: &str, op: &str, v: AttributeValue) -> String {
        let (f, v) = (self.name(field), self.value(v));
        format!("{f} {op} {v}")
    }

    /// `attribute_not_exists(field)` for conditions.
    pub(super) fn absent(&mut self, field: &str) -> String {
        format!("attribute_not_exists({})", self.name(field))
    }

    pub(super) fn update_expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        parts.join(" ")
    }

    pub(super) fn into_update(self, table: &str, key: Item, condition: String) -> Result<Update> {
        Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(self.update_expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .build()
            .map_err(|e| Error::Internal(format!("DynamoDB update: {e}")))
    }
}

/// The attributes every task item carries, set by whichever transition writes it first:
/// its key fields and TTL, and the counters the transition does not change itself
/// (`keep` names those it does: an update may not name one attribute twice).
pub(super) fn task_identity(
    expr: Expr,
    job_id: &str,
    stage: u32,
    partition: u32,
    expires_at: u64,
    keep: &[&str],
) -> Expr {
    let mut expr = expr
        .set("job_id", s(job_id))
        .set("stage", n(stage))
        .set("partition", n(partition))
        .set("expires_at", n(expires_at));
    for (field, zero) in [
        ("failures", n(0)),
        ("retryable", AttributeValue::Bool(false)),
        ("throttles", n(0)),
    ] {
        if !keep.contains(&field) {
            expr = expr.set_if_absent(field, zero);
        }
    }
    expr
}

/// Sets a task item (or a new one) running `attempt`, dispatched at `now_ms` and not
/// confirmed yet: what starting a retry and starting a speculative attempt both write.
pub(super) fn running_attempt(
    job_id: &str,
    stage: u32,
    partition: u32,
    attempt: u32,
    now_ms: u64,
    expires_at: u64,
) -> Expr {
    task_identity(Expr::default(), job_id, stage, partition, expires_at, &[])
        .set("state", state_value(TaskState::Running))
        .set("attempt", n(attempt))
        .set("dispatched_ms", n(now_ms))
        .remove("confirmed_ms")
        .remove("retry_at_ms")
}

/// `condition`, or no task item at all when `may_have_no_item`: a task's first attempt
/// is dispatched with its stage and has no item until something is recorded for it.
pub(super) fn or_no_item(may_have_no_item: bool, condition: String) -> String {
    if may_have_no_item {
        format!("attribute_not_exists(pk) OR ({condition})")
    } else {
        condition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_bind_every_name_and_value() {
        let mut e = Expr::default()
            .set("state", s("X"))
            .count_down("remaining", n(32), n(1))
            .add("done", AttributeValue::Ns(vec!["4".into()]))
            .remove("error");
        let cond = e.eq("state", s("Y"));
        assert_eq!(
            e.update_expression(),
            "SET #state = :v0, #remaining = if_not_exists(#remaining, :v1) - :v2 \
             ADD #done :v3 REMOVE #error"
        );
        assert_eq!(cond, "#state = :v4");
        assert_eq!(e.values.len(), 5);
        assert_eq!(e.names.len(), 4);
        assert_eq!(
            or_no_item(true, cond.clone()),
            "attribute_not_exists(pk) OR (#state = :v4)"
        );
        assert_eq!(or_no_item(false, cond.clone()), cond);
        let identity = task_identity(Expr::default(), "j", 1, 2, 3, &["failures"]);
        let text = identity.update_expression();
        assert!(
            !text.contains("#failures") && text.contains("#throttles"),
            "{text}"
        );
    }
}
