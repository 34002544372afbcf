//! Holds the Terraform module (`infra/terraform/modules/lambdafusion`) against the contract in
//! `aws/src/contract.rs`, statically: the HCL is parsed with hcl-rs, nothing is planned.
//!
//! - both functions: runtime and handler are the contract's, the architecture is what was
//!   packaged (package.json), with a precondition refusing a mismatch;
//! - environment: every variable set is in `ALL_ENV`, each function sets its required ones
//!   unconditionally, and together they can set every variable in `ALL_ENV`;
//! - IAM: each function's role carries exactly the contract's actions for that function, on
//!   exactly the intended resources, statement by statement (matched by `sid`), plus a short,
//!   explicit list of actions the Lambda service needs on the function's behalf;
//! - the wiring the design relies on: executor async settings (no Lambda retries, failures to
//!   the scheduler), the stream trigger and its filter, the table's keys, TTL and stream;
//! - a first `terraform apply` that works: every resource Lambda validates against an
//!   execution role at creation depends on the role *policy* that grants what is checked;
//!   the HTTP API's routes reach every path and method of the router's OpenAPI document
//!   (`lambdafusion_api::openapi`, so `/health` and the console at `/` too); the caller
//!   policy output grants both `lambda:InvokeFunctionUrl` and `lambda:InvokeFunction`;
//!   no lifecycle rule has an empty or missing filter; a zip too large for the request goes
//!   through S3.
//!
//! Every comparison is an exact set equality, so an action added to the Terraform or to the
//! contract without the other fails this test. A contract list that is empty (such as
//! `EXECUTOR_BUCKET_ACTIONS`) means the role has no statement for that resource at all, and
//! a statement without actions is itself an error. The `negative_*` tests mutate the HCL (or the
//! contract) and assert that the check notices, so the check itself can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hcl::expr::{Expression, ObjectKey};
use hcl::{Block, Body};
use lambdafusion_aws::contract::*;
use lambdafusion_local::terraform::{attr, traversal_path, Address, Module};

/// The module, relative to the repository root.
const MODULE_DIR: &str = "infra/terraform/modules/lambdafusion";

// Actions the roles need that are not calls made by our code, so the contract does not list
// them. They are the Lambda service acting with the function's execution role:
/// CloudWatch Logs: Lambda writes each function's logs to its own (pre-created) log group.
const LOG_ACTIONS: &[&str] = &["logs:CreateLogStream", "logs:PutLogEvents"];
/// X-Ray: `tracing_config { mode = "Active" }` uploads traces with the execution role, and
/// Lambda refuses to create an Active-traced function whose role lacks these. X-Ray has no
/// resource-level permissions, so their resource is "*".
const XRAY_ACTIONS: &[&str] = &["xray:PutTraceSegments", "xray:PutTelemetryRecords"];
/// SQS (scheduler only): the stream event-source mapping's on-failure destination and the
/// scheduler's dead-letter queue are both delivered with the scheduler's role.
const POISON_QUEUE_ACTIONS: &[&str] = &["sqs:SendMessage"];
/// Actions AWS does not scope to a resource: they must be granted on "*".
const ACCOUNT_WIDE_ACTIONS: &[&str] = &["dynamodb:ListStreams"];

// Rendered resource expressions (hcl-rs formatting) the statements must name exactly.
const TABLE: &str = "aws_dynamodb_table.jobs.arn";
const TABLE_STREAM: &str = "aws_dynamodb_table.jobs.stream_arn";
const BUCKET: &str = "aws_s3_bucket.shuffle.arn";
/// Objects under the engine's key prefix only.
const BUCKET_OBJECTS: &str = r#""${aws_s3_bucket.shuffle.arn}/${var.prefix}/*""#;
const DATA_BUCKETS: &str =
    r#"[for b in var.data_buckets : "arn:${data.aws_partition.current.partition}:s3:::${b}"]"#;
const DATA_OBJECTS: &str =
    r#"[for b in var.data_buckets : "arn:${data.aws_partition.current.partition}:s3:::${b}/*"]"#;
const DATA_KEYS: &str = "var.data_kms_key_arns";
const WRITE_BUCKETS: &str = r#"[for l in var.write_locations : "arn:${data.aws_partition.current.partition}:s3:::${split("/", l)[0]}"]"#;
const WRITE_OBJECTS: &str =
    r#"[for l in var.write_locations : "arn:${data.aws_partition.current.partition}:s3:::${l}/*"]"#;
/// The account's catalog, the attached databases and their tables.
const GLUE: &str = r#"concat(["${local.glue_catalog_arn}:catalog"], [for d in var.glue_databases : "${local.glue_catalog_arn}:database/${d}"], [for d in var.glue_databases : "${local.glue_catalog_arn}:table/${d}/*"])"#;
const POISON_QUEUE: &str = "aws_sqs_queue.poison.arn";
const SCHEDULER_FN: &str = "aws_lambda_function.scheduler.arn";
/// The executors tasks go to: the executor, and the large one where there is one.
const EXECUTOR_FN: &str = r#"local.has_large_executor ? [aws_lambda_function.executor.arn, "${aws_lambda_function.executor.arn}-large"] : [aws_lambda_function.executor.arn]"#;
const ANY_RESOURCE: &str = r#""*""#;
const SCHEDULER_LOGS: &str = r#""${aws_cloudwatch_log_group.scheduler.arn}:*""#;
const EXECUTOR_LOGS: &str = r#"local.has_large_executor ? ["${aws_cloudwatch_log_group.executor.arn}:*", "${aws_cloudwatch_log_group.executor.arn}-large:*"] : ["${aws_cloudwatch_log_group.executor.arn}:*"]"#;

// ---------------------------------------------------------------------------------------
// What the module must say, built from the contract
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ExpectedStatement {
    sid: &'static str,
    actions: BTreeSet<String>,
    resources: BTreeSet<String>,
}

fn stmt(sid: &'static str, actions: &[&str], resources: &[&str]) -> ExpectedStatement {
    ExpectedStatement {
        sid,
        actions: actions.iter().map(|a| a.to_string()).collect(),
        resources: resources.iter().map(|r| r.to_string()).collect(),
    }
}

#[derive(Clone, Debug)]
struct Contract {
    runtime: String,
    handler: String,
    architectures: Vec<String>,
    all_env: BTreeSet<String>,
    /// Function resource label -> (required env, expected statements of its role).
    functions: BTreeMap<&'static str, (BTreeSet<String>, Vec<ExpectedStatement>)>,
}

