//! The IAM actions of each job store operation, held against the SDK calls in this
//! module's source and the deployment contract.

/// The DynamoDB actions each [`JobStore`] operation of [`DynamoDbJobStore`] performs —
/// what the IAM policy of a function calling it must allow. (Transactions count as the
/// actions of their parts.) `tests/tests/end_to_end/iam_contract.rs` records which operations each
/// function performs and holds the result against [`crate::contract`].
pub fn actions_of(operation: &str) -> &'static [&'static str] {
    match operation {
        "create_job" => &["dynamodb:BatchWriteItem", "dynamodb:PutItem"],
        "get_job" | "job_state" | "get_stage" | "get_plan" | "get_task" | "get_table"
        | "sweep_cursor" => &["dynamodb:GetItem"],
        "task_view" => &["dynamodb:BatchGetItem"],
        "load_job" | "list_tasks" | "list_task_range" | "list_counters" | "active_jobs"
        | "list_tables" => &["dynamodb:Query"],
        "claim_stage" | "confirm_stage" | "start_attempt" | "speculate_task"
        | "confirm_attempt" | "defer_task" | "resend_task" | "fail_attempt"
        | "confirm_dispatch" => &["dynamodb:UpdateItem"],
        "commit_task" => &["dynamodb:UpdateItem", "dynamodb:GetItem"],
        "finish_job" => &[
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
        ],
        "remove_active" | "delete_table" => &["dynamodb:DeleteItem"],
        "set_sweep_cursor" => &["dynamodb:PutItem", "dynamodb:DeleteItem"],
        "keep_active" => &["dynamodb:UpdateItem"],
        // A new entry is an UpdateItem (the executor may make one, committing a CREATE
        // TABLE ... AS); a replacement (CREATE OR REPLACE VIEW) a PutItem.
        "put_table" => &["dynamodb:UpdateItem", "dynamodb:PutItem"],
        other => panic!("unknown job store operation {other}"),
    }
}

#[cfg(test)]
mod contract_tests {
    use std::collections::BTreeSet;

    use super::actions_of;
    use crate::contract::{EXECUTOR_TABLE_ACTIONS, SCHEDULER_TABLE_ACTIONS};

    const OPERATIONS: &[&str] = &[
        "create_job",
        "get_job",
        "job_state",
        "load_job",
        "get_stage",
        "get_plan",
        "task_view",
        "get_task",
        "list_tasks",
        "list_task_range",
        "list_counters",
        "claim_stage",
        "confirm_stage",
        "confirm_dispatch",
        "start_attempt",
        "speculate_task",
        "confirm_attempt",
        "defer_task",
        "resend_task",
        "commit_task",
        "fail_attempt",
        "finish_job",
        "active_jobs",
        "remove_active",
        "keep_active",
        "sweep_cursor",
        "set_sweep_cursor",
        "put_table",
        "get_table",
        "list_tables",
        "delete_table",
    ];

    /// The source of the store's other files: every SDK call it makes is in them.
    const SOURCES: [&str; 4] = [
        include_str!("mod.rs"),
        include_str!("expr.rs"),
        include_str!("errors.rs"),
        include_str!("item.rs"),
    ];

    /// The SDK calls in the store's source, as IAM actions.
    fn actions_in_source() -> BTreeSet<&'static str> {
        let source = SOURCES.concat();
        [
            (".get_item()", "dynamodb:GetItem"),
            (".query()", "dynamodb:Query"),
            (".update_item()", "dynamodb:UpdateItem"),
            (".put_item()", "dynamodb:PutItem"),
            (".delete_item()", "dynamodb:DeleteItem"),
            (".batch_write_item()", "dynamodb:BatchWriteItem"),
            (".batch_get_item()", "dynamodb:BatchGetItem"),
            ("Put::builder()", "dynamodb:PutItem"),
            ("Update::builder()", "dynamodb:UpdateItem"),
            ("Delete::builder()", "dynamodb:DeleteItem"),
        ]
        .into_iter()
        .filter(|(call, _)| source.contains(call))
        .map(|(_, action)| action)
        .collect()
    }

    #[test]
    fn every_operation_is_mapped_and_every_call_is_in_the_contract() {
        let mapped: BTreeSet<&str> = OPERATIONS
            .iter()
            .flat_map(|op| actions_of(op).iter().copied())
            .collect();
        assert_eq!(
            mapped,
            actions_in_source(),
            "actions_of() and the SDK calls in the store disagree"
        );
        let granted: BTreeSet<&str> = SCHEDULER_TABLE_ACTIONS
            .iter()
            .chain(EXECUTOR_TABLE_ACTIONS)
            .copied()
            .collect();
        assert_eq!(
            mapped, granted,
            "the contract grants exactly what the store calls"
        );
        assert!(
            !SOURCES.concat().contains(&format!(".{}()", "scan")),
            "no scans on any path"
        );
    }
}