fn strings(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The contract's action lists, one field per constant, so a negative test can change one
/// list (as a future revision of the contract might) and see what the check then demands.
#[derive(Clone, Debug)]
struct ActionLists {
    scheduler_table: Vec<&'static str>,
    scheduler_stream: Vec<&'static str>,
    scheduler_bucket: Vec<&'static str>,
    scheduler_bucket_objects: Vec<&'static str>,
    scheduler_data_buckets: Vec<&'static str>,
    scheduler_data_objects: Vec<&'static str>,
    scheduler_lambda: Vec<&'static str>,
    executor_table: Vec<&'static str>,
    executor_bucket: Vec<&'static str>,
    executor_bucket_objects: Vec<&'static str>,
    executor_data_buckets: Vec<&'static str>,
    executor_data_objects: Vec<&'static str>,
    executor_lambda: Vec<&'static str>,
}

impl ActionLists {
    /// The lists as `aws/src/contract.rs` has them.
    fn from_contract() -> Self {
        ActionLists {
            scheduler_table: SCHEDULER_TABLE_ACTIONS.to_vec(),
            scheduler_stream: SCHEDULER_STREAM_ACTIONS.to_vec(),
            scheduler_bucket: SCHEDULER_BUCKET_ACTIONS.to_vec(),
            scheduler_bucket_objects: SCHEDULER_BUCKET_OBJECT_ACTIONS.to_vec(),
            scheduler_data_buckets: SCHEDULER_DATA_BUCKET_ACTIONS.to_vec(),
            scheduler_data_objects: SCHEDULER_DATA_OBJECT_ACTIONS.to_vec(),
            scheduler_lambda: SCHEDULER_LAMBDA_ACTIONS.to_vec(),
            executor_table: EXECUTOR_TABLE_ACTIONS.to_vec(),
            executor_bucket: EXECUTOR_BUCKET_ACTIONS.to_vec(),
            executor_bucket_objects: EXECUTOR_BUCKET_OBJECT_ACTIONS.to_vec(),
            executor_data_buckets: EXECUTOR_DATA_BUCKET_ACTIONS.to_vec(),
            executor_data_objects: EXECUTOR_DATA_OBJECT_ACTIONS.to_vec(),
            executor_lambda: EXECUTOR_LAMBDA_ACTIONS.to_vec(),
        }
    }
}

/// Appends the statement, unless the contract lists no action for it: an empty list means
/// the role must have no statement for that resource at all (a statement without actions
/// is not valid IAM).
fn push_unless_empty(
    out: &mut Vec<ExpectedStatement>,
    sid: &'static str,
    actions: &[&str],
    resources: &[&str],
) {
    if !actions.is_empty() {
        out.push(stmt(sid, actions, resources));
    }
}

fn contract() -> Contract {
    contract_with(&ActionLists::from_contract())
}

fn contract_with(lists: &ActionLists) -> Contract {
    let (account_wide, on_stream): (Vec<&str>, Vec<&str>) = lists
        .scheduler_stream
        .iter()
        .copied()
        .partition(|a| ACCOUNT_WIDE_ACTIONS.contains(a));

    // The Lambda service's needs (not in the contract, never empty).
    let mut scheduler = vec![
        stmt("WriteOwnLogs", LOG_ACTIONS, &[SCHEDULER_LOGS]),
        stmt("XRay", XRAY_ACTIONS, &[ANY_RESOURCE]),
        stmt("PoisonQueue", POISON_QUEUE_ACTIONS, &[POISON_QUEUE]),
    ];
    let s = &mut scheduler;
    push_unless_empty(s, "JobTable", &lists.scheduler_table, &[TABLE]);
    push_unless_empty(s, "JobTableStream", &on_stream, &[TABLE_STREAM]);
    push_unless_empty(s, "ListStreams", &account_wide, &[ANY_RESOURCE]);
    push_unless_empty(s, "ShuffleBucket", &lists.scheduler_bucket, &[BUCKET]);
    push_unless_empty(
        s,
        "ShuffleObjects",
        &lists.scheduler_bucket_objects,
        &[BUCKET_OBJECTS],
    );
    push_unless_empty(
        s,
        "DataBuckets",
        &lists.scheduler_data_buckets,
        &[DATA_BUCKETS],
    );
    push_unless_empty(
        s,
        "DataObjects",
        &lists.scheduler_data_objects,
        &[DATA_OBJECTS],
    );
    push_unless_empty(
        s,
        "WriteBuckets",
        SCHEDULER_WRITE_BUCKET_ACTIONS,
        &[WRITE_BUCKETS],
    );
    push_unless_empty(
        s,
        "WriteObjects",
        SCHEDULER_WRITE_OBJECT_ACTIONS,
        &[WRITE_OBJECTS],
    );
    push_unless_empty(s, "DataKeys", DATA_KEY_ACTIONS, &[DATA_KEYS]);
    push_unless_empty(s, "GlueCatalog", SCHEDULER_GLUE_ACTIONS, &[GLUE]);
    push_unless_empty(s, "DispatchTasks", &lists.scheduler_lambda, &[EXECUTOR_FN]);
    push_unless_empty(s, "DispatchTree", &lists.scheduler_lambda, &[SCHEDULER_FN]);

    let mut executor = vec![
        stmt("WriteOwnLogs", LOG_ACTIONS, &[EXECUTOR_LOGS]),
        stmt("XRay", XRAY_ACTIONS, &[ANY_RESOURCE]),
    ];
    let e = &mut executor;
    push_unless_empty(e, "JobTable", &lists.executor_table, &[TABLE]);
    push_unless_empty(e, "ShuffleBucket", &lists.executor_bucket, &[BUCKET]);
    push_unless_empty(
        e,
        "ShuffleObjects",
        &lists.executor_bucket_objects,
        &[BUCKET_OBJECTS],
    );
    push_unless_empty(
        e,
        "DataBuckets",
        &lists.executor_data_buckets,
        &[DATA_BUCKETS],
    );
    push_unless_empty(
        e,
        "DataObjects",
        &lists.executor_data_objects,
        &[DATA_OBJECTS],
    );
    push_unless_empty(
        e,
        "WriteObjects",
        EXECUTOR_WRITE_OBJECT_ACTIONS,
        &[WRITE_OBJECTS],
    );
    push_unless_empty(e, "DataKeys", DATA_KEY_ACTIONS, &[DATA_KEYS]);
    push_unless_empty(e, "WakeScheduler", &lists.executor_lambda, &[SCHEDULER_FN]);
    push_unless_empty(e, "DispatchTasks", &lists.executor_lambda, &[EXECUTOR_FN]);

    let mut functions = BTreeMap::new();
    functions.insert("scheduler", (strings(SCHEDULER_REQUIRED_ENV), scheduler));
    functions.insert(
        "executor",
        (strings(EXECUTOR_REQUIRED_ENV), executor.clone()),
    );
    // The executor's code with more memory, under the executor's role.
    functions.insert("executor_large", (strings(EXECUTOR_REQUIRED_ENV), executor));
    Contract {
        runtime: RUNTIME.to_string(),
        handler: HANDLER.to_string(),
        architectures: strings(ARCHITECTURES).into_iter().collect(),
        all_env: strings(&all_env()),
        functions,
    }
}

// ---------------------------------------------------------------------------------------
// Reading the module
// ---------------------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// All `.tf` files of the module, in name order, as one HCL text (Terraform merges a
/// directory's files into one module, so this is what Terraform sees).
fn module_source() -> String {
    let dir = repo_root().join(MODULE_DIR);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "tf"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .tf files in {}", dir.display());
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            format!(
                "# ---- {}\n{text}\n",
                f.file_name().unwrap().to_string_lossy()
            )
        })
        .collect()
}

/// The module as written, read by the same loader as the local stack's
/// (`lambdafusion_local::terraform::Module`), which refuses duplicate blocks.
fn parse_module(src: &str) -> Module {
    Module::parse(&[("the module".to_string(), src.to_string())])
        .unwrap_or_else(|e| panic!("the module does not load: {e}"))
}

fn blocks<'a>(body: &'a Body, identifier: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
    body.blocks().filter(move |b| b.identifier() == identifier)
}

fn render(expr: &Expression) -> String {
    expr.to_string()
}

/// Replaces `local.<name>` by the local's expression (repeatedly), at the top and inside
/// arrays; leaves everything else as written.
fn resolve_locals(
    expr: &Expression,
    locals: &BTreeMap<String, Expression>,
    depth: usize,
) -> Expression {
    assert!(depth < 16, "locals nest too deep (cycle?)");
    if let Some(path) = traversal_path(expr) {
        if path.len() == 2 && path[0] == "local" {
            if let Some(value) = locals.get(&path[1]) {
                return resolve_locals(value, locals, depth + 1);
            }
        }
    }
    match expr {
        Expression::Array(items) => Expression::Array(
            items
                .iter()
                .map(|e| resolve_locals(e, locals, depth + 1))
                .collect(),
        ),
        Expression::Parenthesis(inner) => resolve_locals(inner, locals, depth + 1),
        other => other.clone(),
    }
}

fn string_literal(expr: &Expression) -> Option<&str> {
    match expr {
        Expression::String(s) => Some(s.as_str()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------

/// Every way the module deviates from the contract, as readable sentences; empty if none.
fn check(src: &str, contract: &Contract) -> Vec<String> {
    let module = parse_module(src);
    let mut errors = Vec::new();
    check_functions(&module, contract, &mut errors);
    check_environment(&module, contract, &mut errors);
    check_settings(&module, lambdafusion::config::SETTINGS, &mut errors);
    check_iam(&module, contract, &mut errors);
    check_wiring(&module, &mut errors);
    check_ordering(&module, &mut errors);
    check_routes(&module, &router_routes(), &mut errors);
    check_caller_policy(&module, &mut errors);
    check_lifecycle_filters(&module, &mut errors);
    check_code_upload(&module, &mut errors);
    errors
}

fn function<'a>(module: &'a Module, name: &str) -> Option<&'a Body> {
    module.resource("aws_lambda_function", name)
}

fn check_functions(module: &Module, contract: &Contract, errors: &mut Vec<String>) {
    let declared: BTreeSet<&str> = module
        .resources()
        .keys()
        .filter(|a| a.kind == "aws_lambda_function")
        .map(|a| a.name.as_str())
        .collect();
    let expected: BTreeSet<&str> = contract.functions.keys().copied().collect();
    if declared != expected {
        errors.push(format!(
            "aws_lambda_function resources are {declared:?}, expected exactly {expected:?}"
        ));
    }
    for name in contract.functions.keys() {
        let Some(body) = function(module, name) else {
            continue;
        };
        let runtime = attr(body, "runtime").and_then(string_literal);
        if runtime != Some(contract.runtime.as_str()) {
            errors.push(format!(
                "{name}: runtime is {runtime:?}, contract says {:?}",
                contract.runtime
            ));
        }
        let handler = attr(body, "handler").and_then(string_literal);
        if handler != Some(contract.handler.as_str()) {
            errors.push(format!(
                "{name}: handler is {handler:?}, contract says {:?}",
                contract.handler
            ));
        }
        // The architecture is what was packaged (`local.architecture`, from package.json
        // or the variable), and a precondition refuses a zip built for another one.
        let arch =
            attr(body, "architectures").map(|e| render(e).split_whitespace().collect::<String>());
        if arch.as_deref() != Some("[local.architecture]") {
            errors.push(format!(
                "{name}: architectures is {arch:?}, must be [local.architecture] (what was packaged)"
            ));
        }
        let guarded = blocks(body, "lifecycle")
            .flat_map(|l| blocks(l.body(), "precondition"))
            .filter_map(|p| attr(p.body(), "condition"))
            .any(|c| render(c).contains("local.architecture_problem"));
        if !guarded {
            errors.push(format!(
                "{name}: no precondition on local.architecture_problem refuses a zip built for another architecture"
            ));
        }
    }
    // The variable admits exactly the architectures the package script builds.
    match module.variable("architecture") {
        None => errors.push("variable architecture is missing".into()),
        Some(var) => {
            let condition = blocks(var, "validation")
                .filter_map(|v| attr(v.body(), "condition"))
                .map(render)
                .collect::<Vec<_>>()
                .join(" ");
            for wanted in contract.architectures.iter() {
                if !condition.contains(&format!("{wanted:?}")) {
                    errors.push(format!(
                        "variable architecture: its validation does not admit {wanted:?}"
                    ));
                }
            }
        }
    }
}

/// Collects the names of an environment map: name -> set unconditionally?
/// One variable a function's environment may set: whether always (not under a condition
/// or a filter), and the expression of its value.
struct EnvEntry {
    always: bool,
    value: Expression,
}

fn env_names(
    expr: &Expression,
    locals: &BTreeMap<String, Expression>,
    conditional: bool,
    out: &mut BTreeMap<String, EnvEntry>,
    errors: &mut Vec<String>,
    depth: usize,
) {
    if depth > 16 {
        errors.push("environment: expressions nest too deep (cycle?)".into());
        return;
    }
    if let Some(path) = traversal_path(expr) {
        if path.len() == 2 && path[0] == "local" {
            match locals.get(&path[1]) {
                Some(value) => env_names(value, locals, conditional, out, errors, depth + 1),
                None => errors.push(format!("environment: unknown local.{}", path[1])),
            }
            return;
        }
    }
    match expr {
        Expression::Object(object) => {
            for (key, value) in object.iter() {
                let name = match key {
                    ObjectKey::Identifier(id) => id.as_str().to_string(),
                    ObjectKey::Expression(Expression::String(s)) => s.clone(),
                    other => {
                        errors.push(format!(
                            "environment: variable name {other:?} is not a literal"
                        ));
                        continue;
                    }
                };
                let entry = out.entry(name).or_insert(EnvEntry {
                    always: false,
                    value: value.clone(),
                });
                entry.always |= !conditional;
            }
        }
        Expression::FuncCall(call) if call.name.name.as_str() == "merge" => {
            for arg in &call.args {
                env_names(arg, locals, conditional, out, errors, depth + 1);
            }
        }
        // `{ for k, v in {...} : k => v if ... }` keeps the collection's names, some of them.
        Expression::ForExpr(for_expr) => {
            let keeps_keys = matches!(
                (&for_expr.key_var, &for_expr.key_expr),
                (Some(var), Some(Expression::Variable(key))) if var.as_str() == key.as_str()
            );
            if !keeps_keys {
                errors.push(format!(
                    "environment: cannot read the names of {}",
                    render(expr)
                ));
                return;
            }
            let conditional = conditional || for_expr.cond_expr.is_some();
            env_names(
                &for_expr.collection_expr,
                locals,
                conditional,
                out,
                errors,
                depth + 1,
            );
        }
        Expression::Conditional(cond) => {
            env_names(&cond.true_expr, locals, true, out, errors, depth + 1);
            env_names(&cond.false_expr, locals, true, out, errors, depth + 1);
        }
        Expression::Parenthesis(inner) => {
            env_names(inner, locals, conditional, out, errors, depth + 1)
        }
        Expression::Null => {}
        other => errors.push(format!(
            "environment: cannot read variable names statically from {}",
            render(other)
        )),
    }
}

fn check_environment(module: &Module, contract: &Contract, errors: &mut Vec<String>) {
    let mut settable = BTreeSet::new();
    for (name, (required, _)) in &contract.functions {
        let Some(body) = function(module, name) else {
            continue;
        };
        let envs: Vec<&Block> = blocks(body, "environment").collect();
        let Some(variables) = envs.first().and_then(|b| attr(b.body(), "variables")) else {
            errors.push(format!("{name}: no environment {{ variables = ... }}"));
            continue;
        };
        let mut names = BTreeMap::new();
        env_names(variables, module.locals(), false, &mut names, errors, 0);
        for (var, _) in names
            .iter()
            .filter(|(var, _)| !contract.all_env.contains(*var))
        {
            errors.push(format!(
                "{name}: sets {var}, which is not in the contract's ALL_ENV"
            ));
        }
        for var in required {
            match names.get(var).map(|e| e.always) {
                Some(true) => {}
                Some(false) => {
                    errors.push(format!("{name}: required {var} is only set conditionally"))
                }
                None => errors.push(format!("{name}: required {var} is not set")),
            }
        }
        settable.extend(names.into_keys());
    }
    for var in contract.all_env.difference(&settable) {
        errors.push(format!(
            "{var} is in the contract's ALL_ENV but neither function can have it set"
        ));
    }
}

/// Whether `expr` reads `var.<var>`, directly or through the locals it names (each
/// `local.<name>` word expanded to that local's expression, until none is new).
fn reads_variable(expr: &Expression, var: &str, locals: &BTreeMap<String, Expression>) -> bool {
    fn words(text: &str) -> impl Iterator<Item = &str> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
    }
    let wanted = format!("var.{var}");
    let mut pending = vec![render(expr)];
    let mut expanded = BTreeSet::new();
    while let Some(text) = pending.pop() {
        for word in words(&text) {
            if word == wanted {
                return true;
            }
            if let Some(local) = word.strip_prefix("local.") {
                if let Some(value) = locals.get(local) {
                    if expanded.insert(local.to_string()) {
                        pending.push(render(value));
                    }
                }
            }
        }
    }
    false
}

/// Each engine setting the module exposes (declared once, in `core/src/config.rs`): its
/// Terraform variable exists, names the environment variable in its description, feeds
/// that variable in both functions' environment, and defaults to null (the code's
/// default) or to the code's default.
fn check_settings(
    module: &Module,
    settings: &[lambdafusion::config::Setting],
    errors: &mut Vec<String>,
) {
    for name in ["scheduler", "executor"] {
        let Some(body) = function(module, name) else {
            continue;
        };
        let Some(variables) = blocks(body, "environment")
            .next()
            .and_then(|b| attr(b.body(), "variables"))
        else {
            continue;
        };
        // What cannot be read was reported by check_environment already.
        let mut values = BTreeMap::new();
        env_names(
            variables,
            module.locals(),
            false,
            &mut values,
            &mut Vec::new(),
            0,
        );
        for setting in settings {
            let (Some(env), Some(tf)) = (setting.env, setting.terraform) else {
                continue;
            };
            match values.get(env).map(|e| &e.value) {
                None => errors.push(format!(
                    "{name}: setting {} ({env}) is not set",
                    setting.name
                )),
                Some(value) if !reads_variable(value, tf, module.locals()) => errors.push(format!(
                    "{name}: {env} = {} does not come from var.{tf}",
                    render(value)
                )),
                Some(_) => {}
            }
        }
    }
    for setting in settings {
        let Some(tf) = setting.terraform else {
            continue;
        };
        let Some(variable) = module.variable(tf) else {
            errors.push(format!(
                "setting {}: no variable \"{tf}\" in the module",
                setting.name
            ));
            continue;
        };
        let env = setting.env.unwrap_or("(none)");
        let described = attr(variable, "description")
            .and_then(string_literal)
            .is_some_and(|d| d.contains(env));
        if !described {
            errors.push(format!(
                "variable \"{tf}\": its description does not name {env}"
            ));
        }
        // A module that needs the code's default itself spells it `local.code_default_<var>`.
        if let Some(local) = module.locals().get(&format!("code_default_{tf}")) {
            if render(local) != setting.default_value() {
                errors.push(format!(
                    "local.code_default_{tf} is {} but the code's {} defaults to {}",
                    render(local),
                    setting.name,
                    setting.default_value()
                ));
            }
        }
        match attr(variable, "default") {
            None | Some(Expression::Null) => {}
            Some(default) if render(default) == setting.default_value() => {}
            Some(default) => errors.push(format!(
                "variable \"{tf}\" defaults to {} but the code's {} defaults to {}",
                render(default),
                setting.name,
                setting.default_value()
            )),
        }
    }
}

#[derive(Debug)]
struct Statement {
    sid: String,
    actions: BTreeSet<String>,
    resources: BTreeSet<String>,
}

fn statements(
    doc_name: &str,
    doc: &Body,
    locals: &BTreeMap<String, Expression>,
    errors: &mut Vec<String>,
) -> Vec<Statement> {
    let mut bodies: Vec<&Body> = blocks(doc, "statement").map(|b| b.body()).collect();
    for dynamic in blocks(doc, "dynamic") {
        if dynamic
            .labels()
            .iter()
            .map(|l| l.as_str())
            .eq(["statement"])
        {
            bodies.extend(blocks(dynamic.body(), "content").map(|b| b.body()));
        }
    }
    let mut out = Vec::new();
    for body in bodies {
        let sid = attr(body, "sid")
            .and_then(string_literal)
            .unwrap_or("")
            .to_string();
        let at = format!("{doc_name}/{sid}");
        if sid.is_empty() {
            errors.push(format!("{doc_name}: statement without a literal sid"));
        }
        for forbidden in ["not_actions", "not_resources"] {
            if attr(body, forbidden).is_some() {
                errors.push(format!("{at}: uses {forbidden}"));
            }
        }
        if let Some(effect) = attr(body, "effect") {
            if string_literal(effect) != Some("Allow") {
                errors.push(format!(
                    "{at}: effect is {}, expected Allow",
                    render(effect)
                ));
            }
        }
        let mut actions = BTreeSet::new();
        match attr(body, "actions") {
            Some(Expression::Array(items)) => {
                if items.is_empty() {
                    errors.push(format!("{at}: statement has no actions"));
                }
                for item in items {
                    match string_literal(item) {
                        Some(a) if a.contains('*') => {
                            errors.push(format!("{at}: wildcard action {a}"))
                        }
                        Some(a) => {
                            if !actions.insert(a.to_string()) {
                                errors.push(format!("{at}: {a} listed twice"));
                            }
                        }
                        None => errors.push(format!(
                            "{at}: action {} is not a literal string",
                            render(item)
                        )),
                    }
                }
            }
            _ => errors.push(format!("{at}: actions is not a literal list")),
        }

        let resources = match attr(body, "resources").map(|e| resolve_locals(e, locals, 0)) {
            Some(Expression::Array(items)) => items.iter().map(render).collect(),
            Some(other) => BTreeSet::from([render(&other)]),
            None => {
                errors.push(format!("{at}: no resources"));
                BTreeSet::new()
            }
        };
        out.push(Statement {
            sid,
            actions,
            resources,
        });
    }
    out
}

fn check_iam(module: &Module, contract: &Contract, errors: &mut Vec<String>) {
    // Only inline policies built from aws_iam_policy_document, so they can be read here.
    for Address { kind, name } in module.resources().keys() {
        if matches!(
            kind.as_str(),
            "aws_iam_role_policy_attachment"
                | "aws_iam_policy"
                | "aws_iam_policy_attachment"
                | "aws_iam_role_policies_exclusive"
        ) {
            errors.push(format!("{kind}.{name}: attach permissions only as aws_iam_role_policy from aws_iam_policy_document"));
        }
        if kind == "aws_iam_role" {
            let body = &module.resources()[&Address {
                kind: kind.clone(),
                name: name.clone(),
            }];
            if attr(body, "managed_policy_arns").is_some()
                || blocks(body, "inline_policy").next().is_some()
            {
                errors.push(format!(
                    "aws_iam_role.{name}: managed_policy_arns / inline_policy are not allowed"
                ));
            }
        }
    }

    // role label -> policy document labels attached to it
    let mut attached: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (Address { kind, name }, body) in module.resources() {
        if kind != "aws_iam_role_policy" {
            continue;
        }
        let role = attr(body, "role").and_then(traversal_path);
        let policy = attr(body, "policy").and_then(traversal_path);
        match (role.as_deref(), policy.as_deref()) {
            (Some([r, role_name, id]), Some([d, t, doc, json]))
                if r == "aws_iam_role" && (id == "id" || id == "name") && d == "data" && t == "aws_iam_policy_document" && json == "json" =>
            {
                attached.entry(role_name.clone()).or_default().push(doc.clone());
            }
            _ => errors.push(format!(
                "aws_iam_role_policy.{name}: role must be aws_iam_role.<name>.id and policy data.aws_iam_policy_document.<name>.json"
            )),
        }
    }

    let mut roles_seen = BTreeSet::new();
    for (function_name, (_, expected)) in &contract.functions {
        let Some(body) = function(module, function_name) else {
            continue;
        };
        let role = match attr(body, "role").and_then(traversal_path).as_deref() {
            Some([r, role, arn]) if r == "aws_iam_role" && arn == "arn" => role.clone(),
            _ => {
                errors.push(format!(
                    "{function_name}: role must be aws_iam_role.<name>.arn"
                ));
                continue;
            }
        };
        // The large executor is the executor's code: it runs under the executor's role.
        let shares_executor_role = *function_name == "executor_large" && role == "executor";
        if !roles_seen.insert(role.clone()) && !shares_executor_role {
            errors.push(format!(
                "{function_name}: shares role {role} with another function (one role per function)"
            ));
        }

        let mut actual: Vec<Statement> = Vec::new();
        for doc in attached.get(&role).map(Vec::as_slice).unwrap_or_default() {
            match module.data_source("aws_iam_policy_document", doc) {
                Some(doc_body) => actual.extend(statements(doc, doc_body, module.locals(), errors)),
                None => errors.push(format!(
                    "role {role}: data.aws_iam_policy_document.{doc} does not exist"
                )),
            }
        }

        // The role as a whole: exactly the expected actions.
        let want: BTreeSet<&String> = expected.iter().flat_map(|s| &s.actions).collect();
        let have: BTreeSet<&String> = actual.iter().flat_map(|s| &s.actions).collect();
        for a in have.difference(&want) {
            errors.push(format!(
                "{function_name} role {role}: grants {a}, which the contract does not list"
            ));
        }
        for a in want.difference(&have) {
            errors.push(format!(
                "{function_name} role {role}: lacks {a}, which the contract lists"
            ));
        }

        // Statement by statement: the right actions on the right resources.
        let mut by_sid: BTreeMap<&str, &Statement> = BTreeMap::new();
        for s in &actual {
            if by_sid.insert(s.sid.as_str(), s).is_some() {
                errors.push(format!(
                    "{function_name} role {role}: sid {} used twice",
                    s.sid
                ));
            }
        }
        for e in expected {
            let Some(s) = by_sid.remove(e.sid) else {
                errors.push(format!(
                    "{function_name} role {role}: no statement with sid {}",
                    e.sid
                ));
                continue;
            };
            if s.actions != e.actions {
                errors.push(format!(
                    "{function_name}/{}: actions {:?}, expected {:?}",
                    e.sid, s.actions, e.actions
                ));
            }
            if s.resources != e.resources {
                errors.push(format!(
                    "{function_name}/{}: resources {:?}, expected {:?}",
                    e.sid, s.resources, e.resources
                ));
            }
        }
        for sid in by_sid.keys() {
            errors.push(format!(
                "{function_name} role {role}: unexpected statement {sid}"
            ));
        }
    }
}

/// The wiring the failure model relies on (docs/design.md): checked by attribute.
fn check_wiring(module: &Module, errors: &mut Vec<String>) {
    fn expect(errors: &mut Vec<String>, what: &str, actual: String, wanted: &str) {
        if actual != wanted {
            errors.push(format!("{what} is {actual:?}, expected {wanted:?}"));
        }
    }
    let get = |kind: &str, name: &str| module.resource(kind, name);
    let rendered = |body: &Body, key: &str| attr(body, key).map(render).unwrap_or_default();

    match get("aws_dynamodb_table", "jobs") {
        Some(table) => {
            expect(
                errors,
                "table hash_key",
                rendered(table, "hash_key"),
                r#""pk""#,
            );
            expect(
                errors,
                "table range_key",
                rendered(table, "range_key"),
                r#""sk""#,
            );
            expect(
                errors,
                "table billing_mode",
                rendered(table, "billing_mode"),
                r#""PAY_PER_REQUEST""#,
            );
            expect(
                errors,
                "table stream_view_type",
                rendered(table, "stream_view_type"),
                r#""NEW_IMAGE""#,
            );
            let ttl = blocks(table, "ttl")
                .next()
                .map(|b| rendered(b.body(), "attribute_name"))
                .unwrap_or_default();
            expect(errors, "table ttl attribute", ttl, r#""expires_at""#);
        }
        None => errors.push("no aws_dynamodb_table.jobs".into()),
    }

    match get("aws_lambda_function_event_invoke_config", "executor") {
        Some(cfg) => {
            expect(
                errors,
                "executor function_name",
                rendered(cfg, "function_name"),
                "aws_lambda_function.executor.function_name",
            );
            expect(
                errors,
                "executor maximum_retry_attempts",
                rendered(cfg, "maximum_retry_attempts"),
                "0",
            );
            let dest = blocks(cfg, "destination_config")
                .flat_map(|d| blocks(d.body(), "on_failure"))
                .map(|f| rendered(f.body(), "destination"))
                .next()
                .unwrap_or_default();
            expect(
                errors,
                "executor on_failure destination",
                dest,
                SCHEDULER_FN,
            );
        }
        None => errors.push("no aws_lambda_function_event_invoke_config.executor".into()),
    }

    match get("aws_lambda_event_source_mapping", "stream") {
        Some(esm) => {
            expect(
                errors,
                "stream event_source_arn",
                rendered(esm, "event_source_arn"),
                TABLE_STREAM,
            );
            expect(
                errors,
                "stream function_name",
                rendered(esm, "function_name"),
                SCHEDULER_FN,
            );
            expect(
                errors,
                "stream starting_position",
                rendered(esm, "starting_position"),
                r#""LATEST""#,
            );
            expect(
                errors,
                "stream bisect_batch_on_function_error",
                rendered(esm, "bisect_batch_on_function_error"),
                "true",
            );
            let response_types: Option<Vec<&str>> = match attr(esm, "function_response_types") {
                Some(Expression::Array(items)) => items.iter().map(string_literal).collect(),
                _ => None,
            };
            if response_types != Some(vec!["ReportBatchItemFailures"]) {
                errors.push(format!("stream function_response_types is {response_types:?}, expected [\"ReportBatchItemFailures\"]"));
            }
            let patterns: Vec<String> = blocks(esm, "filter_criteria")
                .flat_map(|c| blocks(c.body(), "filter"))
                .map(|f| rendered(f.body(), "pattern"))
                .collect();
            // The rule of `ChangeRecord::wakes_scheduler`: a commit counter whose
            // `remaining` reached 0, a task item turned FAILED; nothing else.
            let wanted = [
                ["\"COUNT#\"", "remaining", "\"0\""],
                ["\"TASK#\"", "state", "\"FAILED\""],
            ];
            if patterns.len() != wanted.len() {
                errors.push(format!(
                    "stream: {} filters, expected {}",
                    patterns.len(),
                    wanted.len()
                ));
            }
            for words in wanted {
                if !patterns
                    .iter()
                    .any(|p| p.contains("NewImage") && words.iter().all(|w| p.contains(w)))
                {
                    errors.push(format!(
                        "stream: no filter on NewImage mentioning {words:?}"
                    ));
                }
            }
        }
        None => errors.push("no aws_lambda_event_source_mapping.stream".into()),
    }
}

// ---------------------------------------------------------------------------------------
// A first apply that works
// ---------------------------------------------------------------------------------------

/// `depends_on` of a resource, as rendered traversals (`aws_iam_role_policy.scheduler`).
fn depends_on(body: &Body) -> BTreeSet<String> {
    match attr(body, "depends_on") {
        Some(Expression::Array(items)) => items.iter().map(render).collect(),
        _ => BTreeSet::new(),
    }
}

/// The resources Lambda validates against an execution role when it creates them, and the
/// role policies that grant what it checks (iam.tf, "Ordering"). Depending on the role is
/// not enough: the role exists before its policies do.
const ORDERING: &[(&str, &str, &[&str])] = &[
    // dead-letter queue (sqs:SendMessage) and Active tracing (X-Ray)
    (
        "aws_lambda_function",
        "scheduler",
        &["aws_iam_role_policy.scheduler_runtime"],
    ),
    // Active tracing (X-Ray)
    (
        "aws_lambda_function",
        "executor",
        &["aws_iam_role_policy.executor_runtime"],
    ),
    // stream reads (engine policy) and the on-failure queue (runtime policy)
    (
        "aws_lambda_event_source_mapping",
        "stream",
        &[
            "aws_iam_role_policy.scheduler",
            "aws_iam_role_policy.scheduler_runtime",
        ],
    ),
    // lambda:InvokeFunction on the destination (the scheduler)
    (
        "aws_lambda_function_event_invoke_config",
        "executor",
        &["aws_iam_role_policy.executor"],
    ),
    // nothing invokes the scheduler before it may read its table
    (
        "aws_cloudwatch_event_target",
        "sweep",
        &["aws_iam_role_policy.scheduler"],
    ),
    (
        "aws_lambda_permission",
        "api",
        &["aws_iam_role_policy.scheduler"],
    ),
    (
        "aws_lambda_function_url",
        "scheduler",
        &["aws_iam_role_policy.scheduler"],
    ),
];

fn check_ordering(module: &Module, errors: &mut Vec<String>) {
    for (kind, name, needs) in ORDERING {
        let Some(body) = module.resource(kind, name) else {
            errors.push(format!("ordering: no {kind}.{name}"));
            continue;
        };
        let deps = depends_on(body);
        for need in *needs {
            if !deps.contains(*need) {
                errors.push(format!(
                    "ordering: {kind}.{name} does not depend_on {need}, which grants what Lambda checks when it is created"
                ));
            }
        }
    }
}

/// (method, path template) of every operation the API router serves, from its OpenAPI
/// document: the router and the document are built from the same list of routes.
fn router_routes() -> BTreeSet<(String, String)> {
    let doc: serde_json::Value = serde_json::from_str(
        &lambdafusion_api::openapi()
            .to_json()
            .expect("the OpenAPI document serializes"),
    )
    .expect("the OpenAPI document is JSON");
    let paths = doc["paths"].as_object().expect("the document has paths");
    let mut out = BTreeSet::new();
    for (path, item) in paths {
        for method in [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ] {
            if item.get(method).is_some() {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    assert!(!out.is_empty(), "the OpenAPI document has no operations");
    out
}

/// Whether an HTTP API route key (`GET /health`, `ANY /v1/{proxy+}`) takes a request for
/// `method` on `path` (an OpenAPI template: `{id}` stands for one segment). API Gateway's
/// matching (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-routes.html):
/// `ANY` takes every method; `{name}` one segment; a greedy `{name+}`, last in the route,
/// one or more segments.
fn route_matches(route_key: &str, method: &str, path: &str) -> bool {
    let Some((route_method, route_path)) = route_key.split_once(' ') else {
        return false;
    };
    if route_method != "ANY" && route_method != method {
        return false;
    }
    let route: Vec<&str> = route_path.split('/').skip(1).collect();
    let wanted: Vec<&str> = path.split('/').skip(1).collect();
    for (i, part) in route.iter().enumerate() {
        if part.starts_with('{') && part.ends_with("+}") {
            return i == route.len() - 1
                && wanted.len() > i
                && wanted[i..].iter().all(|s| !s.is_empty());
        }
        let Some(segment) = wanted.get(i) else {
            return false;
        };
        // A `{name}` takes any one non-empty segment; anything else only itself.
        let variable = part.starts_with('{') && part.ends_with('}');
        let takes = if variable {
            !segment.is_empty()
        } else {
            part == segment
        };
        if !takes {
            return false;
        }
    }
    route.len() == wanted.len()
}

fn check_routes(module: &Module, served: &BTreeSet<(String, String)>, errors: &mut Vec<String>) {
    let route = module.resource("aws_apigatewayv2_route", "api");
    let Some(route) = route else {
        errors.push("routes: no aws_apigatewayv2_route.api".into());
        return;
    };
    // One route resource per key of local.api_routes, all to the scheduler's integration.
    let for_each = attr(route, "for_each").map(render).unwrap_or_default();
    if !for_each.contains("local.api_routes") {
        errors.push(format!(
            "routes: aws_apigatewayv2_route.api iterates {for_each:?}, expected local.api_routes"
        ));
    }
    let target = attr(route, "target").map(render).unwrap_or_default();
    if !target.contains("aws_apigatewayv2_integration.scheduler") {
        errors.push(format!(
            "routes: target is {target}, expected the scheduler's integration"
        ));
    }
    let keys: Vec<String> = match module.locals().get("api_routes") {
        Some(Expression::Object(object)) => object
            .keys()
            .map(|k| match k {
                ObjectKey::Expression(Expression::String(s)) => s.clone(),
                ObjectKey::Identifier(id) => id.as_str().to_string(),
                other => format!("{other:?}"),
            })
            .collect(),
        _ => {
            errors.push("routes: local.api_routes is not an object literal".into());
            return;
        }
    };
    for (method, path) in served {
        if !keys.iter().any(|k| route_matches(k, method, path)) {
            errors.push(format!(
                "routes: no route of the HTTP API takes {method} {path}, which the router serves (API Gateway answers 404 before the scheduler runs)"
            ));
        }
    }
    for key in &keys {
        if !served.iter().any(|(m, p)| route_matches(key, m, p)) {
            errors.push(format!(
                "routes: route {key:?} takes nothing the router serves"
            ));
        }
    }
}

/// The caller policy output: the function URL needs both actions (since October 2025,
/// https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html), InvokeFunction only through
/// the URL; the API needs execute-api:Invoke.
fn check_caller_policy(module: &Module, errors: &mut Vec<String>) {
    match module.output("caller_policy_json")
        .and_then(|o| attr(o, "value"))
    {
        Some(value) if render(value).contains("data.aws_iam_policy_document.caller.json") => {}
        other => errors.push(format!(
            "caller policy: output caller_policy_json is {:?}, expected data.aws_iam_policy_document.caller.json",
            other.map(render)
        )),
    }
    let Some(doc) = module.data_source("aws_iam_policy_document", "caller") else {
        errors.push("caller policy: no data.aws_iam_policy_document.caller".into());
        return;
    };
    let mut bodies: Vec<&Body> = blocks(doc, "statement").map(|b| b.body()).collect();
    for dynamic in blocks(doc, "dynamic") {
        bodies.extend(blocks(dynamic.body(), "content").map(|b| b.body()));
    }
    let actions_of = |body: &Body| -> BTreeSet<String> {
        match attr(body, "actions") {
            Some(Expression::Array(items)) => items
                .iter()
                .filter_map(string_literal)
                .map(str::to_string)
                .collect(),
            _ => BTreeSet::new(),
        }
    };
    let conditions_of = |body: &Body| -> Vec<(String, String, String)> {
        blocks(body, "condition")
            .map(|c| {
                let b = c.body();
                (
                    attr(b, "test").map(render).unwrap_or_default(),
                    attr(b, "variable").map(render).unwrap_or_default(),
                    attr(b, "values").map(render).unwrap_or_default(),
                )
            })
            .collect()
    };
    let mut granted = BTreeSet::new();
    for body in &bodies {
        let actions = actions_of(body);
        let resources: Vec<String> = match attr(body, "resources") {
            Some(Expression::Array(items)) => items.iter().map(render).collect(),
            other => other.map(render).into_iter().collect(),
        };
        for action in &actions {
            granted.insert(action.clone());
            if action.starts_with("lambda:") && resources != [SCHEDULER_FN] {
                errors.push(format!(
                    "caller policy: {action} is on {resources:?}, expected [{SCHEDULER_FN}]"
                ));
            }
        }
        if actions.contains("lambda:InvokeFunction") {
            let through_url = conditions_of(body).iter().any(|(test, var, values)| {
                test == "\"Bool\""
                    && var == "\"lambda:InvokedViaFunctionUrl\""
                    && values.contains("\"true\"")
            });
            if !through_url {
                errors.push("caller policy: lambda:InvokeFunction is not limited to the function URL (condition Bool lambda:InvokedViaFunctionUrl = true): a direct Invoke could forge an HTTP event".into());
            }
        }
    }
    for wanted in [
        "lambda:InvokeFunctionUrl",
        "lambda:InvokeFunction",
        "execute-api:Invoke",
    ] {
        if !granted.contains(wanted) {
            errors.push(format!("caller policy: does not grant {wanted}"));
        }
    }
}

/// Every lifecycle rule names its objects: an empty `filter {}`, or none, draws a warning
/// ("Invalid Attribute Combination") from AWS provider 5.90 to 5.98; `prefix = ""` does not.
fn check_lifecycle_filters(module: &Module, errors: &mut Vec<String>) {
    for (Address { kind, name }, body) in module.resources() {
        if kind != "aws_s3_bucket_lifecycle_configuration" {
            continue;
        }
        for rule in blocks(body, "rule") {
            let id = attr(rule.body(), "id").map(render).unwrap_or_default();
            let filters: Vec<&Block> = blocks(rule.body(), "filter").collect();
            let set = filters.iter().any(|f| {
                f.body().attributes().next().is_some() || f.body().blocks().next().is_some()
            });
            if !set {
                errors.push(format!(
                    "lifecycle {name} rule {id}: an empty or missing filter (use filter {{ prefix = \"\" }} for the whole bucket)"
                ));
            }
        }
    }
}

/// Lambda takes at most 50 MB zipped in the request itself
/// (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html): each function
/// takes its code through S3 when `local.code_in_s3` says so, which it must say below that.
fn check_code_upload(module: &Module, errors: &mut Vec<String>) {
    use hcl::eval::Evaluate;
    match module.locals().get("direct_upload_max_bytes").map(|e| e.evaluate(&hcl::eval::Context::new())) {
        Some(Ok(hcl::Value::Number(n))) if n.as_f64().is_some_and(|b| b > 0.0 && b < 50.0 * 1024.0 * 1024.0) => {}
        other => errors.push(format!(
            "code upload: local.direct_upload_max_bytes is {other:?}, expected a number of bytes below Lambda's 50 MB direct-upload limit"
        )),
    }
    for name in ["scheduler", "executor"] {
        let Some(body) = function(module, name) else {
            continue;
        };
        let wanted = [
            (
                "filename",
                format!("local.code_in_s3.{name} ? null : var.{name}_zip_path"),
            ),
            (
                "s3_bucket",
                format!("local.code_in_s3.{name} ? aws_s3_object.code[\"{name}\"].bucket : null"),
            ),
            (
                "s3_key",
                format!("local.code_in_s3.{name} ? aws_s3_object.code[\"{name}\"].key : null"),
            ),
            (
                "source_code_hash",
                format!("filebase64sha256(var.{name}_zip_path)"),
            ),
        ];
        for (key, expected) in wanted {
            let actual = attr(body, key).map(render).unwrap_or_default();
            if actual != expected {
                errors.push(format!(
                    "code upload: {name}.{key} is {actual:?}, expected {expected:?}"
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn terraform_module_matches_contract() {
    let errors = check(&module_source(), &contract());
    assert!(
        errors.is_empty(),
        "infra/terraform drifted from aws/src/contract.rs:\n  - {}",
        errors.join("\n  - ")
    );
}

/// Replaces the first occurrence of `from`, which must be present (else the mutation, and
/// the negative test, would be vacuous).
fn mutate(src: &str, from: &str, to: &str) -> String {
    assert!(
        src.contains(from),
        "mutation target not found in the module: {from:?}"
    );
    src.replacen(from, to, 1)
}

fn assert_detected(errors: Vec<String>, needle: &str) {
    assert!(
        errors.iter().any(|e| e.contains(needle)),
        "the check did not notice the mutation (wanted an error containing {needle:?}); errors: {errors:#?}"
    );
}

#[test]
fn negative_extra_action_in_terraform_is_detected() {
    let src = mutate(
        &module_source(),
        "\"dynamodb:BatchWriteItem\",",
        "\"dynamodb:BatchWriteItem\",\n      \"dynamodb:Scan\",",
    );
    assert_detected(check(&src, &contract()), "dynamodb:Scan");
}

#[test]
fn negative_missing_action_in_terraform_is_detected() {
    let src = mutate(&module_source(), "\"dynamodb:DeleteItem\",", "");
    assert_detected(check(&src, &contract()), "lacks dynamodb:DeleteItem");
}

#[test]
fn negative_action_added_to_contract_only_is_detected() {
    let mut lists = ActionLists::from_contract();
    lists.executor_table.push("dynamodb:BatchWriteItem");
    let errors = check(&module_source(), &contract_with(&lists));
    assert_detected(errors.clone(), "lacks dynamodb:BatchWriteItem");
    assert_detected(errors, "executor/JobTable: actions");
}

/// `TransactWriteItems` is not an IAM action; granting it anyway is drift like any other.
#[test]
fn negative_transact_write_items_in_terraform_is_detected() {
    let src = mutate(
        &module_source(),
        "\"dynamodb:BatchWriteItem\",\n    ]",
        "\"dynamodb:BatchWriteItem\",\n      \"dynamodb:TransactWriteItems\",\n    ]",
    );
    let src = mutate(
        &src,
        "\"dynamodb:DeleteItem\",\n    ]",
        "\"dynamodb:DeleteItem\",\n      \"dynamodb:TransactWriteItems\",\n    ]",
    );
    let errors = check(&src, &contract());
    assert_detected(
        errors.clone(),
        "scheduler role scheduler: grants dynamodb:TransactWriteItems",
    );
    assert_detected(
        errors,
        "executor role executor: grants dynamodb:TransactWriteItems",
    );
}

/// The executor lists the shuffle bucket when the scheduler's step it runs after a job's
/// last stage cleans up: a module without that statement must be refused (both as a
/// missing action and as a missing statement).
#[test]
fn negative_shuffle_list_bucket_missing_from_executor_is_detected() {
    let src = mutate(
        &module_source(),
        "  statement {\n    sid       = \"ShuffleBucket\"\n    actions   = [\"s3:ListBucket\"]\n    resources = [aws_s3_bucket.shuffle.arn]\n  }\n\n  # Shuffle output (put)",
        "  # Shuffle output (put)",
    );
    let errors = check(&src, &contract());
    assert_detected(
        errors.clone(),
        "executor role executor: lacks s3:ListBucket",
    );
    assert_detected(
        errors,
        "executor role executor: no statement with sid ShuffleBucket",
    );
}

/// Same for the data buckets: the stage plan names the executor's files.
#[test]
fn negative_data_list_bucket_granted_to_executor_is_detected() {
    let src = mutate(
        &module_source(),
        "  # Reading table files.",
        "  dynamic \"statement\" {\n    for_each = length(var.data_buckets) > 0 ? [1] : []\n    content {\n      sid       = \"DataBuckets\"\n      actions   = [\"s3:ListBucket\"]\n      resources = local.data_bucket_arns\n    }\n  }\n\n  # Reading table files.",
    );
    // (s3:ListBucket itself it has: on the shuffle bucket.)
    let errors = check(&src, &contract());
    assert_detected(
        errors,
        "executor role executor: unexpected statement DataBuckets",
    );
}

/// An empty contract list must not be "satisfied" by a statement without actions.
#[test]
fn negative_statement_without_actions_is_detected() {
    let src = mutate(
        &module_source(),
        "  # Reading table files.",
        "  statement {\n    sid       = \"DataBuckets\"\n    actions   = []\n    resources = local.data_bucket_arns\n  }\n\n  # Reading table files.",
    );
    let errors = check(&src, &contract());
    assert_detected(
        errors.clone(),
        "executor/DataBuckets: statement has no actions",
    );
    assert_detected(
        errors,
        "executor role executor: unexpected statement DataBuckets",
    );
}

/// A list the contract empties must make its statement unwanted, a list it fills must make
/// one required: the per-role S3 lists are read one by one, not shared between the roles.
#[test]
fn negative_per_role_bucket_lists_are_enforced() {
    let mut lists = ActionLists::from_contract();
    lists.executor_bucket.clear();
    let errors = check(&module_source(), &contract_with(&lists));
    assert_detected(
        errors,
        "executor role executor: unexpected statement ShuffleBucket",
    );

    let mut lists = ActionLists::from_contract();
    lists.executor_data_buckets = vec!["s3:ListBucket"];
    assert_detected(
        check(&module_source(), &contract_with(&lists)),
        "executor role executor: no statement with sid DataBuckets",
    );

    let mut lists = ActionLists::from_contract();
    lists.scheduler_data_buckets.clear();
    assert_detected(
        check(&module_source(), &contract_with(&lists)),
        "scheduler role scheduler: unexpected statement DataBuckets",
    );
}

/// Job items never wake the scheduler (cancellation sets CANCELLED directly): a filter for
/// them is one too many.
#[test]
fn negative_extra_stream_filter_is_detected() {
    let src = mutate(
        &module_source(),
        "  filter_criteria {\n",
        "  filter_criteria {\n    filter {\n      pattern = jsonencode({\n        dynamodb = {\n          NewImage = {\n            sk    = { S = [\"META\"] }\n            state = { S = [\"CANCELLING\"] }\n          }\n        }\n      })\n    }\n\n",
    );
    assert_detected(check(&src, &contract()), "stream: 3 filters, expected 2");
}

#[test]
fn negative_wrong_resource_is_detected() {
    let src = mutate(
        &module_source(),
        "resources = local.executor_arns",
        "resources = [aws_lambda_function.scheduler.arn]",
    );
    assert_detected(
        check(&src, &contract()),
        "scheduler/DispatchTasks: resources",
    );
}

#[test]
fn negative_unknown_env_var_is_detected() {
    let src = mutate(
        &module_source(),
        "LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name",
        "LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name\n      LAMBDAFUSION_BOGUS = \"1\"",
    );
    assert_detected(check(&src, &contract()), "LAMBDAFUSION_BOGUS");
}

#[test]
fn negative_missing_required_env_var_is_detected() {
    let src = mutate(
        &module_source(),
        "LAMBDAFUSION_SCHEDULER_FUNCTION = local.scheduler_function_name",
        "",
    );
    assert_detected(
        check(&src, &contract()),
        "scheduler: required LAMBDAFUSION_SCHEDULER_FUNCTION is not set",
    );
}

#[test]
fn negative_env_var_added_to_contract_only_is_detected() {
    let mut c = contract();
    c.all_env.insert("LAMBDAFUSION_SOMETHING_NEW".into());
    assert_detected(check(&module_source(), &c), "LAMBDAFUSION_SOMETHING_NEW");
}

#[test]
fn negative_wrong_runtime_and_architecture_are_detected() {
    let src = mutate(
        &module_source(),
        "runtime          = \"provided.al2023\"",
        "runtime          = \"provided.al2\"",
    );
    assert_detected(
        check(&src, &contract()),
        "runtime is Some(\"provided.al2\")",
    );

    // A literal instead of what was packaged is refused.
    let src = mutate(
        &module_source(),
        "architectures    = [local.architecture]",
        "architectures    = [\"x86_64\"]",
    );
    assert_detected(
        check(&src, &contract()),
        "scheduler: architectures is Some(\"[\\\"x86_64\\\"]\"), must be [local.architecture]",
    );

    // So is a function without the precondition that refuses a mismatch.
    let src = mutate(
        &module_source(),
        "condition     = local.architecture_problem.executor == null",
        "condition     = true",
    );
    assert_detected(
        check(&src, &contract()),
        "executor: no precondition on local.architecture_problem",
    );
}

#[test]
fn negative_architecture_validation_without_x86_is_detected() {
    let src = mutate(
        &module_source(),
        "contains([\"arm64\", \"x86_64\"], var.architecture)",
        "contains([\"arm64\"], var.architecture)",
    );
    assert_detected(
        check(&src, &contract()),
        "variable architecture: its validation does not admit \"x86_64\"",
    );
}

/// The mapping depended on the roles' policies before this test existed; dropping one is
/// the failure a first apply would meet (the on-failure queue checked before it is granted).
#[test]
fn negative_missing_policy_dependency_is_detected() {
    let src = mutate(
        &module_source(),
        "    aws_iam_role_policy.scheduler,\n    aws_iam_role_policy.scheduler_runtime,\n  ]\n}",
        "    aws_iam_role_policy.scheduler,\n  ]\n}",
    );
    assert_detected(
        check(&src, &contract()),
        "ordering: aws_lambda_event_source_mapping.stream does not depend_on aws_iam_role_policy.scheduler_runtime",
    );
    let src = mutate(
        &module_source(),
        "depends_on = [aws_iam_role_policy.executor]",
        "depends_on = [aws_iam_role.executor]",
    );
    assert_detected(
        check(&src, &contract()),
        "ordering: aws_lambda_function_event_invoke_config.executor does not depend_on aws_iam_role_policy.executor",
    );
}

/// `/health` and the console's `/` are outside `ANY /v1/{proxy+}`: without their routes
/// API Gateway answers 404 (the gap this check was written for).
#[test]
fn negative_missing_routes_are_detected() {
    let src = mutate(&module_source(), "\"GET /health\"      = true\n", "");
    let src = mutate(&src, "\"GET /\"            = true\n", "");
    let errors = check(&src, &contract());
    assert_detected(errors.clone(), "no route of the HTTP API takes GET /health");
    assert_detected(errors, "no route of the HTTP API takes GET /,");
    // A route to nowhere is refused as well.
    let src = mutate(
        &module_source(),
        "\"GET /health\"      = true\n",
        "\"GET /health\"      = true\n    \"GET /metrics\" = true\n",
    );
    assert_detected(
        check(&src, &contract()),
        "route \"GET /metrics\" takes nothing the router serves",
    );
}

/// What the route check covers: the router's own list, liveness and the console included.
#[test]
fn router_routes_include_health_console_and_openapi() {
    let served = router_routes();
    for (method, path) in [
        ("GET", "/health"),
        ("GET", "/"),
        ("GET", "/console.js"),
        ("GET", "/console.css"),
        ("GET", "/v1/openapi.json"),
        ("POST", "/v1/queries"),
    ] {
        assert!(
            served.contains(&(method.to_string(), path.to_string())),
            "the router's OpenAPI document lacks {method} {path}: {served:?}"
        );
    }
}

#[test]
fn route_matching_follows_api_gateway() {
    assert!(route_matches(
        "ANY /v1/{proxy+}",
        "GET",
        "/v1/queries/{id}/result"
    ));
    assert!(route_matches("ANY /v1/{proxy+}", "POST", "/v1/queries"));
    assert!(!route_matches("ANY /v1/{proxy+}", "GET", "/v1"));
    assert!(!route_matches("ANY /v1/{proxy+}", "GET", "/health"));
    assert!(!route_matches("ANY /v1/{proxy+}", "GET", "/"));
    assert!(route_matches("GET /", "GET", "/"));
    assert!(!route_matches("GET /", "POST", "/"));
    assert!(!route_matches("GET /", "GET", "/health"));
    assert!(route_matches(
        "GET /v1/queries/{id}",
        "GET",
        "/v1/queries/{id}"
    ));
    assert!(!route_matches(
        "GET /v1/queries/{id}",
        "GET",
        "/v1/queries/{id}/result"
    ));
}

#[test]
fn negative_caller_policy_without_invoke_function_is_detected() {
    let src = mutate(
        &module_source(),
        "actions   = [\"lambda:InvokeFunction\"]",
        "actions   = [\"lambda:GetFunctionUrlConfig\"]",
    );
    assert_detected(
        check(&src, &contract()),
        "caller policy: does not grant lambda:InvokeFunction",
    );
    let src = mutate(
        &module_source(),
        "variable = \"lambda:InvokedViaFunctionUrl\"",
        "variable = \"aws:SecureTransport\"",
    );
    assert_detected(
        check(&src, &contract()),
        "lambda:InvokeFunction is not limited to the function URL",
    );
}

/// A zip over the limit must not go in the request: a threshold at or past 50 MB, or a
/// function that always takes the file, is refused.
#[test]
fn negative_code_upload_past_the_limit_is_detected() {
    let src = mutate(
        &module_source(),
        "direct_upload_max_bytes = 49 * 1024 * 1024",
        "direct_upload_max_bytes = 60 * 1024 * 1024",
    );
    assert_detected(
        check(&src, &contract()),
        "code upload: local.direct_upload_max_bytes",
    );
    let src = mutate(
        &module_source(),
        "filename         = local.code_in_s3.executor ? null : var.executor_zip_path",
        "filename         = var.executor_zip_path",
    );
    assert_detected(check(&src, &contract()), "code upload: executor.filename");
}

#[test]
fn negative_empty_lifecycle_filter_is_detected() {
    let src = mutate(
        &module_source(),
        "filter {\n      prefix = \"\"\n    }",
        "filter {}",
    );
    assert_detected(
        check(&src, &contract()),
        "rule \"abort-incomplete-multipart-uploads\": an empty or missing filter",
    );
}

#[test]
fn negative_lambda_retries_on_tasks_are_detected() {
    let src = mutate(
        &module_source(),
        "maximum_retry_attempts       = 0",
        "maximum_retry_attempts       = 2",
    );
    assert_detected(check(&src, &contract()), "executor maximum_retry_attempts");
}

#[test]
fn negative_setting_default_differing_from_the_code_is_detected() {
    let src = module_source();
    let at = src.find("variable \"max_query_seconds\" {").unwrap();
    let default = at + src[at..].find("default     = 3600").unwrap();
    let src = format!(
        "{}default     = 7200{}",
        &src[..default],
        &src[default + 18..]
    );
    assert_detected(check(&src, &contract()), "defaults to 7200");
}

#[test]
fn negative_setting_fed_from_another_variable_is_detected() {
    let src = mutate(
        &module_source(),
        "LAMBDAFUSION_MAX_ATTEMPTS             = var.max_attempts",
        "LAMBDAFUSION_MAX_ATTEMPTS             = var.dispatch_fanout",
    );
    assert_detected(
        check(&src, &contract()),
        "does not come from var.max_attempts",
    );
}

#[test]
fn negative_setting_without_its_variable_is_detected() {
    let module = parse_module(&module_source());
    let mut settings = lambdafusion::config::SETTINGS.to_vec();
    settings[0].terraform = Some("no_such_variable");
    let mut errors = Vec::new();
    check_settings(&module, &settings, &mut errors);
    assert_detected(errors, "no variable \"no_such_variable\"");
}

#[test]
fn negative_a_local_copy_of_a_code_default_that_drifted_is_detected() {
    let src = mutate(
        &module_source(),
        "code_default_max_tasks_per_stage = 1000",
        "code_default_max_tasks_per_stage = 500",
    );
    assert_detected(
        check(&src, &contract()),
        "local.code_default_max_tasks_per_stage is 500 but the code's max_tasks_per_stage defaults to 1000",
    );
}
