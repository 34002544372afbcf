//! The local stack's configuration, read from the deployment's Terraform module.
//!
//! `lambdafusion-local config --terraform <module dir> --local <file> --out <file>` writes
//! the emulator's config (see [`crate::config`]) from two sources:
//!
//! * **the Terraform module** (`infra/terraform/modules/lambdafusion`), for everything the
//!   deployment decides: each function's environment, memory, timeout, `/tmp` size and
//!   reserved concurrency; the asynchronous invoke config (retries, event age, on-failure
//!   destination); the DynamoDB stream trigger (batch size, parallelization, bisection,
//!   retries, starting position, filter patterns); the HTTP entry of a function (a function
//!   URL's auth type, or an API Gateway integration's timeout); the scheduled EventBridge
//!   rules that invoke a function (the sweep: the rule's schedule expression, its Lambda
//!   target, the target's retry policy);
//! * **the local part** (a JSON file `local/localstack/setup.py` writes), for what only the
//!   local machine decides: endpoints, dummy credentials, the commands that run the
//!   functions, instances, listen addresses, timing, the DynamoDB / S3 front, and a
//!   schedule's local period (`every_secs`).
//!
//! So a variable Terraform does not set does not reach a function locally either, and one
//! it sets on one function reaches that function only.
//!
//! # How the module is evaluated
//!
//! The `.tf` files are parsed with hcl-rs and the needed expressions are evaluated with
//! [`hcl::eval`], in a context that defines:
//!
//! * `var.*`: each variable's default, or the value given with `--var NAME=VALUE`, parsed as
//!   Terraform parses `-var`: literally for `string`, `number`, `bool` and untyped variables,
//!   as an HCL expression for collection and structural types
//!   (<https://developer.hashicorp.com/terraform/language/values/variables#variables-on-the-command-line>);
//!   `validation` blocks are not evaluated (that is `terraform validate`'s job);
//! * `local.*`: the module's locals, evaluated on demand;
//! * the attributes of the resources the local stack plays, under the stack's names
//!   (`--name ADDRESS=NAME`): `aws_lambda_function` (`function_name`, `id`, `arn`,
//!   `qualified_arn`, `invoke_arn`), `aws_dynamodb_table` (`name`, `id`, `arn`,
//!   `stream_arn`), `aws_s3_bucket` (`id`, `bucket`, `arn`), `aws_cloudwatch_event_rule`
//!   (`name`, `id`, `arn`). A resource without `--name`
//!   keeps the name its configuration gives it; one whose name is decided by AWS at apply
//!   (a bucket with `bucket = null`) has unknown attributes. When a resource's name
//!   attribute is exactly `local.X`, naming the resource also sets `local.X`, so every
//!   other use of that name (another function's environment) follows;
//! * the Terraform functions the module uses, implemented here with Terraform's semantics
//!   ([`functions`]): `merge`, `coalesce`, `tostring`, `tonumber`, `tobool`, `join`,
//!   `jsonencode`, `max`, `min`, `length`.
//!
//! What cannot be evaluated locally fails with a message naming the resource, the attribute
//! and the reference: a data source, an unknown resource attribute (an ARN of a queue, a
//! bucket name AWS picks), a variable without default, a function not implemented here.
//!
//! Every attribute of the resources read here is either derived or listed with the reason it
//! does not matter locally; an attribute this file does not know is an error, so a new
//! setting in the module cannot be silently ignored by the local stack.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use hcl::eval::{Context, Evaluate};
use hcl::expr::{Expression, ObjectKey, Operation, TraversalOperator};
use hcl::template::{Directive, Element, Template};
use hcl::{Body, Identifier, Value};
use serde_json::{json, Value as Json};

use crate::iam::{Effect, RoleConfig, Statement};
use crate::Error;

/// The label of the stream ARN the local stack gives its tables
/// (`arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>`); AWS uses the
/// stream's creation time, which only exists after apply.
pub const STREAM_LABEL: &str = "local";

// ---------------------------------------------------------------------------------------
// The module
// ---------------------------------------------------------------------------------------

/// A resource address, `<type>.<name>` (e.g. `aws_lambda_function.scheduler`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    /// Resource type, e.g. `aws_lambda_function`.
    pub kind: String,
    /// Resource name in the module, e.g. `scheduler`.
    pub name: String,
}

impl Address {
    fn new(kind: &str, name: &str) -> Address {
        Address {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.kind, self.name)
    }
}

impl FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Address, String> {
        match s.split_once('.') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('.') => {
                Ok(Address::new(kind, name))
            }
            _ => Err(format!(
                "{s:?} is not a resource address (<type>.<name>, e.g. aws_lambda_function.scheduler)"
            )),
        }
    }
}

/// A Terraform module as written: its variables, locals and resources (the local stack
/// evaluates them; `tests/tests/end_to_end/terraform_contract.rs` reads them as written). Terraform
/// merges every `.tf` file of a directory into one module; so does this.
#[derive(Debug, Clone)]
pub struct Module {
    variables: BTreeMap<String, Body>,
    locals: BTreeMap<String, Expression>,
    resources: BTreeMap<Address, Body>,
    data: BTreeMap<Address, Body>,
    outputs: BTreeMap<String, Body>,
}

impl Module {
    /// Reads and parses every `.tf` file of `dir`.
    pub fn load(dir: &Path) -> Result<Module, Error> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read the Terraform module {}: {e}", dir.display()))?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "tf"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(format!("no .tf files in {}", dir.display()).into());
        }
        let mut files = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            files.push((p.display().to_string(), text));
        }
        Module::parse(&files)
    }

    /// Parses a module from `(file name, text)` pairs.
    pub fn parse(files: &[(String, String)]) -> Result<Module, Error> {
        let mut module = Module {
            variables: BTreeMap::new(),
            locals: BTreeMap::new(),
            resources: BTreeMap::new(),
            data: BTreeMap::new(),
            outputs: BTreeMap::new(),
        };
        for (file, text) in files {
            let body = hcl::parse(text).map_err(|e| format!("{file}: not valid HCL: {e}"))?;
            for block in body.blocks() {
                let labels: Vec<&str> = block.labels().iter().map(|l| l.as_str()).collect();
                match (block.identifier(), labels.as_slice()) {
                    ("variable", [name]) => {
                        let body = block.body().clone();
                        if module.variables.insert(name.to_string(), body).is_some() {
                            return Err(format!("{file}: variable {name:?} declared twice").into());
                        }
                    }
                    ("locals", []) => {
                        for a in block.body().attributes() {
                            let key = a.key().to_string();
                            if module
                                .locals
                                .insert(key.clone(), a.expr().clone())
                                .is_some()
                            {
                                return Err(format!("{file}: local.{key} defined twice").into());
                            }
                        }
                    }
                    ("resource", [kind, name]) => {
                        let address = Address::new(kind, name);
                        if module
                            .resources
                            .insert(address.clone(), block.body().clone())
                            .is_some()
                        {
                            return Err(format!("{file}: resource {address} defined twice").into());
                        }
                    }
                    // Data sources and outputs do not shape the functions (a data source
                    // used by a derived expression fails there), the contract test reads them.
                    ("data", [kind, name]) => {
                        let address = Address::new(kind, name);
                        if module
                            .data
                            .insert(address.clone(), block.body().clone())
                            .is_some()
                        {
                            return Err(format!("{file}: data {address} defined twice").into());
                        }
                    }
                    ("output", [name]) => {
                        let body = block.body().clone();
                        if module.outputs.insert(name.to_string(), body).is_some() {
                            return Err(format!("{file}: output {name:?} defined twice").into());
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(module)
    }

    /// Every resource, in address order (type, then name).
    pub fn resources(&self) -> &BTreeMap<Address, Body> {
        &self.resources
    }

    /// The resource `kind.name`, as written.
    pub fn resource(&self, kind: &str, name: &str) -> Option<&Body> {
        self.resources.get(&Address::new(kind, name))
    }

    /// The module's locals, as written.
    pub fn locals(&self) -> &BTreeMap<String, Expression> {
        &self.locals
    }

    /// The data source `data.kind.name`, as written.
    pub fn data_source(&self, kind: &str, name: &str) -> Option<&Body> {
        self.data.get(&Address::new(kind, name))
    }

    /// The `output "name"` block, as written.
    pub fn output(&self, name: &str) -> Option<&Body> {
        self.outputs.get(name)
    }

    /// The `variable "name"` block, as written.
    pub fn variable(&self, name: &str) -> Option<&Body> {
        self.variables.get(name)
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a Address, &'a Body)> {
        self.resources.iter().filter(move |(a, _)| a.kind == kind)
    }

    fn has_kind(&self, kind: &str) -> bool {
        self.resources.keys().any(|a| a.kind == kind)
    }
}

/// The expression of attribute `key` of a block body, if written.
pub fn attr<'a>(body: &'a Body, key: &str) -> Option<&'a Expression> {
    body.attributes().find(|a| a.key() == key).map(|a| a.expr())
}

fn block<'a>(body: &'a Body, identifier: &str) -> Option<&'a Body> {
    body.blocks()
        .find(|b| b.identifier() == identifier)
        .map(|b| b.body())
}

// ---------------------------------------------------------------------------------------
// Inputs: variables and the stack's names
// ---------------------------------------------------------------------------------------

/// What the caller decides about the deployment being evaluated.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Variable values, as `terraform plan -var NAME=VALUE` takes them (text).
    pub vars: BTreeMap<String, String>,
    /// The stack's names of resources (`aws_dynamodb_table.jobs` -> `lambdafusion`).
    pub names: BTreeMap<Address, String>,
    /// Region in the ARNs the stack's resources get.
    pub region: String,
    /// Account id in those ARNs.
    pub account: String,
}

impl Default for Inputs {
    fn default() -> Inputs {
        Inputs {
            vars: BTreeMap::new(),
            names: BTreeMap::new(),
            region: "us-east-1".into(),
            account: "000000000000".into(),
        }
    }
}

/// The attribute that names a resource of each type the local stack plays.
const NAMED_KINDS: &[(&str, &str)] = &[
    ("aws_lambda_function", "function_name"),
    ("aws_dynamodb_table", "name"),
    ("aws_s3_bucket", "bucket"),
    ("aws_cloudwatch_event_rule", "name"),
];

/// Resources the stack does not play but whose ARN it knows, from their `name`, for the
/// IAM statements that name them ([`crate::iam`]): they cannot be renamed with `--name`.
const ARN_KINDS: &[(&str, &str)] = &[
    ("aws_iam_role", "name"),
    ("aws_cloudwatch_log_group", "name"),
    ("aws_sqs_queue", "name"),
];

fn name_attribute(kind: &str) -> Option<&'static str> {
    NAMED_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, a)| *a)
}

/// Whether a type constraint is parsed literally from `-var` text (primitive types, `any`
/// and no type), rather than as an HCL expression.
fn parsed_literally(ty: Option<&Expression>) -> bool {
    match ty {
        None => true,
        Some(Expression::Variable(v)) => {
            matches!(v.as_str(), "string" | "number" | "bool" | "any")
        }
        Some(_) => false,
    }
}

/// Converts `value` to the type constraint `ty`, as Terraform converts variable values:
/// numbers and bools to strings and back, element-wise for `list`, `set` and `map`.
/// Structural types (`object`, `tuple`) and `any` are taken as they are.
fn convert(value: Value, ty: Option<&Expression>) -> Result<Value, String> {
    let Some(ty) = ty else { return Ok(value) };
    if value.is_null() {
        return Ok(value);
    }
    match ty {
        Expression::Variable(v) => match v.as_str() {
            "string" => match value {
                Value::String(_) => Ok(value),
                Value::Number(n) => Ok(Value::String(functions::number_text(&n))),
                Value::Bool(b) => Ok(Value::String(b.to_string())),
                other => Err(format!("a string is required, not {}", type_name(&other))),
            },
            "number" => match value {
                Value::Number(_) => Ok(value),
                Value::String(s) => functions::parse_number(&s)
                    .map(Value::Number)
                    .ok_or_else(|| format!("{s:?} is not a number")),
                other => Err(format!("a number is required, not {}", type_name(&other))),
            },
            "bool" => match value {
                Value::Bool(_) => Ok(value),
                Value::String(s) if s == "true" => Ok(Value::Bool(true)),
                Value::String(s) if s == "false" => Ok(Value::Bool(false)),
                other => Err(format!("a bool is required, not {other}")),
            },
            _ => Ok(value),
        },
        Expression::FuncCall(call) if call.args.len() == 1 => {
            let element = Some(&call.args[0]);
            match (call.name.name.as_str(), value) {
                ("list" | "set", Value::Array(items)) => items
                    .into_iter()
                    .map(|v| convert(v, element))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array),
                ("map", Value::Object(map)) => map
                    .into_iter()
                    .map(|(k, v)| Ok((k, convert(v, element)?)))
                    .collect::<Result<hcl::Map<_, _>, String>>()
                    .map(Value::Object),
                ("list" | "set", other) => {
                    Err(format!("a list is required, not {}", type_name(&other)))
                }
                ("map", other) => Err(format!("a map is required, not {}", type_name(&other))),
                (_, other) => Ok(other),
            }
        }
        _ => Ok(value),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// An expression with no references (a variable default, an HCL `-var` value).
fn constant(expr: &Expression) -> Result<Value, String> {
    let mut ctx = Context::new();
    functions::declare(&mut ctx);
    expr.evaluate(&ctx).map_err(|e| e.to_string())
}

/// `var.*`: defaults, overridden by the inputs.
fn variable_values(module: &Module, inputs: &Inputs) -> Result<hcl::Map<String, Value>, Error> {
    for name in inputs.vars.keys() {
        if !module.variables.contains_key(name) {
            return Err(format!(
                "--var {name}: the module declares no variable {name:?} (variables: {})",
                module
                    .variables
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        }
    }
    let mut vars = hcl::Map::new();
    for (name, decl) in &module.variables {
        let ty = attr(decl, "type");
        let value = match inputs.vars.get(name) {
            Some(text) if parsed_literally(ty) => Value::String(text.clone()),
            Some(text) => {
                let expr = Expression::from_str(text)
                    .map_err(|e| format!("--var {name}: not an HCL expression: {e}"))?;
                constant(&expr).map_err(|e| format!("--var {name}: {e}"))?
            }
            None => match attr(decl, "default") {
                Some(expr) => {
                    constant(expr).map_err(|e| format!("variable {name:?}: default: {e}"))?
                }
                // No value: a reference to it fails, naming the variable.
                None => continue,
            },
        };
        let value = convert(value, ty).map_err(|e| format!("var.{name}: {e}"))?;
        vars.insert(name.clone(), value);
    }
    Ok(vars)
}

// ---------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------

/// What the local stack knows of one resource.
#[derive(Debug, Clone)]
struct Known {
    attrs: hcl::Map<String, Value>,
    /// Why the attributes are unknown, if they are.
    unknown: Option<String>,
}

/// An evaluation scope: variables, locals (lazily, memoized), resource attributes.
struct Scope<'m> {
    module: &'m Module,
    vars: hcl::Map<String, Value>,
    /// Locals set by naming the resource they name.
    pinned: BTreeMap<String, Value>,
    /// `None` while the stack's names are being worked out (no resource attributes yet).
    resources: Option<BTreeMap<String, BTreeMap<String, Known>>>,
    locals: RefCell<BTreeMap<String, Result<Value, String>>>,
    evaluating: RefCell<Vec<String>>,
}

impl<'m> Scope<'m> {
    fn new(
        module: &'m Module,
        vars: hcl::Map<String, Value>,
        pinned: BTreeMap<String, Value>,
        resources: Option<BTreeMap<String, BTreeMap<String, Known>>>,
    ) -> Scope<'m> {
        Scope {
            module,
            vars,
            pinned,
            resources,
            locals: RefCell::new(BTreeMap::new()),
            evaluating: RefCell::new(Vec::new()),
        }
    }

    /// Evaluates an expression; the error names the reference or function that failed.
    fn eval(&self, expr: &Expression) -> Result<Value, String> {
        let mut refs = BTreeSet::new();
        references(expr, &mut Vec::new(), &mut refs);
        for path in &refs {
            self.check_reference(path)?;
        }
        let mut ctx = Context::new();
        functions::declare(&mut ctx);
        ctx.declare_var("var", Value::Object(self.vars.clone()));
        let mut locals: hcl::Map<String, Value> = self
            .locals
            .borrow()
            .iter()
            .filter_map(|(k, v)| v.as_ref().ok().map(|v| (k.clone(), v.clone())))
            .collect();
        for (k, v) in &self.pinned {
            locals.insert(k.clone(), v.clone());
        }
        ctx.declare_var("local", Value::Object(locals));
        // The one data source the stack answers: the partition is `aws`.
        let partitions: hcl::Map<String, Value> = self
            .module
            .data
            .keys()
            .filter(|a| a.kind == "aws_partition")
            .map(|a| {
                let attrs: hcl::Map<String, Value> = [
                    ("partition", "aws"),
                    ("id", "aws"),
                    ("dns_suffix", "amazonaws.com"),
                    ("reverse_dns_prefix", "com.amazonaws"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect();
                (a.name.clone(), Value::Object(attrs))
            })
            .collect();
        let mut data = hcl::Map::new();
        data.insert("aws_partition".to_string(), Value::Object(partitions));
        ctx.declare_var("data", Value::Object(data));
        if let Some(resources) = &self.resources {
            for (kind, by_name) in resources {
                let Ok(ident) = Identifier::new(kind.as_str()) else {
                    continue;
                };
                let objects: hcl::Map<String, Value> = by_name
                    .iter()
                    .filter(|(_, k)| k.unknown.is_none())
                    .map(|(name, k)| (name.clone(), Value::Object(k.attrs.clone())))
                    .collect();
                ctx.declare_var(ident, Value::Object(objects));
            }
        }
        expr.evaluate(&ctx).map_err(|e| e.to_string())
    }

    /// A local's value, evaluated once.
    fn local(&self, name: &str) -> Result<Value, String> {
        if let Some(v) = self.pinned.get(name) {
            return Ok(v.clone());
        }
        if let Some(done) = self.locals.borrow().get(name) {
            return done.clone();
        }
        let Some(expr) = self.module.locals.get(name) else {
            return Err(format!("local.{name} is not defined in the module"));
        };
        if self.evaluating.borrow().iter().any(|n| n == name) {
            return Err(format!("local.{name} depends on itself"));
        }
        self.evaluating.borrow_mut().push(name.to_string());
        let result = self.eval(expr).map_err(|e| format!("local.{name}: {e}"));
        self.evaluating.borrow_mut().pop();
        self.locals
            .borrow_mut()
            .insert(name.to_string(), result.clone());
        result
    }

    /// Fails, saying why, on a reference that cannot be evaluated locally; evaluates the
    /// locals an expression needs.
    fn check_reference(&self, path: &[String]) -> Result<(), String> {
        let root = path[0].as_str();
        let second = path.get(1);
        match root {
            "var" => {
                let name = second.ok_or("`var` must be followed by a variable name")?;
                if !self.module.variables.contains_key(name) {
                    return Err(format!("var.{name} is not declared in the module"));
                }
                if !self.vars.contains_key(name) {
                    return Err(format!(
                        "var.{name} has no default: give it with --var {name}=VALUE"
                    ));
                }
                Ok(())
            }
            "local" => {
                let name = second.ok_or("`local` must be followed by a local's name")?;
                self.local(name).map(|_| ())
            }
            "data" => match (path.get(1).map(String::as_str), path.get(2)) {
                (Some("aws_partition"), Some(name))
                    if self.module.data_source("aws_partition", name).is_some() =>
                {
                    Ok(())
                }
                _ => Err(format!(
                    "{} is a data source, which Terraform reads from AWS: the local stack cannot evaluate it",
                    path.join(".")
                )),
            },
            "count" | "each" | "self" | "path" | "terraform" | "module" => Err(format!(
                "`{}` is not supported by the local stack's Terraform reader (local/emulator/src/terraform.rs)",
                path.join(".")
            )),
            kind if self.module.has_kind(kind) || kind.starts_with("aws_") => {
                self.check_resource_reference(path)
            }
            // A `for` variable, or an attribute of one.
            _ => Ok(()),
        }
    }

    fn check_resource_reference(&self, path: &[String]) -> Result<(), String> {
        let kind = path[0].as_str();
        let Some(name) = path.get(1) else {
            return Err(format!("`{kind}` must be followed by a resource name"));
        };
        let address = Address::new(kind, name);
        if !self.module.resources.contains_key(&address) {
            return Err(format!("{address} is not a resource of the module"));
        }
        let shown = path.join(".");
        let Some(resources) = &self.resources else {
            return Err(format!(
                "{shown}: a resource's name cannot depend on another resource's attributes locally"
            ));
        };
        let Some(known) = resources.get(kind).and_then(|m| m.get(name.as_str())) else {
            return Err(format!(
                "{shown} is only known after `terraform apply`, and the local stack does not play {kind} resources"
            ));
        };
        if let Some(why) = &known.unknown {
            return Err(format!("{shown} is unknown locally: {why}"));
        }
        match path.get(2) {
            Some(a) if !known.attrs.contains_key(a.as_str()) => Err(format!(
                "{shown}: the local stack knows only {} of a {kind}",
                known
                    .attrs
                    .keys()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Ok(()),
        }
    }
}

/// Collects the references of an expression: each variable (not bound by an enclosing
/// `for`) with the attribute names that follow it, e.g. `["var", "prefix"]`,
/// `["aws_s3_bucket", "shuffle", "id"]`.
fn references(expr: &Expression, bound: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
    match expr {
        Expression::Variable(v) if !bound.iter().any(|b| b == v.as_str()) => {
            out.insert(vec![v.as_str().to_string()]);
        }
        Expression::Traversal(t) => {
            match &t.expr {
                Expression::Variable(root) if !bound.iter().any(|b| b == root.as_str()) => {
                    let mut path = vec![root.as_str().to_string()];
                    for op in &t.operators {
                        match op {
                            TraversalOperator::GetAttr(name) if path.len() < 3 => {
                                path.push(name.as_str().to_string())
                            }
                            _ => break,
                        }
                    }
                    out.insert(path);
                }
                other => references(other, bound, out),
            }
            for op in &t.operators {
                if let TraversalOperator::Index(index) = op {
                    references(index, bound, out);
                }
            }
        }
        Expression::Array(items) => {
            for item in items {
                references(item, bound, out);
            }
        }
        Expression::Object(object) => {
            for (key, value) in object.iter() {
                if let ObjectKey::Expression(k) = key {
                    references(k, bound, out);
                }
                references(value, bound, out);
            }
        }
        Expression::TemplateExpr(t) => {
            if let Ok(template) = Template::from_expr(t) {
                template_references(&template, bound, out);
            }
        }
        Expression::FuncCall(call) => {
            for arg in &call.args {
                references(arg, bound, out);
            }
        }
        Expression::Parenthesis(inner) => references(inner, bound, out),
        Expression::Conditional(c) => {
            references(&c.cond_expr, bound, out);
            references(&c.true_expr, bound, out);
            references(&c.false_expr, bound, out);
        }
        Expression::Operation(op) => match op.as_ref() {
            Operation::Unary(u) => references(&u.expr, bound, out),
            Operation::Binary(b) => {
                references(&b.lhs_expr, bound, out);
                references(&b.rhs_expr, bound, out);
            }
        },
        Expression::ForExpr(f) => {
            references(&f.collection_expr, bound, out);
            let depth = bound.len();
            if let Some(k) = &f.key_var {
                bound.push(k.as_str().to_string());
            }
            bound.push(f.value_var.as_str().to_string());
            if let Some(k) = &f.key_expr {
                references(k, bound, out);
            }
            references(&f.value_expr, bound, out);
            if let Some(c) = &f.cond_expr {
                references(c, bound, out);
            }
            bound.truncate(depth);
        }
        _ => {}
    }
}

fn template_references(
    template: &Template,
    bound: &mut Vec<String>,
    out: &mut BTreeSet<Vec<String>>,
) {
    for element in template.elements() {
        match element {
            Element::Literal(_) => {}
            Element::Interpolation(i) => references(&i.expr, bound, out),
            Element::Directive(d) => match d.as_ref() {
                Directive::If(d) => {
                    references(&d.cond_expr, bound, out);
                    template_references(&d.true_template, bound, out);
                    if let Some(f) = &d.false_template {
                        template_references(f, bound, out);
                    }
                }
                Directive::For(d) => {
                    references(&d.collection_expr, bound, out);
                    let depth = bound.len();
                    if let Some(k) = &d.key_var {
                        bound.push(k.as_str().to_string());
                    }
                    bound.push(d.value_var.as_str().to_string());
                    template_references(&d.template, bound, out);
                    bound.truncate(depth);
                }
            },
        }
    }
}

/// `local.X`, exactly: the local a resource's name attribute is set from.
fn local_name(expr: &Expression) -> Option<&str> {
    let Expression::Traversal(t) = expr else {
        return None;
    };
    match (&t.expr, t.operators.as_slice()) {
        (Expression::Variable(v), [TraversalOperator::GetAttr(name)]) if v.as_str() == "local" => {
            Some(name.as_str())
        }
        _ => None,
    }
}

/// `a.b.c…`: a plain traversal's names, e.g. `["aws_iam_role", "scheduler", "arn"]`.
pub fn traversal_path(expr: &Expression) -> Option<Vec<String>> {
    let Expression::Traversal(t) = expr else {
        return None;
    };
    let Expression::Variable(root) = &t.expr else {
        return None;
    };
    let mut path = vec![root.as_str().to_string()];
    for op in &t.operators {
        match op {
            TraversalOperator::GetAttr(name) => path.push(name.as_str().to_string()),
            _ => return None,
        }
    }
    Some(path)
}

/// The attributes the stack gives a resource it plays, under the name `name`.
fn stack_attributes(kind: &str, name: &str, inputs: &Inputs) -> hcl::Map<String, Value> {
    let (region, account) = (&inputs.region, &inputs.account);
    let pairs: Vec<(&str, String)> = match kind {
        "aws_lambda_function" => {
            let arn = format!("arn:aws:lambda:{region}:{account}:function:{name}");
            vec![
                ("function_name", name.to_string()),
                ("id", name.to_string()),
                ("qualified_arn", format!("{arn}:$LATEST")),
                (
                    "invoke_arn",
                    format!(
                        "arn:aws:apigateway:{region}:lambda:path/2015-03-31/functions/{arn}/invocations"
                    ),
                ),
                ("arn", arn),
            ]
        }
        "aws_dynamodb_table" => {
            let arn = format!("arn:aws:dynamodb:{region}:{account}:table/{name}");
            vec![
                ("name", name.to_string()),
                ("id", name.to_string()),
                ("stream_arn", format!("{arn}/stream/{STREAM_LABEL}")),
                ("arn", arn),
            ]
        }
        "aws_s3_bucket" => vec![
            ("id", name.to_string()),
            ("bucket", name.to_string()),
            ("arn", format!("arn:aws:s3:::{name}")),
        ],
        // A rule on the default event bus: its id is its name.
        "aws_cloudwatch_event_rule" => vec![
            ("name", name.to_string()),
            ("id", name.to_string()),
            ("arn", crate::schedule::rule_arn(region, account, name)),
        ],
        "aws_iam_role" => vec![
            ("name", name.to_string()),
            ("id", name.to_string()),
            ("arn", format!("arn:aws:iam::{account}:role/{name}")),
        ],
        "aws_cloudwatch_log_group" => vec![
            ("name", name.to_string()),
            ("id", name.to_string()),
            (
                "arn",
                format!("arn:aws:logs:{region}:{account}:log-group:{name}"),
            ),
        ],
        "aws_sqs_queue" => vec![
            ("name", name.to_string()),
            ("arn", format!("arn:aws:sqs:{region}:{account}:{name}")),
        ],
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect()
}

/// The evaluation scope of a deployment: variables, the stack's names, resource attributes.
fn deployment_scope<'m>(module: &'m Module, inputs: &Inputs) -> Result<Scope<'m>, Error> {
    let vars = variable_values(module, inputs)?;
    // Names given by the caller, and the locals they set.
    let mut pinned: BTreeMap<String, Value> = BTreeMap::new();
    for (address, name) in &inputs.names {
        let Some(body) = module.resources.get(address) else {
            return Err(format!("--name {address}: the module has no resource {address}").into());
        };
        let Some(attribute) = name_attribute(&address.kind) else {
            return Err(format!(
                "--name {address}: the local stack names only {} resources",
                NAMED_KINDS
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        };
        if let Some(local) = attr(body, attribute).and_then(local_name) {
            let value = Value::String(name.clone());
            match pinned.get(local) {
                Some(other) if other != &value => {
                    return Err(format!(
                        "--name {address}={name}: local.{local} is already named {other} by another --name"
                    )
                    .into())
                }
                _ => {
                    pinned.insert(local.to_string(), value);
                }
            }
        }
    }
    // Every resource the stack plays gets its name: the caller's, or its configuration's.
    let naming = Scope::new(module, vars.clone(), pinned.clone(), None);
    let mut resources: BTreeMap<String, BTreeMap<String, Known>> = BTreeMap::new();
    for (kind, attribute) in NAMED_KINDS.iter().chain(ARN_KINDS) {
        for (address, body) in module.of_kind(kind) {
            let known = if let Some(name) = inputs.names.get(address) {
                Known {
                    attrs: stack_attributes(kind, name, inputs),
                    unknown: None,
                }
            } else if attr(body, "for_each").is_some() {
                Known {
                    attrs: hcl::Map::new(),
                    unknown: Some(format!(
                        "{address} has `for_each`, which the local stack does not play"
                    )),
                }
            } else {
                // A resource with `count` (0 or 1, [`Scope::exists`]) is named by its
                // configuration like any other; other resources name it through the
                // locals its name comes from, never as `resource[0]`.
                let unknown = |why: String| Known {
                    attrs: hcl::Map::new(),
                    unknown: Some(format!(
                        "{why}; give the stack's name with --name {address}=NAME"
                    )),
                };
                match attr(body, attribute).map(|e| naming.eval(e)) {
                    None => unknown(format!(
                        "{address} has no `{attribute}`, so AWS names it at apply"
                    )),
                    Some(Ok(Value::String(name))) => Known {
                        attrs: stack_attributes(kind, &name, inputs),
                        unknown: None,
                    },
                    Some(Ok(Value::Null)) => unknown(format!(
                        "{address}.{attribute} is null, so AWS names it at apply"
                    )),
                    Some(Ok(other)) => unknown(format!(
                        "{address}.{attribute} is a {}, not a string",
                        type_name(&other)
                    )),
                    Some(Err(e)) => unknown(format!("{address}.{attribute}: {e}")),
                }
            };
            resources
                .entry(kind.to_string())
                .or_default()
                .insert(address.name.clone(), known);
        }
    }
    Ok(Scope::new(module, vars, pinned, Some(resources)))
}

// ---------------------------------------------------------------------------------------
// What the module deploys
// ---------------------------------------------------------------------------------------

/// Meta-arguments every resource may have; they do not change what is deployed.
const META: &[(&str, &str)] = &[
    ("depends_on", "ordering of Terraform's own operations"),
    ("lifecycle", "Terraform's own replacement rules and checks"),
    ("provider", "which AWS provider configuration creates it"),
    ("count", "evaluated: 0 means the resource does not exist"),
    ("timeouts", "how long Terraform waits for AWS"),
];

/// How the local stack treats the settings of one resource type.
struct Schema {
    kind: &'static str,
    /// Read by this file.
    derived: &'static [&'static str],
    /// Settings that do not matter locally, with the reason.
    irrelevant: &'static [(&'static str, &'static str)],
}

const FUNCTION: Schema = Schema {
    kind: "aws_lambda_function",
    derived: &[
        "function_name",
        "memory_size",
        "timeout",
        "ephemeral_storage",
        "reserved_concurrent_executions",
        "environment",
        "role",
    ],
    irrelevant: &[
        ("description", "text only"),
        ("filename", "the stack runs target/debug binaries"),
        ("source_code_hash", "the stack runs target/debug binaries"),
        ("s3_bucket", "the stack runs target/debug binaries"),
        ("s3_key", "the stack runs target/debug binaries"),
        (
            "runtime",
            "the stack runs native binaries with the real lambda_runtime loop",
        ),
        (
            "handler",
            "the stack runs native binaries with the real lambda_runtime loop",
        ),
        (
            "architectures",
            "the stack runs binaries built for this machine",
        ),
        ("tracing_config", "X-Ray is not emulated"),
        (
            "logging_config",
            "the lines go as the function writes them (JSON) to the group /aws/lambda/<name>, \
             which the module's log group is; levels are the function's RUST_LOG",
        ),
        (
            "dead_letter_config",
            "there is no SQS locally: an event that failed every retry is logged and dropped",
        ),
        ("tags", "tags do not change behaviour"),
    ],
};

const INVOKE_CONFIG: Schema = Schema {
    kind: "aws_lambda_function_event_invoke_config",
    derived: &[
        "function_name",
        "maximum_retry_attempts",
        "maximum_event_age_in_seconds",
        "destination_config",
    ],
    irrelevant: &[],
};

const ROLE_POLICY: Schema = Schema {
    kind: "aws_iam_role_policy",
    derived: &["role", "policy"],
    irrelevant: &[("name", "the policy's name within the role")],
};

const FUNCTION_URL: Schema = Schema {
    kind: "aws_lambda_function_url",
    derived: &["function_name", "authorization_type"],
    irrelevant: &[
        (
            "cors",
            "CORS concerns browsers; the emulator answers every origin",
        ),
        (
            "invoke_mode",
            "the emulator serves buffered and streamed responses alike",
        ),
    ],
};

const API_INTEGRATION: Schema = Schema {
    kind: "aws_apigatewayv2_integration",
    derived: &[
        "integration_uri",
        "integration_type",
        "payload_format_version",
        "timeout_milliseconds",
    ],
    irrelevant: &[
        ("api_id", "the local URL plays the API's one route"),
        (
            "integration_method",
            "Lambda proxy integrations always POST",
        ),
        ("description", "text only"),
    ],
};

const STREAM_MAPPING: Schema = Schema {
    kind: "aws_lambda_event_source_mapping",
    derived: &[
        "event_source_arn",
        "function_name",
        "starting_position",
        "batch_size",
        "parallelization_factor",
        "bisect_batch_on_function_error",
        "maximum_retry_attempts",
        "function_response_types",
        "filter_criteria",
        "enabled",
    ],
    irrelevant: &[
        (
            "maximum_batching_window_in_seconds",
            "the trigger polls every poll_interval_ms (a local setting)",
        ),
        (
            "maximum_record_age_in_seconds",
            "record age is not emulated: local records are seconds old",
        ),
        (
            "destination_config",
            "there is no SQS locally: batches given up on go to logs/stream-failures.log",
        ),
        ("tags", "tags do not change behaviour"),
    ],
};

const EVENT_RULE: Schema = Schema {
    kind: "aws_cloudwatch_event_rule",
    derived: &[
        "name",
        "schedule_expression",
        "event_pattern",
        "event_bus_name",
        "state",
        "is_enabled",
    ],
    irrelevant: &[
        ("description", "text only"),
        ("tags", "tags do not change behaviour"),
        (
            "role_arn",
            "IAM is not emulated: the schedule may invoke its target",
        ),
    ],
};

const EVENT_TARGET: Schema = Schema {
    kind: "aws_cloudwatch_event_target",
    derived: &[
        "rule",
        "arn",
        "retry_policy",
        "event_bus_name",
        "input",
        "input_path",
        "input_transformer",
    ],
    irrelevant: &[
        ("target_id", "an id among the rule's targets; the local rule has one"),
        (
            "dead_letter_config",
            "there is no SQS locally: an event that failed every delivery attempt is logged and dropped",
        ),
        (
            "role_arn",
            "IAM is not emulated: the schedule may invoke its target",
        ),
    ],
};

impl Schema {
    /// Fails on a setting this file neither derives nor knows to be irrelevant locally.
    fn check(&self, address: &Address, body: &Body) -> Result<(), Error> {
        let keys = body
            .attributes()
            .map(|a| a.key().to_string())
            .chain(body.blocks().map(|b| b.identifier().to_string()));
        for key in keys {
            let known = self.derived.contains(&key.as_str())
                || self.irrelevant.iter().any(|(k, _)| *k == key)
                || META.iter().any(|(k, _)| *k == key);
            if !known {
                return Err(format!(
                    "{address}: `{key}` is a setting the local stack does not know: teach \
                     local/emulator/src/terraform.rs to derive it (or to say why it does not \
                     matter locally) before the stack can run this module"
                )
                .into());
            }
        }
        debug_assert_eq!(address.kind, self.kind);
        Ok(())
    }
}

/// A function as the module deploys it.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// Its resource, e.g. `aws_lambda_function.scheduler`.
    pub address: Address,
    /// Its name in the stack.
    pub name: String,
    /// `environment.variables`, evaluated.
    pub env: BTreeMap<String, String>,
    /// `memory_size` (AWS default 128).
    pub memory_mb: u64,
    /// `timeout` (AWS default 3).
    pub timeout_secs: u64,
    /// `ephemeral_storage.size` (AWS default 512).
    pub ephemeral_storage_mb: u64,
    /// `reserved_concurrent_executions`, `None` for -1 (unreserved, the default).
    pub reserved_concurrency: Option<u64>,
    /// The asynchronous invoke config.
    pub invoke: InvokeConfig,
    /// How HTTP reaches it, if it does.
    pub http: Option<HttpEntry>,
    /// Its execution role with the statements of the role's policies.
    pub role: Option<RoleConfig>,
}

/// A function's asynchronous invocation settings.
#[derive(Debug, Clone, PartialEq)]
pub struct InvokeConfig {
    /// The `aws_lambda_function_event_invoke_config` they come from; `None`: Lambda's
    /// defaults (2 retries, 6 hours,
    /// <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
    pub address: Option<Address>,
    /// `maximum_retry_attempts` (0..=2).
    pub max_retry_attempts: u64,
    /// `maximum_event_age_in_seconds`.
    pub max_event_age_secs: u64,
    /// The function the on-failure destination names.
    pub on_failure: Option<String>,
}

impl Default for InvokeConfig {
    fn default() -> InvokeConfig {
        InvokeConfig {
            address: None,
            max_retry_attempts: 2,
            max_event_age_secs: 21_600,
            on_failure: None,
        }
    }
}

/// How HTTP requests reach a function.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpEntry {
    /// A function URL (`aws_lambda_function_url`) with its `authorization_type`.
    FunctionUrl {
        /// The resource.
        address: Address,
        /// `NONE` or `AWS_IAM`.
        auth: String,
    },
    /// An API Gateway HTTP API Lambda proxy integration (payload format 2.0).
    HttpApi {
        /// The `aws_apigatewayv2_integration`.
        address: Address,
        /// `timeout_milliseconds` in whole seconds (rounded up).
        integration_timeout_secs: u64,
    },
}

/// A DynamoDB stream trigger as the module deploys it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMapping {
    /// The `aws_lambda_event_source_mapping`.
    pub address: Address,
    /// The table whose stream it reads (the stack's name).
    pub table: String,
    /// The function it invokes (the stack's name).
    pub function: String,
    /// `batch_size` (AWS default 100).
    pub batch_size: u64,
    /// `parallelization_factor` (AWS default 1).
    pub parallelization_factor: u64,
    /// `bisect_batch_on_function_error` (AWS default false).
    pub bisect_batch_on_function_error: bool,
    /// `maximum_retry_attempts` (AWS default -1: until the record expires).
    pub maximum_retry_attempts: i64,
    /// `starting_position`.
    pub starting_position: String,
    /// `filter_criteria.filter[].pattern`: JSON text, as Terraform sends it to AWS.
    pub filters: Vec<String>,
}

/// A scheduled EventBridge rule and its Lambda target, as the module deploys them.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The `aws_cloudwatch_event_rule`.
    pub rule: Address,
    /// The `aws_cloudwatch_event_target`.
    pub target: Address,
    /// The rule's name.
    pub name: String,
    /// The function the target invokes (the stack's name).
    pub function: String,
    /// `schedule_expression`.
    pub expression: String,
    /// `retry_policy.maximum_event_age_in_seconds` (EventBridge's default 86400).
    pub max_event_age_secs: u64,
    /// `retry_policy.maximum_retry_attempts` (EventBridge's default 185).
    pub max_retry_attempts: u64,
}

/// Everything the local stack takes from the module.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// Every `aws_lambda_function` that exists with the given variables.
    pub functions: Vec<Function>,
    /// Every enabled DynamoDB stream trigger.
    pub stream_mappings: Vec<StreamMapping>,
    /// Every enabled scheduled rule with its (one) Lambda target.
    pub schedules: Vec<Schedule>,
}

/// Reads a whole number from an evaluated attribute.
fn whole(value: &Value, at: &str) -> Result<i64, Error> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .filter(|_| n.is_i64() || n.is_u64())
            .ok_or_else(|| format!("{at} is {n}, not a whole number").into()),
        other => Err(format!("{at} is {other}, not a number").into()),
    }
}

fn non_negative(value: &Value, at: &str) -> Result<u64, Error> {
    let n = whole(value, at)?;
    u64::try_from(n).map_err(|_| format!("{at} is {n}, not 0 or more").into())
}

fn string(value: &Value, at: &str) -> Result<String, Error> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(format!("{at} is {other}, not a string").into()),
    }
}

fn boolean(value: &Value, at: &str) -> Result<bool, Error> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(format!("{at} is {other}, not a bool").into()),
    }
}

/// The deployment of the module with the given variables and names.
pub fn deployment(module: &Module, inputs: &Inputs) -> Result<Deployment, Error> {
    let scope = deployment_scope(module, inputs)?;
    let reader = Reader {
        scope: &scope,
        inputs,
    };
    reader.deployment()
}

struct Reader<'a, 'm> {
    scope: &'a Scope<'m>,
    inputs: &'a Inputs,
}

impl Reader<'_, '_> {
    /// Evaluates `body`'s attribute `key` (`None` when absent); the error says where.
    fn value(
        &self,
        address: &Address,
        path: &str,
        body: &Body,
        key: &str,
    ) -> Result<Option<Value>, Error> {
        let Some(expr) = attr(body, key) else {
            return Ok(None);
        };
        let at = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        self.scope
            .eval(expr)
            .map(Some)
            .map_err(|e| format!("{address}: {at}: {e}").into())
    }

    /// Whether the resource exists: `count` (0 or 1) evaluated; `for_each` is refused.
    fn exists(&self, address: &Address, body: &Body) -> Result<bool, Error> {
        if attr(body, "for_each").is_some() {
            return Err(format!(
                "{address}: `for_each` is not supported by the local stack's Terraform reader"
            )
            .into());
        }
        match self.value(address, "", body, "count")? {
            None => Ok(true),
            Some(v) => match non_negative(&v, &format!("{address}: count"))? {
                0 => Ok(false),
                1 => Ok(true),
                n => Err(format!(
                    "{address}: count = {n}: several instances of a resource are not supported locally"
                )
                .into()),
            },
        }
    }

    /// The stack's function a `function_name` or `integration_uri` value designates: its
    /// name, ARN, qualified ARN or invoke ARN.
    fn function_named(&self, functions: &[Function], value: &str) -> Option<String> {
        functions
            .iter()
            .find(|f| {
                value == f.name
                    || stack_attributes("aws_lambda_function", &f.name, self.inputs)
                        .values()
                        .any(|v| v.as_str() == Some(value))
            })
            .map(|f| f.name.clone())
    }

    fn deployment(&self) -> Result<Deployment, Error> {
        let mut functions = Vec::new();
        for (address, body) in self.scope.module.of_kind(FUNCTION.kind) {
            FUNCTION.check(address, body)?;
            if self.exists(address, body)? {
                functions.push(self.function(address, body)?);
            }
        }
        self.invoke_configs(&mut functions)?;
        self.http_entries(&mut functions)?;
        let stream_mappings = self.stream_mappings(&functions)?;
        let schedules = self.schedules(&functions)?;
        Ok(Deployment {
            functions,
            stream_mappings,
            schedules,
        })
    }

    fn function(&self, address: &Address, body: &Body) -> Result<Function, Error> {
        let resources = self.scope.resources.as_ref();
        let known = resources
            .and_then(|r| r.get(&address.kind))
            .and_then(|m| m.get(&address.name));
        let name = match known {
            Some(Known {
                unknown: None,
                attrs,
            }) => string(
                &attrs["function_name"],
                &format!("{address}: function_name"),
            )?,
            Some(Known {
                unknown: Some(why), ..
            }) => return Err(format!("{address}: function_name: {why}").into()),
            None => return Err(format!("{address}: no function_name").into()),
        };
        let number = |path: &str, b: &Body, key: &str, default: u64| -> Result<u64, Error> {
            match self.value(address, path, b, key)? {
                None | Some(Value::Null) => Ok(default),
                Some(v) => non_negative(&v, &format!("{address}: {key}")),
            }
        };
        // Defaults of CreateFunction
        // (https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html).
        let memory_mb = number("", body, "memory_size", 128)?;
        let timeout_secs = number("", body, "timeout", 3)?;
        let ephemeral_storage_mb = match block(body, "ephemeral_storage") {
            Some(b) => number("ephemeral_storage", b, "size", 512)?,
            None => 512,
        };
        let reserved_concurrency =
            match self.value(address, "", body, "reserved_concurrent_executions")? {
                None | Some(Value::Null) => None,
                Some(v) => {
                    match whole(&v, &format!("{address}: reserved_concurrent_executions"))? {
                        -1 => None,
                        n => Some(u64::try_from(n).map_err(|_| {
                            format!(
                                "{address}: reserved_concurrent_executions is {n}, not -1 or more"
                            )
                        })?),
                    }
                }
            };
        let mut env = BTreeMap::new();
        if let Some(environment) = block(body, "environment") {
            match self.value(address, "environment", environment, "variables")? {
                None | Some(Value::Null) => {}
                Some(Value::Object(vars)) => {
                    for (k, v) in vars {
                        let at = format!("{address}: environment.variables.{k}");
                        let text = match v {
                            Value::String(s) => s,
                            Value::Number(n) => functions::number_text(&n),
                            Value::Bool(b) => b.to_string(),
                            Value::Null => {
                                return Err(format!("{at} is null; Lambda takes strings").into())
                            }
                            other => {
                                return Err(format!(
                                    "{at} is a {}; Lambda takes strings",
                                    type_name(&other)
                                )
                                .into())
                            }
                        };
                        env.insert(k, text);
                    }
                }
                Some(other) => {
                    return Err(format!(
                        "{address}: environment.variables is a {}, not a map",
                        type_name(&other)
                    )
                    .into())
                }
            }
        }
        Ok(Function {
            address: address.clone(),
            name,
            env,
            memory_mb,
            timeout_secs,
            ephemeral_storage_mb,
            reserved_concurrency,
            invoke: InvokeConfig::default(),
            http: None,
            role: self.role(address, body)?,
        })
    }

    /// A function's execution role (`role = aws_iam_role.<r>.arn`) and the statements of
    /// every `aws_iam_role_policy` on it (`role = aws_iam_role.<r>.id`, `policy =
    /// data.aws_iam_policy_document.<d>.json`). Managed policies and documents the local
    /// stack cannot read fail, naming the resource.
    fn role(&self, address: &Address, body: &Body) -> Result<Option<RoleConfig>, Error> {
        let Some(expr) = attr(body, "role") else {
            return Ok(None);
        };
        let role = match traversal_path(expr).as_deref() {
            Some([kind, name, arn]) if kind == "aws_iam_role" && arn == "arn" => name.clone(),
            _ => {
                return Err(format!(
                    "{address}: role must be aws_iam_role.<name>.arn for the local stack to                      read the role's policies"
                )
                .into())
            }
        };
        let arn = match self.value(address, "", body, "role")? {
            Some(v) => string(&v, &format!("{address}: role"))?,
            None => unreachable!("attribute present"),
        };
        for kind in [
            "aws_iam_role_policy_attachment",
            "aws_iam_policy_attachment",
            "aws_iam_role_policies_exclusive",
        ] {
            if let Some((a, _)) = self.scope.module.of_kind(kind).next() {
                return Err(format!(
                    "{a}: the local stack plays only inline policies (aws_iam_role_policy from                      aws_iam_policy_document), not {kind}"
                )
                .into());
            }
        }
        if let Some(r) = self.scope.module.resource("aws_iam_role", &role) {
            for key in [
                "managed_policy_arns",
                "inline_policy",
                "permissions_boundary",
            ] {
                if attr(r, key).is_some() || block(r, key).is_some() {
                    return Err(format!(
                        "aws_iam_role.{role}: `{key}` is not played by the local stack's IAM"
                    )
                    .into());
                }
            }
        }
        let mut statements = Vec::new();
        for (policy, pbody) in self.scope.module.of_kind("aws_iam_role_policy") {
            ROLE_POLICY.check(policy, pbody)?;
            let on = attr(pbody, "role").and_then(traversal_path);
            match on.as_deref() {
                Some([kind, name, part])
                    if kind == "aws_iam_role" && (part == "id" || part == "name") =>
                {
                    if *name != role {
                        continue;
                    }
                }
                _ => {
                    return Err(format!(
                        "{policy}: role must be aws_iam_role.<name>.id for the local stack to                          play it"
                    )
                    .into())
                }
            }
            if !self.exists(policy, pbody)? {
                continue;
            }
            let doc = match attr(pbody, "policy").and_then(traversal_path).as_deref() {
                Some([data, kind, name, json])
                    if data == "data" && kind == "aws_iam_policy_document" && json == "json" =>
                {
                    name.clone()
                }
                _ => {
                    return Err(format!(
                        "{policy}: policy must be data.aws_iam_policy_document.<name>.json for                          the local stack to read it"
                    )
                    .into())
                }
            };
            statements.extend(self.policy_document(&doc)?);
        }
        Ok(Some(RoleConfig { arn, statements }))
    }

    /// The statements of `data.aws_iam_policy_document.<name>`, `dynamic` ones included.
    fn policy_document(&self, name: &str) -> Result<Vec<Statement>, Error> {
        let address = Address::new("data.aws_iam_policy_document", name);
        let Some(doc) = self
            .scope
            .module
            .data_source("aws_iam_policy_document", name)
        else {
            return Err(format!("{address} does not exist").into());
        };
        for a in doc.attributes() {
            if a.key() != "version" {
                return Err(format!(
                    "{address}: `{}` is not played by the local stack's IAM",
                    a.key()
                )
                .into());
            }
        }
        let mut statements = Vec::new();
        for b in doc.blocks() {
            match b.identifier() {
                "statement" => statements.push(self.statement(&address, b.body())?),
                "dynamic" if b.labels().first().map(|l| l.as_str()) == Some("statement") => {
                    let copies =
                        match self.value(&address, "dynamic.statement", b.body(), "for_each")? {
                            Some(Value::Array(items)) => items.len(),
                            Some(Value::Object(items)) => items.len(),
                            Some(Value::Null) | None => 0,
                            Some(other) => {
                                return Err(format!(
                                    "{address}: dynamic \"statement\" for_each is a {}",
                                    type_name(&other)
                                )
                                .into())
                            }
                        };
                    let Some(content) = block(b.body(), "content") else {
                        return Err(
                            format!("{address}: dynamic \"statement\" has no content").into()
                        );
                    };
                    for _ in 0..copies {
                        statements.push(self.statement(&address, content)?);
                    }
                }
                other => {
                    return Err(format!(
                        "{address}: `{other}` blocks are not played by the local stack's IAM"
                    )
                    .into())
                }
            }
        }
        Ok(statements)
    }

    fn statement(&self, address: &Address, body: &Body) -> Result<Statement, Error> {
        if let Some(b) = body.blocks().next() {
            return Err(format!(
                "{address}: statement `{}` blocks (conditions, principals) are not played by                  the local stack's IAM",
                b.identifier()
            )
            .into());
        }
        let strings = |key: &str| -> Result<Vec<String>, Error> {
            match self.value(address, "statement", body, key)? {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| string(v, &format!("{address}: statement.{key}")))
                    .collect(),
                Some(other) => Err(format!(
                    "{address}: statement.{key} is a {}, not a list",
                    type_name(&other)
                )
                .into()),
                None => Ok(Vec::new()),
            }
        };
        for a in body.attributes() {
            if !["sid", "effect", "actions", "resources"].contains(&a.key()) {
                return Err(format!(
                    "{address}: statement `{}` is not played by the local stack's IAM",
                    a.key()
                )
                .into());
            }
        }
        let sid = match self.value(address, "statement", body, "sid")? {
            Some(v) => Some(string(&v, &format!("{address}: statement.sid"))?),
            None => None,
        };
        let effect = match self.value(address, "statement", body, "effect")? {
            None => Effect::Allow,
            Some(Value::String(e)) if e == "Allow" => Effect::Allow,
            Some(Value::String(e)) if e == "Deny" => Effect::Deny,
            Some(other) => {
                return Err(
                    format!("{address}: statement.effect is {other}, not Allow or Deny").into(),
                )
            }
        };
        Ok(Statement {
            sid,
            effect,
            actions: strings("actions")?,
            resources: strings("resources")?,
        })
    }

    fn invoke_configs(&self, functions: &mut [Function]) -> Result<(), Error> {
        for (address, body) in self.scope.module.of_kind(INVOKE_CONFIG.kind) {
            INVOKE_CONFIG.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            let target = match self.value(address, "", body, "function_name")? {
                Some(v) => string(&v, &format!("{address}: function_name"))?,
                None => return Err(format!("{address}: no function_name").into()),
            };
            let Some(name) = self.function_named(functions, &target) else {
                return Err(format!(
                    "{address}: function_name {target:?} is not a function of the module"
                )
                .into());
            };
            let mut config = InvokeConfig {
                address: Some(address.clone()),
                ..InvokeConfig::default()
            };
            // Limits of PutFunctionEventInvokeConfig
            // (https://docs.aws.amazon.com/lambda/latest/api/API_PutFunctionEventInvokeConfig.html).
            if let Some(v) = self.value(address, "", body, "maximum_retry_attempts")? {
                config.max_retry_attempts =
                    non_negative(&v, &format!("{address}: maximum_retry_attempts"))?;
            }
            if let Some(v) = self.value(address, "", body, "maximum_event_age_in_seconds")? {
                config.max_event_age_secs =
                    non_negative(&v, &format!("{address}: maximum_event_age_in_seconds"))?;
            }
            if let Some(destinations) = block(body, "destination_config") {
                if block(destinations, "on_success").is_some() {
                    return Err(format!(
                        "{address}: destination_config.on_success is not emulated locally"
                    )
                    .into());
                }
                if let Some(on_failure) = block(destinations, "on_failure") {
                    let path = "destination_config.on_failure";
                    let dest = match self.value(address, path, on_failure, "destination")? {
                        Some(v) => string(&v, &format!("{address}: {path}.destination"))?,
                        None => return Err(format!("{address}: {path} has no destination").into()),
                    };
                    let Some(dest_name) = self.function_named(functions, &dest) else {
                        return Err(format!(
                            "{address}: {path}.destination {dest:?} is not a function of the \
                             module; the emulator delivers destination records to functions only"
                        )
                        .into());
                    };
                    config.on_failure = Some(dest_name);
                }
            }
            let f = functions
                .iter_mut()
                .find(|f| f.name == name)
                .expect("function_named found it");
            if let Some(other) = &f.invoke.address {
                return Err(format!("{address} and {other} both configure function {name}").into());
            }
            f.invoke = config;
        }
        Ok(())
    }

    fn http_entries(&self, functions: &mut [Function]) -> Result<(), Error> {
        // Function URLs first: where a function has both, the local URL plays the function
        // URL, whose authorization the emulator can check.
        for (address, body) in self.scope.module.of_kind(FUNCTION_URL.kind) {
            FUNCTION_URL.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            if attr(body, "qualifier").is_some() {
                return Err(format!("{address}: `qualifier`: aliases are not emulated").into());
            }
            let target = match self.value(address, "", body, "function_name")? {
                Some(v) => string(&v, &format!("{address}: function_name"))?,
                None => return Err(format!("{address}: no function_name").into()),
            };
            let Some(name) = self.function_named(functions, &target) else {
                return Err(format!(
                    "{address}: function_name {target:?} is not a function of the module"
                )
                .into());
            };
            let auth = match self.value(address, "", body, "authorization_type")? {
                Some(v) => string(&v, &format!("{address}: authorization_type"))?,
                None => return Err(format!("{address}: no authorization_type").into()),
            };
            if auth != "NONE" && auth != "AWS_IAM" {
                return Err(format!(
                    "{address}: authorization_type {auth:?} is neither NONE nor AWS_IAM"
                )
                .into());
            }
            let f = functions
                .iter_mut()
                .find(|f| f.name == name)
                .expect("found");
            f.http = Some(HttpEntry::FunctionUrl {
                address: address.clone(),
                auth,
            });
        }
        for (address, body) in self.scope.module.of_kind(API_INTEGRATION.kind) {
            API_INTEGRATION.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            let kind = match self.value(address, "", body, "integration_type")? {
                Some(v) => string(&v, &format!("{address}: integration_type"))?,
                None => String::new(),
            };
            if kind != "AWS_PROXY" {
                return Err(format!(
                    "{address}: integration_type {kind:?}: only Lambda proxy integrations (AWS_PROXY) are played locally"
                )
                .into());
            }
            let uri = match self.value(address, "", body, "integration_uri")? {
                Some(v) => string(&v, &format!("{address}: integration_uri"))?,
                None => return Err(format!("{address}: no integration_uri").into()),
            };
            let Some(name) = self.function_named(functions, &uri) else {
                return Err(format!(
                    "{address}: integration_uri {uri:?} is not a function of the module"
                )
                .into());
            };
            let f = functions
                .iter_mut()
                .find(|f| f.name == name)
                .expect("found");
            // The payload the emulator's URL builds (API Gateway's default is 1.0).
            let version = match self.value(address, "", body, "payload_format_version")? {
                Some(v) => string(&v, &format!("{address}: payload_format_version"))?,
                None => "1.0".to_string(),
            };
            if version != "2.0" {
                return Err(format!(
                    "{address}: payload_format_version {version:?}: the local URL sends format 2.0 events only"
                )
                .into());
            }
            // HTTP APIs default to (and allow at most) 30 s
            // (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html).
            let ms = match self.value(address, "", body, "timeout_milliseconds")? {
                Some(v) => non_negative(&v, &format!("{address}: timeout_milliseconds"))?,
                None => 30_000,
            };
            if f.http.is_none() {
                f.http = Some(HttpEntry::HttpApi {
                    address: address.clone(),
                    integration_timeout_secs: ms.div_ceil(1000),
                });
            }
        }
        Ok(())
    }

    fn stream_mappings(&self, functions: &[Function]) -> Result<Vec<StreamMapping>, Error> {
        let mut out = Vec::new();
        for (address, body) in self.scope.module.of_kind(STREAM_MAPPING.kind) {
            STREAM_MAPPING.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            let get = |key: &str| self.value(address, "", body, key);
            if let Some(v) = get("enabled")? {
                if !boolean(&v, &format!("{address}: enabled"))? {
                    continue;
                }
            }
            let source = match get("event_source_arn")? {
                Some(v) => string(&v, &format!("{address}: event_source_arn"))?,
                None => return Err(format!("{address}: no event_source_arn").into()),
            };
            let table = self.table_of_stream(&source).ok_or_else(|| {
                format!(
                    "{address}: event_source_arn {source:?} is not the stream of a table of the \
                     stack; only DynamoDB stream triggers are emulated"
                )
            })?;
            let target = match get("function_name")? {
                Some(v) => string(&v, &format!("{address}: function_name"))?,
                None => return Err(format!("{address}: no function_name").into()),
            };
            let function = self.function_named(functions, &target).ok_or_else(|| {
                format!("{address}: function_name {target:?} is not a function of the module")
            })?;
            let starting_position = match get("starting_position")? {
                Some(v) => string(&v, &format!("{address}: starting_position"))?,
                None => return Err(format!("{address}: no starting_position").into()),
            };
            // Defaults for DynamoDB streams
            // (https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html).
            let batch_size = match get("batch_size")? {
                Some(v) => non_negative(&v, &format!("{address}: batch_size"))?,
                None => 100,
            };
            let parallelization_factor = match get("parallelization_factor")? {
                Some(v) => non_negative(&v, &format!("{address}: parallelization_factor"))?,
                None => 1,
            };
            let bisect_batch_on_function_error = match get("bisect_batch_on_function_error")? {
                Some(v) => boolean(&v, &format!("{address}: bisect_batch_on_function_error"))?,
                None => false,
            };
            let maximum_retry_attempts = match get("maximum_retry_attempts")? {
                Some(v) => whole(&v, &format!("{address}: maximum_retry_attempts"))?,
                None => -1,
            };
            // The emulator always reads partial batch responses; a mapping without
            // ReportBatchItemFailures would treat such a response as success on AWS.
            let response_types = match get("function_response_types")? {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            if !response_types
                .iter()
                .any(|t| t.as_str() == Some("ReportBatchItemFailures"))
            {
                return Err(format!(
                    "{address}: function_response_types lacks ReportBatchItemFailures, but the \
                     emulator always honours partial batch responses"
                )
                .into());
            }
            let mut filters = Vec::new();
            if let Some(criteria) = block(body, "filter_criteria") {
                for filter in criteria.blocks().filter(|b| b.identifier() == "filter") {
                    let path = "filter_criteria.filter";
                    let pattern = match self.value(address, path, filter.body(), "pattern")? {
                        Some(v) => string(&v, &format!("{address}: {path}.pattern"))?,
                        None => return Err(format!("{address}: {path} has no pattern").into()),
                    };
                    serde_json::from_str::<Json>(&pattern).map_err(|e| {
                        format!("{address}: {path}.pattern is not JSON ({e}): {pattern}")
                    })?;
                    filters.push(pattern);
                }
            }
            out.push(StreamMapping {
                address: address.clone(),
                table,
                function,
                batch_size,
                parallelization_factor,
                bisect_batch_on_function_error,
                maximum_retry_attempts,
                starting_position,
                filters,
            });
        }
        Ok(out)
    }

    /// The scheduled rules and their targets. A rule without a target sends nothing and is
    /// left out; a target must be a function of the module, with the scheduled event as
    /// its input, on the default event bus.
    fn schedules(&self, functions: &[Function]) -> Result<Vec<Schedule>, Error> {
        // Enabled scheduled rules, by name: (address, expression).
        let mut rules: BTreeMap<String, (Address, String)> = BTreeMap::new();
        // Rules that exist but are disabled: their targets get nothing.
        let mut disabled = BTreeSet::new();
        for (address, body) in self.scope.module.of_kind(EVENT_RULE.kind) {
            EVENT_RULE.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            let get = |key: &str| self.value(address, "", body, key);
            self.default_bus(address, body)?;
            let name = match self
                .scope
                .resources
                .as_ref()
                .and_then(|r| r.get(&address.kind))
                .and_then(|m| m.get(&address.name))
            {
                Some(Known {
                    unknown: None,
                    attrs,
                }) => string(&attrs["name"], &format!("{address}: name"))?,
                Some(Known {
                    unknown: Some(why), ..
                }) => return Err(format!("{address}: name: {why}").into()),
                None => return Err(format!("{address}: no name").into()),
            };
            if attr(body, "event_pattern").is_some() {
                return Err(format!(
                    "{address}: `event_pattern`: rules matching events are not emulated locally \
                     (there is no event bus); only scheduled rules are"
                )
                .into());
            }
            let expression = match get("schedule_expression")? {
                Some(v) => string(&v, &format!("{address}: schedule_expression"))?,
                None => {
                    return Err(format!(
                    "{address}: no schedule_expression: only scheduled rules are emulated locally"
                )
                    .into())
                }
            };
            // `state` (provider 5) or the older `is_enabled`; enabled by default.
            let enabled = match (get("state")?, get("is_enabled")?) {
                (Some(v), _) => {
                    let state = string(&v, &format!("{address}: state"))?;
                    match state.as_str() {
                        "ENABLED" | "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS" => true,
                        "DISABLED" => false,
                        other => {
                            return Err(format!(
                                "{address}: state {other:?} is not ENABLED or DISABLED"
                            )
                            .into())
                        }
                    }
                }
                (None, Some(v)) => boolean(&v, &format!("{address}: is_enabled"))?,
                (None, None) => true,
            };
            if !enabled {
                disabled.insert(name);
                continue;
            }
            if let Some((other, _)) = rules.insert(name.clone(), (address.clone(), expression)) {
                return Err(format!("{address} and {other} are both named {name:?}").into());
            }
        }
        let mut out: Vec<Schedule> = Vec::new();
        for (address, body) in self.scope.module.of_kind(EVENT_TARGET.kind) {
            EVENT_TARGET.check(address, body)?;
            if !self.exists(address, body)? {
                continue;
            }
            let get = |key: &str| self.value(address, "", body, key);
            self.default_bus(address, body)?;
            for key in ["input", "input_path", "input_transformer"] {
                if attr(body, key).is_some() || block(body, key).is_some() {
                    return Err(format!(
                        "{address}: `{key}` is not emulated: the local schedule sends the \
                         scheduled event itself"
                    )
                    .into());
                }
            }
            let rule = match get("rule")? {
                Some(v) => string(&v, &format!("{address}: rule"))?,
                None => return Err(format!("{address}: no rule").into()),
            };
            if disabled.contains(&rule) {
                continue;
            }
            let Some((rule_address, expression)) = rules.get(&rule) else {
                return Err(format!(
                    "{address}: rule {rule:?} is not a scheduled rule of the module"
                )
                .into());
            };
            let arn = match get("arn")? {
                Some(v) => string(&v, &format!("{address}: arn"))?,
                None => return Err(format!("{address}: no arn").into()),
            };
            let Some(function) = self.function_named(functions, &arn) else {
                return Err(format!(
                    "{address}: arn {arn:?} is not a function of the module; only Lambda \
                     targets are emulated locally"
                )
                .into());
            };
            // EventBridge's defaults: 24 hours, 185 retries
            // (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html).
            let (mut max_event_age_secs, mut max_retry_attempts) = (86_400, 185);
            if let Some(policy) = block(body, "retry_policy") {
                let path = "retry_policy";
                if let Some(v) =
                    self.value(address, path, policy, "maximum_event_age_in_seconds")?
                {
                    max_event_age_secs = non_negative(
                        &v,
                        &format!("{address}: {path}.maximum_event_age_in_seconds"),
                    )?;
                }
                if let Some(v) = self.value(address, path, policy, "maximum_retry_attempts")? {
                    max_retry_attempts =
                        non_negative(&v, &format!("{address}: {path}.maximum_retry_attempts"))?;
                }
            }
            if let Some(other) = out.iter().find(|s| s.name == rule) {
                return Err(format!(
                    "{address} and {} are both targets of rule {rule:?}; the local stack plays \
                     one target per rule",
                    other.target
                )
                .into());
            }
            out.push(Schedule {
                rule: rule_address.clone(),
                target: address.clone(),
                name: rule,
                function,
                expression: expression.clone(),
                max_event_age_secs,
                max_retry_attempts,
            });
        }
        Ok(out)
    }

    /// Fails unless the resource is on the default event bus (the only one locally).
    fn default_bus(&self, address: &Address, body: &Body) -> Result<(), Error> {
        match self.value(address, "", body, "event_bus_name")? {
            None | Some(Value::Null) => Ok(()),
            Some(v) => match string(&v, &format!("{address}: event_bus_name"))?.as_str() {
                "default" => Ok(()),
                other => Err(format!(
                    "{address}: event_bus_name {other:?}: only the default event bus is emulated"
                )
                .into()),
            },
        }
    }

    /// The stack's table whose stream ARN this is.
    fn table_of_stream(&self, arn: &str) -> Option<String> {
        let tables = self.scope.resources.as_ref()?.get("aws_dynamodb_table")?;
        tables.values().find_map(|t| {
            let stream = t.attrs.get("stream_arn")?.as_str()?;
            let name = t.attrs.get("name")?.as_str()?;
            (stream == arn).then(|| name.to_string())
        })
    }
}

impl Deployment {
    /// One line per function and stream trigger: what the module gave the stack.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for f in &self.functions {
            let reserved = match f.reserved_concurrency {
                Some(n) => format!("reserved concurrency {n}"),
                None => "unreserved".to_string(),
            };
            let invoke = &f.invoke;
            let source = match &invoke.address {
                Some(a) => a.to_string(),
                None => "Lambda's defaults".to_string(),
            };
            let destination = match &invoke.on_failure {
                Some(d) => format!("on failure -> {d}"),
                None => "no destination".to_string(),
            };
            let http = match &f.http {
                Some(HttpEntry::FunctionUrl { address, auth }) => {
                    format!("; URL: {address} (auth {auth})")
                }
                Some(HttpEntry::HttpApi {
                    address,
                    integration_timeout_secs,
                }) => format!(
                    "; URL: {address} (503 after {integration_timeout_secs} s; the route's authorization is not emulated)"
                ),
                None => String::new(),
            };
            lines.push(format!(
                "{} -> {}: {} MB, timeout {} s, /tmp {} MB, {reserved}; async ({source}): {} retries, {} s max age, {destination}{http}; env: {}",
                f.address,
                f.name,
                f.memory_mb,
                f.timeout_secs,
                f.ephemeral_storage_mb,
                invoke.max_retry_attempts,
                invoke.max_event_age_secs,
                f.env.keys().cloned().collect::<Vec<_>>().join(" "),
            ));
        }
        for m in &self.stream_mappings {
            lines.push(format!(
                "{}: {} -> {}: batch {}, parallelization {}, bisect {}, {} retries, {}, {} filters",
                m.address,
                m.table,
                m.function,
                m.batch_size,
                m.parallelization_factor,
                m.bisect_batch_on_function_error,
                m.maximum_retry_attempts,
                m.starting_position,
                m.filters.len()
            ));
        }
        for s in &self.schedules {
            lines.push(format!(
                "{} ({}) -> {}: {}; {}: {} retries within {} s",
                s.rule,
                s.name,
                s.function,
                s.expression,
                s.target,
                s.max_retry_attempts,
                s.max_event_age_secs
            ));
        }
        lines
    }
}

// ---------------------------------------------------------------------------------------
// The emulator's config: the deployment plus the local part
// ---------------------------------------------------------------------------------------

/// Function fields the Terraform module decides; the local part must not set them.
const DERIVED_FUNCTION_FIELDS: &[(&str, &str)] = &[
    ("memory_mb", "memory_size"),
    ("timeout_secs", "timeout"),
    ("ephemeral_storage_mb", "ephemeral_storage.size"),
    (
        "max_retry_attempts",
        "aws_lambda_function_event_invoke_config.maximum_retry_attempts",
    ),
    (
        "max_event_age_secs",
        "aws_lambda_function_event_invoke_config.maximum_event_age_in_seconds",
    ),
    (
        "on_failure",
        "aws_lambda_function_event_invoke_config.destination_config",
    ),
    ("role", "role, with the aws_iam_role_policy documents on it"),
    ("reserved_concurrency", "reserved_concurrent_executions"),
];

/// Stream mapping fields the Terraform module decides.
const DERIVED_MAPPING_FIELDS: &[&str] = &[
    "batch_size",
    "parallelization_factor",
    "bisect_batch_on_function_error",
    "maximum_retry_attempts",
    "starting_position",
    "filters",
];

/// Schedule fields the Terraform module decides.
const DERIVED_SCHEDULE_FIELDS: &[(&str, &str)] = &[
    (
        "expression",
        "aws_cloudwatch_event_rule.schedule_expression",
    ),
    (
        "max_event_age_secs",
        "aws_cloudwatch_event_target.retry_policy.maximum_event_age_in_seconds",
    ),
    (
        "max_retry_attempts",
        "aws_cloudwatch_event_target.retry_policy.maximum_retry_attempts",
    ),
];

/// The emulator's config: the local part (`local`: the config format, with functions,
/// stream mappings and schedules holding only local settings) completed from the
/// deployment.
///
/// * Every function of the deployment needs an entry of the same name in the local part
///   (its `command`, `instances`, local `env`, `url`), and every entry a function.
/// * A function's `env` is Terraform's plus the local entry's (a name in both is an error)
///   plus `overrides`: an override replaces a variable on the functions Terraform sets it
///   on, and goes to every function when Terraform sets it on none.
/// * `instances` is capped by a reserved concurrency; a reserved concurrency of 0 (every
///   invocation throttled) cannot run and is an error.
/// * A local `url` (or `url_listen`) gets its `auth` and `integration_timeout_secs` from the
///   function's HTTP entry: a function URL's authorization type, or an HTTP API's
///   integration timeout (auth `NONE`: the emulator checks SigV4 as a function URL does,
///   not API Gateway's route authorization). A URL for a function the module does not
///   expose over HTTP is an error.
/// * Every stream mapping needs a local entry with the same `table` and `function` (its
///   `dynamodb_endpoint`, `poll_interval_ms`).
/// * Every schedule of the deployment is in the config, with the rule's `name` and
///   `expression`, the target's `function` and retry policy. A local schedule entry
///   (`name` and / or `function`, naming exactly one of them) may only add `every_secs`,
///   the local period.
pub fn emulator_config(
    deployment: &Deployment,
    local: &Json,
    overrides: &BTreeMap<String, String>,
) -> Result<Json, Error> {
    let Json::Object(local) = local else {
        return Err("the local part must be a JSON object".into());
    };
    let mut doc = local.clone();
    let entries = match doc.remove("functions") {
        None => Vec::new(),
        Some(Json::Array(a)) => a,
        Some(_) => return Err("local part: `functions` must be an array".into()),
    };
    let mapping_entries = match doc.remove("stream_mappings") {
        None => Vec::new(),
        Some(Json::Array(a)) => a,
        Some(_) => return Err("local part: `stream_mappings` must be an array".into()),
    };
    let schedule_entries = match doc.remove("schedules") {
        None => Vec::new(),
        Some(Json::Array(a)) => a,
        Some(_) => return Err("local part: `schedules` must be an array".into()),
    };
    let set_by_terraform: BTreeSet<&str> = deployment
        .functions
        .iter()
        .flat_map(|f| f.env.keys().map(String::as_str))
        .collect();

    let mut functions = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in entries {
        let Json::Object(entry) = entry else {
            return Err("local part: each function must be an object".into());
        };
        let name = entry
            .get("name")
            .and_then(Json::as_str)
            .ok_or("local part: a function without `name`")?
            .to_string();
        let Some(f) = deployment.functions.iter().find(|f| f.name == name) else {
            return Err(format!(
                "local part: function {name:?} is not deployed by the Terraform module (it deploys {})",
                deployment
                    .functions
                    .iter()
                    .map(|f| format!("{} as {:?}", f.address, f.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into());
        };
        if !seen.insert(name.clone()) {
            return Err(format!("local part: function {name:?} given twice").into());
        }
        functions.push(function_config(
            f,
            &name,
            entry,
            overrides,
            &set_by_terraform,
        )?);
    }
    if let Some(f) = deployment
        .functions
        .iter()
        .find(|f| !seen.contains(&f.name))
    {
        return Err(format!(
            "the Terraform module deploys {} as {:?}, but the local part has no function of that \
             name (it needs the command that runs it)",
            f.address, f.name
        )
        .into());
    }

    let mappings = stream_mappings(deployment, mapping_entries)?;
    doc.insert("functions".into(), Json::Array(functions));
    doc.insert("stream_mappings".into(), Json::Array(mappings));
    doc.insert(
        "schedules".into(),
        Json::Array(schedules(deployment, schedule_entries)?),
    );
    Ok(Json::Object(doc))
}

/// One function of the config: the local entry with what the Terraform module decides
/// (environment, memory, timeout, storage, async invoke config, reserved concurrency, how
/// its URL authorizes) filled in from `f`.
fn function_config(
    f: &Function,
    name: &str,
    mut entry: serde_json::Map<String, Json>,
    overrides: &BTreeMap<String, String>,
    set_by_terraform: &BTreeSet<&str>,
) -> Result<Json, Error> {
    for (field, source) in DERIVED_FUNCTION_FIELDS {
        if entry.contains_key(*field) {
            return Err(format!(
                "local part: function {name:?}: `{field}` comes from the Terraform module \
                 ({source} of {}); change it there or with --var",
                f.address
            )
            .into());
        }
    }
    // Environment: Terraform's, the local settings, the caller's overrides.
    let mut env: BTreeMap<String, String> = f.env.clone();
    if let Some(local_env) = entry.remove("env") {
        let Json::Object(local_env) = local_env else {
            return Err(format!("local part: function {name:?}: `env` must be an object").into());
        };
        for (k, v) in local_env {
            let Json::String(v) = v else {
                return Err(
                    format!("local part: function {name:?}: env {k} must be a string").into(),
                );
            };
            if env.contains_key(&k) {
                return Err(format!(
                    "local part: function {name:?}: env {k} is set by the Terraform module \
                     ({}.environment) and by the local part; only one may set it",
                    f.address
                )
                .into());
            }
            env.insert(k, v);
        }
    }
    for (k, v) in overrides {
        if f.env.contains_key(k) || !set_by_terraform.contains(k.as_str()) {
            env.insert(k.clone(), v.clone());
        }
    }
    entry.insert("env".into(), json!(env));
    entry.insert("memory_mb".into(), json!(f.memory_mb));
    entry.insert("timeout_secs".into(), json!(f.timeout_secs));
    entry.insert("ephemeral_storage_mb".into(), json!(f.ephemeral_storage_mb));
    entry.insert(
        "max_retry_attempts".into(),
        json!(f.invoke.max_retry_attempts),
    );
    entry.insert(
        "max_event_age_secs".into(),
        json!(f.invoke.max_event_age_secs),
    );
    entry.insert("on_failure".into(), json!(f.invoke.on_failure));
    if let Some(role) = &f.role {
        entry.insert("role".into(), json!(role));
    }
    if let Some(reserved) = f.reserved_concurrency {
        if reserved == 0 {
            return Err(format!(
                "{}: reserved_concurrent_executions = 0 throttles every invocation; the \
                 emulator cannot run a function without an instance",
                f.address
            )
            .into());
        }
        let instances = entry.get("instances").and_then(Json::as_u64).unwrap_or(1);
        entry.insert("instances".into(), json!(instances.min(reserved)));
        entry.insert("reserved_concurrency".into(), json!(reserved));
    }
    if let Some(url) = url_config(f, name, &mut entry)? {
        entry.insert("url".into(), url);
    }
    Ok(Json::Object(entry))
}

/// A function's URL: where it listens is local (`url.listen` or `url_listen`, taken out of
/// `entry`); how it authorizes and times out comes from the module's HTTP entry.
fn url_config(
    f: &Function,
    name: &str,
    entry: &mut serde_json::Map<String, Json>,
) -> Result<Option<Json>, Error> {
    let listen = match (entry.remove("url"), entry.remove("url_listen")) {
        (Some(Json::Object(url)), None | Some(Json::Null)) => {
            for field in ["auth", "integration_timeout_secs"] {
                if url.contains_key(field) {
                    return Err(format!(
                        "local part: function {name:?}: url.{field} comes from the Terraform module"
                    )
                    .into());
                }
            }
            match url.get("listen") {
                Some(Json::String(l)) => Some(l.clone()),
                _ => {
                    return Err(format!(
                        "local part: function {name:?}: url.listen must be a string"
                    )
                    .into())
                }
            }
        }
        (None | Some(Json::Null), Some(Json::String(l))) => Some(l),
        (None | Some(Json::Null), None | Some(Json::Null)) => None,
        _ => {
            return Err(format!(
                "local part: function {name:?}: give `url` {{\"listen\": ...}} or `url_listen`"
            )
            .into())
        }
    };
    let Some(listen) = listen else {
        return Ok(None);
    };
    let url = match &f.http {
        Some(HttpEntry::FunctionUrl { auth, .. }) => {
            json!({"listen": listen, "auth": auth})
        }
        Some(HttpEntry::HttpApi {
            integration_timeout_secs,
            ..
        }) => json!({
            "listen": listen,
            "auth": "NONE",
            "integration_timeout_secs": integration_timeout_secs,
        }),
        None => {
            return Err(format!(
                "local part: function {name:?} has a URL, but the Terraform module \
                     exposes {} neither through a function URL nor an HTTP API (with these \
                     variables)",
                f.address
            )
            .into())
        }
    };
    Ok(Some(url))
}

/// The deployment's stream mappings, each with the local entry naming its table and
/// function (exactly one each) and what the Terraform module decides filled in.
fn stream_mappings(
    deployment: &Deployment,
    mapping_entries: Vec<Json>,
) -> Result<Vec<Json>, Error> {
    let mut mappings = Vec::new();
    let mut used = vec![false; mapping_entries.len()];
    for m in &deployment.stream_mappings {
        let matches: Vec<usize> = mapping_entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.get("table").and_then(Json::as_str) == Some(m.table.as_str())
                    && e.get("function").and_then(Json::as_str) == Some(m.function.as_str())
            })
            .map(|(i, _)| i)
            .collect();
        if matches.len() != 1 {
            return Err(format!(
                "{}: the local part needs exactly one stream mapping with table {:?} and \
                 function {:?} (for its dynamodb_endpoint), it has {}",
                m.address,
                m.table,
                m.function,
                matches.len()
            )
            .into());
        }
        let i = matches[0];
        used[i] = true;
        let Json::Object(mut entry) = mapping_entries[i].clone() else {
            return Err("local part: each stream mapping must be an object".into());
        };
        for field in DERIVED_MAPPING_FIELDS {
            if entry.contains_key(*field) {
                return Err(format!(
                    "local part: stream mapping {} -> {}: `{field}` comes from the Terraform \
                     module ({})",
                    m.table, m.function, m.address
                )
                .into());
            }
        }
        entry.insert("batch_size".into(), json!(m.batch_size));
        entry.insert(
            "parallelization_factor".into(),
            json!(m.parallelization_factor),
        );
        entry.insert(
            "bisect_batch_on_function_error".into(),
            json!(m.bisect_batch_on_function_error),
        );
        entry.insert(
            "maximum_retry_attempts".into(),
            json!(m.maximum_retry_attempts),
        );
        entry.insert("starting_position".into(), json!(m.starting_position));
        // As the AWS API takes them: {"Pattern": "<JSON text>"}.
        let filters: Vec<Json> = m.filters.iter().map(|p| json!({"Pattern": p})).collect();
        entry.insert("filters".into(), Json::Array(filters));
        mappings.push(Json::Object(entry));
    }
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(format!(
            "local part: stream mapping {} is not deployed by the Terraform module",
            mapping_entries[i]
        )
        .into());
    }
    Ok(mappings)
}

/// The deployment's schedules, each with the `every_secs` of the local entry naming it.
fn schedules(deployment: &Deployment, entries: Vec<Json>) -> Result<Vec<Json>, Error> {
    let mut every_secs: Vec<Option<Json>> = vec![None; deployment.schedules.len()];
    for entry in entries {
        let Json::Object(entry) = entry else {
            return Err("local part: each schedule must be an object".into());
        };
        let shown = Json::Object(entry.clone());
        let key = |k: &str| match entry.get(k) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!(
                "local part: schedule {shown}: `{k}` must be a string"
            )),
        };
        let (name, function) = (key("name")?, key("function")?);
        if name.is_none() && function.is_none() {
            return Err(format!(
                "local part: schedule {shown} names no schedule: give the rule's `name` or the \
                 target's `function`"
            )
            .into());
        }
        for (field, source) in DERIVED_SCHEDULE_FIELDS {
            if entry.contains_key(*field) {
                return Err(format!(
                    "local part: schedule {shown}: `{field}` comes from the Terraform module \
                     ({source}); change it there or with --var"
                )
                .into());
            }
        }
        if let Some(other) = entry
            .keys()
            .find(|k| !["name", "function", "every_secs"].contains(&k.as_str()))
        {
            return Err(format!(
                "local part: schedule {shown}: unknown field `{other}` (a local schedule entry \
                 takes `name`, `function` and `every_secs`)"
            )
            .into());
        }
        let matches: Vec<usize> = deployment
            .schedules
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                name.as_ref().is_none_or(|n| *n == s.name)
                    && function.as_ref().is_none_or(|f| *f == s.function)
            })
            .map(|(i, _)| i)
            .collect();
        let [i] = matches.as_slice() else {
            return Err(format!(
                "local part: schedule {shown} must name exactly one schedule of the Terraform \
                 module; it names {} (the module schedules {})",
                matches.len(),
                if deployment.schedules.is_empty() {
                    "nothing".to_string()
                } else {
                    deployment
                        .schedules
                        .iter()
                        .map(|s| format!("{} ({:?}) -> {:?}", s.rule, s.name, s.function))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )
            .into());
        };
        if every_secs[*i].is_some() {
            return Err(format!(
                "local part: two schedule entries name {}",
                deployment.schedules[*i].rule
            )
            .into());
        }
        every_secs[*i] = Some(entry.get("every_secs").cloned().unwrap_or(Json::Null));
    }
    Ok(deployment
        .schedules
        .iter()
        .zip(every_secs)
        .map(|(s, every)| {
            json!({
                "name": s.name,
                "function": s.function,
                "expression": s.expression,
                "every_secs": every.unwrap_or(Json::Null),
                "max_event_age_secs": s.max_event_age_secs,
                "max_retry_attempts": s.max_retry_attempts,
            })
        })
        .collect())
}

/// What `lambdafusion-local config` was asked for.
#[derive(Debug, Clone)]
pub struct Request {
    /// The Terraform module's directory.
    pub module_dir: PathBuf,
    /// The local part (JSON file).
    pub local: PathBuf,
    /// Variable values (`--var`).
    pub vars: BTreeMap<String, String>,
    /// The stack's resource names (`--name`).
    pub names: BTreeMap<Address, String>,
    /// Environment overrides (`--env`).
    pub env: BTreeMap<String, String>,
}

/// Builds the emulator config of a request, checks it as `serve` would, and returns its
/// JSON text with the deployment's summary.
pub fn build(request: &Request) -> Result<(String, Vec<String>), Error> {
    let module = Module::load(&request.module_dir)?;
    let text = std::fs::read_to_string(&request.local).map_err(|e| {
        format!(
            "cannot read the local part {}: {e}",
            request.local.display()
        )
    })?;
    let local: Json = serde_json::from_str(&text)
        .map_err(|e| format!("local part {}: not JSON: {e}", request.local.display()))?;
    let text_of = |key: &str, default: &str| {
        local
            .get(key)
            .and_then(Json::as_str)
            .unwrap_or(default)
            .to_string()
    };
    let inputs = Inputs {
        vars: request.vars.clone(),
        names: request.names.clone(),
        region: text_of("region", "us-east-1"),
        account: text_of("account", "000000000000"),
    };
    let deployment = deployment(&module, &inputs)
        .map_err(|e| format!("Terraform module {}: {e}", request.module_dir.display()))?;
    let config = emulator_config(&deployment, &local, &request.env)?;
    let mut text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    text.push('\n');
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    let checked = crate::Config::from_json(&text, &cwd)
        .map_err(|e| format!("the generated config is not valid: {e}"))?;
    let mut summary = deployment.summary();
    for s in &checked.schedules {
        if let Some(secs) = s.every_secs {
            summary.push(format!(
                "schedule {}: every {secs} s locally (the local part's every_secs), not {}",
                s.name, s.expression
            ));
        }
    }
    Ok((text, summary))
}

// ---------------------------------------------------------------------------------------
// Terraform functions
// ---------------------------------------------------------------------------------------

/// The Terraform functions the module's derived expressions use, with Terraform's semantics
/// (<https://developer.hashicorp.com/terraform/language/functions>). A function not here
/// fails evaluation with hcl-rs's "undefined function" error, prefixed with the resource and
/// attribute being evaluated.
pub mod functions {
    use hcl::eval::{Context, FuncArgs, FuncDef, ParamType};
    use hcl::{Number, Value};

    /// Declares every function of this module in `ctx`.
    pub fn declare(ctx: &mut Context) {
        let variadic = |f| FuncDef::builder().variadic_param(ParamType::Any).build(f);
        let unary = |f| FuncDef::builder().param(ParamType::Any).build(f);
        ctx.declare_func("merge", variadic(merge));
        ctx.declare_func("coalesce", variadic(coalesce));
        ctx.declare_func("max", variadic(max));
        ctx.declare_func("min", variadic(min));
        ctx.declare_func("tostring", unary(tostring));
        ctx.declare_func("tonumber", unary(tonumber));
        ctx.declare_func("tobool", unary(tobool));
        ctx.declare_func("jsonencode", unary(jsonencode));
        ctx.declare_func("length", unary(length));
        ctx.declare_func("floor", unary(floor));
        ctx.declare_func("concat", variadic(concat));
        ctx.declare_func(
            "split",
            FuncDef::builder()
                .param(ParamType::String)
                .param(ParamType::String)
                .build(split),
        );
        ctx.declare_func(
            "join",
            FuncDef::builder()
                .param(ParamType::String)
                .variadic_param(ParamType::Any)
                .build(join),
        );
    }

    /// A number as Terraform writes it: integers without a fraction, others in the
    /// shortest decimal form (`tostring(1.5)` = `"1.5"`, `tostring(2.0)` = `"2"`).
    pub fn number_text(n: &Number) -> String {
        if n.is_i64() || n.is_u64() {
            return n.to_string();
        }
        let f = n.as_f64().unwrap_or(f64::NAN);
        if f.fract() == 0.0 && f.abs() < 1e15 {
            format!("{}", f as i64)
        } else {
            format!("{f}")
        }
    }

    /// Parses a number as Terraform's `tonumber` does (decimal, optional exponent).
    pub fn parse_number(s: &str) -> Option<Number> {
        let s = s.trim();
        if let Ok(i) = s.parse::<i64>() {
            return Some(Number::from(i));
        }
        if let Ok(u) = s.parse::<u64>() {
            return Some(Number::from(u));
        }
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(Number::from_f64)
    }

    fn kind(v: &Value) -> &'static str {
        super::type_name(v)
    }

    /// `merge(maps...)`: one map with every key; later arguments win; null arguments are
    /// skipped.
    pub fn merge(args: FuncArgs) -> Result<Value, String> {
        let mut out = hcl::Map::new();
        for (i, arg) in args.iter().enumerate() {
            match arg {
                Value::Null => continue,
                Value::Object(map) => {
                    for (k, v) in map {
                        out.insert(k.clone(), v.clone());
                    }
                }
                other => {
                    return Err(format!(
                        "argument {} must be a map or object, not a {}",
                        i + 1,
                        kind(other)
                    ))
                }
            }
        }
        Ok(Value::Object(out))
    }

    /// `coalesce(values...)`: the first argument that is neither null nor an empty string.
    /// Mixed primitive types unify to string, as Terraform unifies them.
    pub fn coalesce(args: FuncArgs) -> Result<Value, String> {
        let present: Vec<&Value> = args.iter().filter(|v| !v.is_null()).collect();
        let kinds: std::collections::BTreeSet<&str> = present.iter().map(|v| kind(v)).collect();
        let unify_to_string = kinds.len() > 1;
        if unify_to_string
            && !kinds
                .iter()
                .all(|k| ["string", "number", "bool"].contains(k))
        {
            return Err(format!(
                "all arguments must have the same type, not {}",
                kinds.into_iter().collect::<Vec<_>>().join(" and ")
            ));
        }
        if unify_to_string && !kinds.contains("string") {
            return Err("all arguments must have the same type, not bool and number".into());
        }
        for v in present {
            let v = if unify_to_string {
                to_string_value(v)?
            } else {
                v.clone()
            };
            if v.as_str() == Some("") {
                continue;
            }
            return Ok(v);
        }
        Err("no non-null, non-empty-string arguments".into())
    }

    fn to_string_value(v: &Value) -> Result<Value, String> {
        match v {
            Value::Null => Ok(Value::Null),
            Value::String(_) => Ok(v.clone()),
            Value::Number(n) => Ok(Value::String(number_text(n))),
            Value::Bool(b) => Ok(Value::String(b.to_string())),
            other => Err(format!("cannot convert a {} to string", kind(other))),
        }
    }

    /// `tostring(v)`: strings, numbers and bools as text; null stays null.
    pub fn tostring(args: FuncArgs) -> Result<Value, String> {
        to_string_value(&args[0])
    }

    /// `tonumber(v)`: numbers, and strings holding one; null stays null.
    pub fn tonumber(args: FuncArgs) -> Result<Value, String> {
        match &args[0] {
            Value::Null | Value::Number(_) => Ok(args[0].clone()),
            Value::String(s) => parse_number(s)
                .map(Value::Number)
                .ok_or_else(|| format!("cannot convert {s:?} to number")),
            other => Err(format!("cannot convert a {} to number", kind(other))),
        }
    }

    /// `tobool(v)`: bools, and the strings "true" and "false"; null stays null.
    pub fn tobool(args: FuncArgs) -> Result<Value, String> {
        match &args[0] {
            Value::Null | Value::Bool(_) => Ok(args[0].clone()),
            Value::String(s) if s == "true" => Ok(Value::Bool(true)),
            Value::String(s) if s == "false" => Ok(Value::Bool(false)),
            other => Err(format!("cannot convert {other} to bool")),
        }
    }

    /// `concat(lists...)`: one list with every element, in order.
    pub fn concat(args: FuncArgs) -> Result<Value, String> {
        let mut out = Vec::new();
        for (i, list) in args.iter().enumerate() {
            let Value::Array(items) = list else {
                return Err(format!(
                    "argument {} must be a list, not a {}",
                    i + 1,
                    kind(list)
                ));
            };
            out.extend(items.iter().cloned());
        }
        Ok(Value::Array(out))
    }

    /// `split(separator, string)`: the string's parts between separators.
    pub fn split(args: FuncArgs) -> Result<Value, String> {
        let separator = args[0].as_str().unwrap_or_default();
        let text = args[1].as_str().unwrap_or_default();
        if separator.is_empty() {
            return Err("the separator must not be empty".into());
        }
        Ok(Value::Array(
            text.split(separator)
                .map(|part| Value::String(part.to_string()))
                .collect(),
        ))
    }

    /// `join(separator, lists...)`: the elements of every list, in order, with the
    /// separator between them. Numbers and bools are converted; a null element is an error.
    pub fn join(args: FuncArgs) -> Result<Value, String> {
        let separator = args[0].as_str().unwrap_or_default();
        let lists: Vec<&Value> = args.variadic_args().collect();
        if lists.is_empty() {
            return Err("at least one list is required".into());
        }
        let mut parts = Vec::new();
        for (i, list) in lists.iter().enumerate() {
            let Value::Array(items) = list else {
                return Err(format!(
                    "argument {} must be a list, not a {}",
                    i + 2,
                    kind(list)
                ));
            };
            for (j, item) in items.iter().enumerate() {
                match to_string_value(item)? {
                    Value::String(s) => parts.push(s),
                    _ => return Err(format!("element {j} of list {} is null", i + 1)),
                }
            }
        }
        Ok(Value::String(parts.join(separator)))
    }

    fn numbers(args: &FuncArgs) -> Result<Vec<Number>, String> {
        if args.is_empty() {
            return Err("must have at least one argument".into());
        }
        args.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Number(n) => Ok(*n),
                Value::String(s) => parse_number(s)
                    .ok_or_else(|| format!("argument {}: {s:?} is not a number", i + 1)),
                other => Err(format!(
                    "argument {} must be a number, not a {}",
                    i + 1,
                    kind(other)
                )),
            })
            .collect()
    }

    fn pick(args: FuncArgs, greater: bool) -> Result<Value, String> {
        let values = numbers(&args)?;
        let mut best = values[0];
        for n in &values[1..] {
            let (a, b) = (
                n.as_f64().unwrap_or(f64::NAN),
                best.as_f64().unwrap_or(f64::NAN),
            );
            if (greater && a > b) || (!greater && a < b) {
                best = *n;
            }
        }
        Ok(Value::Number(best))
    }

    /// `max(numbers...)`: the greatest.
    pub fn max(args: FuncArgs) -> Result<Value, String> {
        pick(args, true)
    }

    /// `min(numbers...)`: the smallest.
    pub fn min(args: FuncArgs) -> Result<Value, String> {
        pick(args, false)
    }

    /// `floor(n)`: the greatest whole number not above `n`.
    pub fn floor(args: FuncArgs) -> Result<Value, String> {
        let n = numbers(&args)?[0];
        if n.is_i64() || n.is_u64() {
            return Ok(Value::Number(n));
        }
        let f = n.as_f64().unwrap_or(f64::NAN).floor();
        if f.abs() < 9.0e15 {
            Ok(Value::Number(Number::from(f as i64)))
        } else {
            Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| "argument is not a finite number".into())
        }
    }

    /// `length(v)`: elements of a list, keys of a map or object, characters of a string.
    pub fn length(args: FuncArgs) -> Result<Value, String> {
        let n = match &args[0] {
            Value::Array(items) => items.len(),
            Value::Object(map) => map.len(),
            Value::String(s) => s.chars().count(),
            Value::Null => return Err("argument must not be null".into()),
            other => {
                return Err(format!(
                    "argument must be a string, a collection or a structure, not a {}",
                    kind(other)
                ))
            }
        };
        Ok(Value::from(n as u64))
    }

    /// `jsonencode(v)`: JSON text as Terraform writes it: no spaces, object keys sorted,
    /// `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`-style sequences.
    pub fn jsonencode(args: FuncArgs) -> Result<Value, String> {
        let mut out = String::new();
        encode(&args[0], &mut out);
        Ok(Value::String(out))
    }

    fn encode(v: &Value, out: &mut String) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&number_text(n)),
            Value::String(s) => quote(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    encode(item, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    quote(k, out);
                    out.push(':');
                    encode(&map[k], out);
                }
                out.push('}');
            }
        }
    }

    fn quote(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                }
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deployment's module, relative to this crate.
    fn module_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/terraform/modules/lambdafusion")
    }

    /// The module's files as (name, text), for mutation.
    fn module_files() -> Vec<(String, String)> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(module_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tf"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p.file_name().unwrap().to_string_lossy().into_owned(), text)
            })
            .collect()
    }

    /// Replaces `from` (which must be there, else the test would prove nothing) in the file
    /// that holds it.
    fn mutate(files: &[(String, String)], from: &str, to: &str) -> Vec<(String, String)> {
        let mut found = false;
        let out = files
            .iter()
            .map(|(name, text)| {
                if !found && text.contains(from) {
                    found = true;
                    (name.clone(), text.replacen(from, to, 1))
                } else {
                    (name.clone(), text.clone())
                }
            })
            .collect();
        assert!(found, "mutation target not in the module: {from:?}");
        out
    }

    /// The names the local stack gives the module's resources.
    fn stack_inputs(vars: &[(&str, &str)]) -> Inputs {
        let names = [
            ("aws_dynamodb_table.jobs", "jobs-local"),
            ("aws_s3_bucket.shuffle", "bucket-local"),
            ("aws_lambda_function.scheduler", "sched-local"),
            ("aws_lambda_function.executor", "exec-local"),
        ];
        Inputs {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            names: names
                .iter()
                .map(|(a, n)| (a.parse().unwrap(), n.to_string()))
                .collect(),
            ..Inputs::default()
        }
    }

    fn deploy(files: &[(String, String)], vars: &[(&str, &str)]) -> Result<Deployment, Error> {
        deployment(&Module::parse(files).unwrap(), &stack_inputs(vars))
    }

    fn function<'a>(d: &'a Deployment, name: &str) -> &'a Function {
        d.functions.iter().find(|f| f.name == name).unwrap()
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_block_written_twice_is_refused_and_every_kind_is_kept() {
        let parse = |hcl: &str| Module::parse(&[("t.tf".into(), hcl.into())]);
        for (twice, says) in [
            (r#"variable "a" {}"#, r#"variable "a" declared twice"#),
            (
                r#"resource "aws_s3_bucket" "b" {}"#,
                "resource aws_s3_bucket.b defined twice",
            ),
            (
                r#"data "aws_iam_policy_document" "d" {}"#,
                "data aws_iam_policy_document.d defined twice",
            ),
            (r#"output "o" {}"#, r#"output "o" defined twice"#),
        ] {
            let err = parse(&format!("{twice}\n{twice}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{err}");
        }
        let module = parse(
            r#"
            variable "a" { default = 1 }
            locals { l = var.a }
            resource "aws_s3_bucket" "b" { bucket = "x" }
            data "aws_iam_policy_document" "d" {}
            output "o" { value = local.l }
            "#,
        )
        .unwrap();
        assert!(attr(module.variable("a").unwrap(), "default").is_some());
        assert!(module.locals().contains_key("l"));
        assert!(module.resource("aws_s3_bucket", "b").is_some());
        assert!(module.data_source("aws_iam_policy_document", "d").is_some());
        assert!(attr(module.output("o").unwrap(), "value").is_some());
        assert!(module.resource("aws_s3_bucket", "d").is_none());
    }

    // ---- the evaluator -----------------------------------------------------------------

    /// Evaluates `expr` in a module made of `hcl` (variables, locals, resources).
    fn eval_in(hcl: &str, inputs: &Inputs, expr: &str) -> Result<Value, String> {
        let module = Module::parse(&[("test.tf".into(), hcl.into())]).unwrap();
        let scope = deployment_scope(&module, inputs).map_err(|e| e.to_string())?;
        scope.eval(&Expression::from_str(expr).unwrap())
    }

    const SMALL: &str = r#"
        variable "names" {
          type    = list(string)
          default = ["a", "b"]
        }
        variable "size" {
          type    = number
          default = 3
        }
        variable "flag" {
          type    = bool
          default = null
        }
        variable "required" {
          type = string
        }
        locals {
          doubled = var.size * 2
          label   = "size-${local.doubled}"
          loop_a  = local.loop_b
          loop_b  = local.loop_a
          env = merge(
            { FIXED = tostring(local.doubled) },
            { for k, v in { FLAG = var.flag, SIZE = var.size } : k => tostring(v) if v != null },
          )
        }
        resource "aws_s3_bucket" "named" {
          bucket = "b-${var.size}"
        }
        resource "aws_s3_bucket" "nameless" {
          bucket = null
        }
        resource "aws_sqs_queue" "q" {
          name = "q"
        }
        resource "aws_kms_key" "k" {
          description = "k"
        }
        data "aws_partition" "here" {}
    "#;

    #[test]
    fn evaluates_locals_for_expressions_templates_and_conditionals() {
        let inputs = Inputs::default();
        let v = |e: &str| eval_in(SMALL, &inputs, e).unwrap();
        assert_eq!(v("local.label"), Value::from("size-6"));
        assert_eq!(
            v("[for n in var.names : \"s3://${n}\"]"),
            Value::from_iter(["s3://a", "s3://b"])
        );
        assert_eq!(
            v("length(var.names) > 1 ? \"many\" : \"few\""),
            Value::from("many")
        );
        // The `if` drops the null flag; merge keeps the first map's key.
        let env = v("local.env");
        let keys: Vec<&String> = env.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["FIXED", "SIZE"]);
        assert_eq!(
            v("aws_s3_bucket.named.arn"),
            Value::from("arn:aws:s3:::b-3")
        );
        // What the module's Glue grant is made of.
        assert_eq!(
            v("split(\":\", \"arn:aws:dynamodb:r:1:table/t\")[4]"),
            Value::from("1")
        );
        assert_eq!(
            v("concat([\"a\"], [for n in var.names : \"x/${n}\"], [])"),
            Value::from_iter(["a", "x/a", "x/b"])
        );

        let inputs = Inputs {
            vars: [
                ("flag".to_string(), "true".to_string()),
                ("size".into(), "5".into()),
            ]
            .into_iter()
            .collect(),
            ..Inputs::default()
        };
        let env = eval_in(SMALL, &inputs, "local.env").unwrap();
        assert_eq!(env.as_object().unwrap()["FLAG"], Value::from("true"));
        assert_eq!(env.as_object().unwrap()["FIXED"], Value::from("10"));
    }

    #[test]
    fn references_that_cannot_be_evaluated_are_named() {
        let inputs = Inputs::default();
        let err = |e: &str| eval_in(SMALL, &inputs, e).unwrap_err();
        assert!(err("var.required")
            .contains("var.required has no default: give it with --var required=VALUE"));
        assert!(err("var.nope").contains("var.nope is not declared"));
        assert!(
            err("local.loop_a").contains("depends on itself"),
            "{}",
            err("local.loop_a")
        );
        assert!(err("data.aws_partition.current.partition").contains("is a data source"));
        assert!(err("data.aws_caller_identity.here.account_id").contains("is a data source"));
        // The one data source the stack answers.
        assert_eq!(
            eval_in(SMALL, &inputs, "data.aws_partition.here.partition").unwrap(),
            Value::from("aws")
        );
        let e = err("aws_s3_bucket.nameless.id");
        assert!(
            e.contains("aws_s3_bucket.nameless.id is unknown locally")
                && e.contains("--name aws_s3_bucket.nameless=NAME"),
            "{e}"
        );
        // A queue's ARN is known (for IAM statements), nothing else of it.
        let e = err("aws_sqs_queue.q.url");
        assert!(e.contains("knows only") && e.contains("`arn`"), "{e}");
        assert_eq!(
            eval_in(SMALL, &inputs, "aws_sqs_queue.q.arn").unwrap(),
            Value::from("arn:aws:sqs:us-east-1:000000000000:q")
        );
        assert!(err("aws_kms_key.k.arn").contains("does not play aws_kms_key"));
        assert!(err("aws_s3_bucket.named.region").contains("knows only"));
        assert!(err("aws_s3_bucket.absent.id").contains("not a resource of the module"));
        let e = err("filebase64sha256(\"x.zip\")");
        assert!(e.contains("filebase64sha256"), "{e}");
        // Bound `for` variables are not references.
        assert!(eval_in(SMALL, &inputs, "[for var in [1] : var]").is_ok());
    }

    #[test]
    fn variables_are_parsed_as_terraform_parses_var() {
        let module = Module::parse(&[("t.tf".into(), SMALL.into())]).unwrap();
        let with = |k: &str, v: &str| Inputs {
            vars: [(k.to_string(), v.to_string())].into_iter().collect(),
            ..Inputs::default()
        };
        let vars = variable_values(&module, &with("names", r#"["x", 1]"#)).unwrap();
        assert_eq!(
            vars["names"],
            Value::from_iter(["x", "1"]),
            "list(string) converts"
        );
        let vars = variable_values(&module, &with("size", "7")).unwrap();
        assert_eq!(vars["size"], Value::from(7));
        let vars = variable_values(&module, &with("required", "[1]")).unwrap();
        assert_eq!(
            vars["required"],
            Value::from("[1]"),
            "strings are taken literally"
        );
        for (k, v, why) in [
            ("size", "many", "is not a number"),
            ("flag", "yes", "a bool is required"),
            ("names", "\"x\"", "a list is required"),
            ("names", "[", "not an HCL expression"),
            ("colour", "red", "declares no variable"),
        ] {
            let e = variable_values(&module, &with(k, v))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{k}={v}: {e}");
        }
        assert!(!variable_values(&module, &Inputs::default())
            .unwrap()
            .contains_key("required"));
    }

    // ---- Terraform functions -------------------------------------------------------------

    fn call(expr: &str) -> Result<Value, String> {
        constant(&Expression::from_str(expr).unwrap())
    }

    #[test]
    fn merge_and_coalesce() {
        let merged = call(r#"merge({a = 1, b = 2}, null, {b = 3, c = 4})"#).unwrap();
        assert_eq!(
            merged,
            Value::from_iter([("a", Value::from(1)), ("b", 3.into()), ("c", 4.into())])
        );
        assert!(call("merge({}, [1])")
            .unwrap_err()
            .contains("argument 2 must be a map"));
        assert_eq!(
            call(r#"coalesce(null, "", "x", "y")"#).unwrap(),
            Value::from("x")
        );
        assert_eq!(call("coalesce(null, 5)").unwrap(), Value::from(5));
        assert_eq!(
            call(r#"coalesce(1, "a")"#).unwrap(),
            Value::from("1"),
            "unified to string"
        );
        assert!(call(r#"coalesce(null, "")"#)
            .unwrap_err()
            .contains("no non-null"));
        assert!(call("coalesce(true, 1)").unwrap_err().contains("same type"));
    }

    #[test]
    fn conversions() {
        assert_eq!(call("tostring(3600)").unwrap(), Value::from("3600"));
        assert_eq!(call("tostring(1.5)").unwrap(), Value::from("1.5"));
        assert_eq!(call("tostring(5 / 2 * 2)").unwrap(), Value::from("5"));
        assert_eq!(call("tostring(true)").unwrap(), Value::from("true"));
        assert_eq!(call("tostring(null)").unwrap(), Value::Null);
        assert!(call("tostring([1])")
            .unwrap_err()
            .contains("cannot convert a list"));
        assert_eq!(call(r#"tonumber("42")"#).unwrap(), Value::from(42));
        assert!(call(r#"tonumber("x")"#).is_err());
        assert_eq!(call(r#"tobool("false")"#).unwrap(), Value::Bool(false));
        assert!(call(r#"tobool("no")"#).is_err());
    }

    #[test]
    fn join_length_min_max() {
        assert_eq!(
            call(r#"join(",", ["a", "b"], ["c"])"#).unwrap(),
            Value::from("a,b,c")
        );
        assert_eq!(
            call(r#"join("-", [1, true])"#).unwrap(),
            Value::from("1-true")
        );
        assert_eq!(call(r#"join(",", [])"#).unwrap(), Value::from(""));
        assert!(call(r#"join(",", ["a", null])"#)
            .unwrap_err()
            .contains("is null"));
        assert!(call(r#"join(",")"#)
            .unwrap_err()
            .contains("at least one list"));
        assert_eq!(call(r#"length(["a", "b"])"#).unwrap(), Value::from(2u64));
        assert_eq!(call(r#"length({a = 1})"#).unwrap(), Value::from(1u64));
        assert_eq!(call(r#"length("héllo")"#).unwrap(), Value::from(5u64));
        assert!(call("length(null)")
            .unwrap_err()
            .contains("must not be null"));
        assert_eq!(call("max(2, 60 - 10)").unwrap(), Value::from(50));
        assert_eq!(call("max(2, 5 - 10)").unwrap(), Value::from(2));
        assert_eq!(
            call(r#"min(3, "1.5", 2)"#).unwrap(),
            Value::Number(hcl::Number::from_f64(1.5).unwrap())
        );
        assert!(call("max()").unwrap_err().contains("at least one argument"));
        assert!(call(r#"max(1, "x")"#).unwrap_err().contains("not a number"));
        // As Terraform: floor(51.2) = 51, floor(-1.5) = -2, whole numbers unchanged.
        assert_eq!(call("floor(512 / 10)").unwrap(), Value::from(51));
        assert_eq!(call("floor(-1.5)").unwrap(), Value::from(-2));
        assert_eq!(call("floor(7)").unwrap(), Value::from(7));
        assert_eq!(
            call("(512 - max(64, floor(512 / 10))) * 1048576").unwrap(),
            Value::from(448u64 * 1048576)
        );
    }

    #[test]
    fn jsonencode_writes_what_terraform_writes() {
        assert_eq!(
            call(r#"jsonencode({ z = [1, 2.5, null, true], a = { b = "<&>" } })"#).unwrap(),
            Value::from(r#"{"a":{"b":"\u003c\u0026\u003e"},"z":[1,2.5,null,true]}"#)
        );
        assert_eq!(
            call(r#"jsonencode("q\"\\\n")"#).unwrap(),
            Value::from(r#""q\"\\\n""#)
        );
    }

    // ---- the real module --------------------------------------------------------------

    /// What functions.tf sets on both functions, with the module's defaults.
    fn engine_env() -> BTreeMap<String, String> {
        env(&[
            ("LAMBDAFUSION_TABLE", "jobs-local"),
            ("LAMBDAFUSION_BUCKET", "bucket-local"),
            ("LAMBDAFUSION_PREFIX", "lambdafusion"),
            // executor_max_event_age_seconds + executor_timeout_seconds + 60
            ("LAMBDAFUSION_TASK_TIMEOUT_SECS", "2760"),
            ("LAMBDAFUSION_JOB_TTL_DAYS", "7"),
            ("LAMBDAFUSION_MAX_PRESIGN_SECS", "900"),
            ("LAMBDAFUSION_MAX_QUERY_SECONDS", "3600"),
            // max(2, scheduler_timeout_seconds - 10)
            ("LAMBDAFUSION_SWEEP_BUDGET_SECS", "50"),
            // The executor's size, for the cost estimate.
            ("LAMBDAFUSION_EXECUTOR_MEMORY_MB", "3008"),
            ("LAMBDAFUSION_EXECUTOR_EPHEMERAL_STORAGE_MB", "2048"),
        ])
    }

    #[test]
    fn real_module_function_environments_are_exactly_terraforms() {
        let module = Module::load(&module_dir()).unwrap();
        let d = deployment(&module, &stack_inputs(&[])).unwrap();
        assert_eq!(d.functions.len(), 2);
        let mut scheduler = engine_env();
        scheduler.insert("LAMBDAFUSION_EXECUTOR_FUNCTION".into(), "exec-local".into());
        scheduler.insert(
            "LAMBDAFUSION_SCHEDULER_FUNCTION".into(),
            "sched-local".into(),
        );
        let mut executor = engine_env();
        executor.insert(
            "LAMBDAFUSION_SCHEDULER_FUNCTION".into(),
            "sched-local".into(),
        );
        executor.insert("LAMBDAFUSION_EXECUTOR_FUNCTION".into(), "exec-local".into());
        // Each function's ephemeral storage less a tenth, at least 64 MiB: 512 MB and
        // 2048 MB by default.
        scheduler.insert(
            "LAMBDAFUSION_MAX_SPILL_BYTES".into(),
            ((512 - 64) * 1048576u64).to_string(),
        );
        executor.insert(
            "LAMBDAFUSION_MAX_SPILL_BYTES".into(),
            ((2048 - 204) * 1048576u64).to_string(),
        );
        assert_eq!(function(&d, "sched-local").env, scheduler);
        assert_eq!(function(&d, "exec-local").env, executor);
    }

    #[test]
    fn real_module_roles_are_iam_tfs() {
        let d = deploy(&module_files(), &[("data_buckets", r#"["lake"]"#)]).unwrap();
        let exec = function(&d, "exec-local").role.as_ref().unwrap();
        assert_eq!(
            exec.arn,
            "arn:aws:iam::000000000000:role/lambdafusion-executor"
        );
        let sid = |role: &RoleConfig, sid: &str| {
            role.statements
                .iter()
                .find(|s| s.sid.as_deref() == Some(sid))
                .unwrap_or_else(|| panic!("no statement {sid}: {role:?}"))
                .clone()
        };
        let objects = sid(exec, "ShuffleObjects");
        assert!(objects
            .actions
            .contains(&"s3:AbortMultipartUpload".to_string()));
        assert_eq!(
            objects.resources,
            ["arn:aws:s3:::bucket-local/lambdafusion/*"]
        );
        // Dynamic statements follow their variables, data.aws_partition included.
        assert_eq!(sid(exec, "DataObjects").resources, ["arn:aws:s3:::lake/*"]);
        let sched = function(&d, "sched-local").role.as_ref().unwrap();
        assert_eq!(sid(sched, "DataBuckets").resources, ["arn:aws:s3:::lake"]);
        assert_eq!(
            sid(sched, "JobTableStream").resources,
            ["arn:aws:dynamodb:us-east-1:000000000000:table/jobs-local/stream/local"]
        );
        assert_eq!(
            sid(sched, "PoisonQueue").resources,
            ["arn:aws:sqs:us-east-1:000000000000:lambdafusion-scheduler-dlq"]
        );
        let d = deploy(&module_files(), &[]).unwrap();
        let exec = function(&d, "exec-local").role.as_ref().unwrap();
        assert!(exec
            .statements
            .iter()
            .all(|s| s.sid.as_deref() != Some("DataObjects")));

        // What the local IAM cannot play is refused, by name.
        let err = |files: Vec<(String, String)>| deploy(&files, &[]).unwrap_err().to_string();
        let e = err(mutate(
            &module_files(),
            "    sid       = \"ShuffleBucket\"\n    actions   = [\"s3:ListBucket\"]\n    resources = [aws_s3_bucket.shuffle.arn]\n  }\n\n  # Shuffle output",
            "    sid       = \"ShuffleBucket\"\n    actions   = [\"s3:ListBucket\"]\n    resources = [aws_s3_bucket.shuffle.arn]\n    condition {\n      test = \"StringLike\"\n      variable = \"s3:prefix\"\n      values = [\"x/*\"]\n    }\n  }\n\n  # Shuffle output",
        ));
        assert!(
            e.contains("data.aws_iam_policy_document.executor") && e.contains("condition"),
            "{e}"
        );
        let mut files = module_files();
        files.push((
            "extra.tf".into(),
            "resource \"aws_iam_role_policy_attachment\" \"x\" {\n  role = aws_iam_role.executor.name\n  policy_arn = \"arn:aws:iam::aws:policy/AdministratorAccess\"\n}\n".into(),
        ));
        let e = err(files);
        assert!(
            e.contains("aws_iam_role_policy_attachment.x") && e.contains("only inline policies"),
            "{e}"
        );
    }

    #[test]
    fn real_module_sizes_async_config_and_http_entry() {
        let d = deploy(&module_files(), &[]).unwrap();
        let s = function(&d, "sched-local");
        let e = function(&d, "exec-local");
        assert_eq!(s.address.to_string(), "aws_lambda_function.scheduler");
        assert_eq!(
            (
                s.memory_mb,
                s.timeout_secs,
                s.ephemeral_storage_mb,
                s.reserved_concurrency
            ),
            (1024, 60, 512, None)
        );
        assert_eq!(
            (
                e.memory_mb,
                e.timeout_secs,
                e.ephemeral_storage_mb,
                e.reserved_concurrency
            ),
            (3008, 900, 2048, None)
        );
        // The scheduler's events: Lambda's two retries, 15 minutes of age at most.
        assert_eq!(
            s.invoke,
            InvokeConfig {
                address: Some(
                    "aws_lambda_function_event_invoke_config.scheduler"
                        .parse()
                        .unwrap()
                ),
                max_retry_attempts: 2,
                max_event_age_secs: 900,
                on_failure: None,
            }
        );
        assert_eq!(
            e.invoke,
            InvokeConfig {
                address: Some(
                    "aws_lambda_function_event_invoke_config.executor"
                        .parse()
                        .unwrap()
                ),
                max_retry_attempts: 0,
                max_event_age_secs: 1800,
                on_failure: Some("sched-local".into()),
            }
        );
        // enable_http_api defaults to true, enable_function_url to false.
        assert_eq!(
            s.http,
            Some(HttpEntry::HttpApi {
                address: "aws_apigatewayv2_integration.scheduler".parse().unwrap(),
                integration_timeout_secs: 30,
            })
        );
        assert_eq!(e.http, None);
    }

    #[test]
    fn real_module_stream_trigger_is_table_tfs() {
        let d = deploy(&module_files(), &[]).unwrap();
        assert_eq!(d.stream_mappings.len(), 1);
        let m = &d.stream_mappings[0];
        assert_eq!(
            (m.table.as_str(), m.function.as_str()),
            ("jobs-local", "sched-local")
        );
        assert_eq!(
            (
                m.batch_size,
                m.parallelization_factor,
                m.bisect_batch_on_function_error,
                m.maximum_retry_attempts,
                m.starting_position.as_str()
            ),
            (100, 2, true, 10, "LATEST")
        );
        // table.tf's two filters, as jsonencode writes them (keys sorted) ...
        assert_eq!(
            m.filters,
            [
                r#"{"dynamodb":{"NewImage":{"remaining":{"N":["0"]},"sk":{"S":[{"prefix":"COUNT#"}]}}}}"#,
                r#"{"dynamodb":{"NewImage":{"sk":{"S":[{"prefix":"TASK#"}]},"state":{"S":["FAILED"]}}}}"#,
            ]
        );
        // ... and as patterns.
        let patterns: Vec<Json> = m
            .filters
            .iter()
            .map(|f| serde_json::from_str(f).unwrap())
            .collect();
        assert_eq!(
            patterns,
            [
                json!({"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "COUNT#"}]}, "remaining": {"N": ["0"]}}}}),
                json!({"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "TASK#"}]}, "state": {"S": ["FAILED"]}}}}),
            ]
        );
    }

    /// schedule.tf's sweep, with the module's defaults.
    fn sweep(name: &str, expression: &str) -> Schedule {
        Schedule {
            rule: "aws_cloudwatch_event_rule.sweep".parse().unwrap(),
            target: "aws_cloudwatch_event_target.sweep".parse().unwrap(),
            name: name.into(),
            function: "sched-local".into(),
            expression: expression.into(),
            max_event_age_secs: 60,
            max_retry_attempts: 0,
        }
    }

    #[test]
    fn real_module_schedule_is_schedule_tfs() {
        let module = Module::load(&module_dir()).unwrap();
        let d = deployment(&module, &stack_inputs(&[])).unwrap();
        assert_eq!(
            d.schedules,
            [sweep("lambdafusion-sweep", "rate(1 minute)")],
            "rule expression, target and retry policy from schedule.tf"
        );
        // It follows the module's variables ...
        let d = deploy(
            &module_files(),
            &[
                ("sweep_schedule_expression", "rate(5 minutes)"),
                ("name_prefix", "dev"),
            ],
        )
        .unwrap();
        assert_eq!(d.schedules, [sweep("dev-sweep", "rate(5 minutes)")]);
        // ... the stack's name of the rule, and of the target function.
        let mut inputs = stack_inputs(&[]);
        inputs.names.insert(
            "aws_cloudwatch_event_rule.sweep".parse().unwrap(),
            "local-sweep".into(),
        );
        inputs.names.insert(
            "aws_lambda_function.scheduler".parse().unwrap(),
            "other-sched".into(),
        );
        let d = deployment(&module, &inputs).unwrap();
        assert_eq!(
            (
                d.schedules[0].name.as_str(),
                d.schedules[0].function.as_str()
            ),
            ("local-sweep", "other-sched")
        );
        // Without a retry policy: EventBridge's defaults.
        let d = deploy(
            &mutate(
                &module_files(),
                "maximum_event_age_in_seconds = 60\n    maximum_retry_attempts       = 0",
                "",
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                d.schedules[0].max_event_age_secs,
                d.schedules[0].max_retry_attempts
            ),
            (86_400, 185)
        );
        // A disabled rule sends nothing; a rule without target neither.
        let d = deploy(
            &mutate(
                &module_files(),
                "schedule_expression = var.sweep_schedule_expression",
                "schedule_expression = var.sweep_schedule_expression\n  state = \"DISABLED\"",
            ),
            &[],
        )
        .unwrap();
        assert!(d.schedules.is_empty());
        let d = deploy(
            &mutate(
                &module_files(),
                "rule = aws_cloudwatch_event_rule.sweep.name",
                "rule = aws_cloudwatch_event_rule.sweep.name\n  count = 0",
            ),
            &[],
        )
        .unwrap();
        assert!(d.schedules.is_empty());
        assert!(d.summary().iter().all(|l| !l.contains("sweep")));
        let d = deploy(&module_files(), &[]).unwrap();
        assert!(
            d.summary().contains(
                &"aws_cloudwatch_event_rule.sweep (lambdafusion-sweep) -> sched-local: \
                  rate(1 minute); aws_cloudwatch_event_target.sweep: 0 retries within 60 s"
                    .to_string()
            ),
            "{:?}",
            d.summary()
        );
    }

    #[test]
    fn schedules_that_cannot_be_played_locally_fail_naming_the_resource() {
        let err = |from: &str, to: &str| {
            deploy(&mutate(&module_files(), from, to), &[])
                .unwrap_err()
                .to_string()
        };
        let e = err(
            "arn  = aws_lambda_function.scheduler.arn",
            "arn  = \"arn:aws:sqs:us-east-1:000000000000:poison\"",
        );
        assert!(
            e.contains("aws_cloudwatch_event_target.sweep: arn")
                && e.contains("only Lambda targets"),
            "{e}"
        );
        let e = err(
            "arn  = aws_lambda_function.scheduler.arn",
            "arn  = aws_lambda_function.scheduler.arn\n  input = jsonencode({ sweep = true })",
        );
        assert!(
            e.contains("aws_cloudwatch_event_target.sweep: `input` is not emulated"),
            "{e}"
        );
        let e = err(
            "schedule_expression = var.sweep_schedule_expression",
            "event_pattern = jsonencode({ source = [\"aws.s3\"] })",
        );
        assert!(
            e.contains("aws_cloudwatch_event_rule.sweep: `event_pattern`"),
            "{e}"
        );
        let e = err(
            "schedule_expression = var.sweep_schedule_expression",
            "schedule_expression = var.sweep_schedule_expression\n  event_bus_name = \"custom\"",
        );
        assert!(e.contains("only the default event bus"), "{e}");
        let e = err(
            "arn  = aws_lambda_function.scheduler.arn",
            "arn  = aws_lambda_function.scheduler.arn\n  http_target {\n    path_parameter_values = []\n  }",
        );
        assert!(
            e.contains("aws_cloudwatch_event_target.sweep: `http_target` is a setting the local stack does not know"),
            "{e}"
        );
        let e = err(
            "rule = aws_cloudwatch_event_rule.sweep.name",
            "rule = \"elsewhere\"",
        );
        assert!(
            e.contains("rule \"elsewhere\" is not a scheduled rule of the module"),
            "{e}"
        );
        // Two targets on the sweep.
        let files = mutate(
            &module_files(),
            "resource \"aws_lambda_permission\" \"sweep\" {",
            "resource \"aws_cloudwatch_event_target\" \"again\" {\n  rule = aws_cloudwatch_event_rule.sweep.name\n  arn  = aws_lambda_function.executor.arn\n}\n\nresource \"aws_lambda_permission\" \"sweep\" {",
        );
        let e = deploy(&files, &[]).unwrap_err().to_string();
        assert!(e.contains("one target per rule"), "{e}");
    }

    #[test]
    fn real_module_follows_its_variables() {
        let d = deploy(
            &module_files(),
            &[
                ("fast_path", "false"),
                ("data_buckets", r#"["lake", "raw"]"#),
                ("catalog_writers", "[]"),
                ("executor_timeout_seconds", "100"),
                ("scheduler_timeout_seconds", "5"),
                ("executor_reserved_concurrency", "3"),
                ("stream_batch_size", "7"),
                ("enable_function_url", "true"),
                ("prefix", "pfx"),
            ],
        )
        .unwrap();
        let e = function(&d, "exec-local");
        assert_eq!(e.env["LAMBDAFUSION_FAST_PATH"], "false");
        assert_eq!(e.env["LAMBDAFUSION_DATA_BUCKETS"], "s3://lake,s3://raw");
        assert_eq!(
            e.env["LAMBDAFUSION_CATALOG_WRITERS"], "",
            "an empty list is not null"
        );
        assert_eq!(e.env["LAMBDAFUSION_TASK_TIMEOUT_SECS"], "1960");
        assert_eq!(e.env["LAMBDAFUSION_SWEEP_BUDGET_SECS"], "2");
        assert_eq!(e.env["LAMBDAFUSION_PREFIX"], "pfx");
        assert_eq!((e.timeout_secs, e.reserved_concurrency), (100, Some(3)));
        assert!(!e.env.contains_key("LAMBDAFUSION_ADMIN_PRINCIPALS"));
        assert_eq!(d.stream_mappings[0].batch_size, 7);
        assert_eq!(
            function(&d, "sched-local").http,
            Some(HttpEntry::FunctionUrl {
                address: "aws_lambda_function_url.scheduler".parse().unwrap(),
                auth: "AWS_IAM".into(),
            })
        );
        let d = deploy(&module_files(), &[("enable_http_api", "false")]).unwrap();
        assert_eq!(function(&d, "sched-local").http, None);
        // Functions named by their configuration when the stack does not name them.
        let module = Module::parse(&module_files()).unwrap();
        let mut inputs = stack_inputs(&[("name_prefix", "dev")]);
        inputs.names.retain(|a, _| a.kind != "aws_lambda_function");
        let d = deployment(&module, &inputs).unwrap();
        assert_eq!(
            function(&d, "dev-scheduler").env["LAMBDAFUSION_EXECUTOR_FUNCTION"],
            "dev-executor"
        );
    }

    #[test]
    fn a_large_executor_is_played_as_the_executor_with_more_memory() {
        let d = deploy(&module_files(), &[]).unwrap();
        assert_eq!(d.functions.len(), 2, "none by default");
        assert!(!function(&d, "sched-local")
            .env
            .contains_key("LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION"));
        let d = deploy(&module_files(), &[("large_executor_memory_mb", "10240")]).unwrap();
        assert_eq!(d.functions.len(), 3);
        // Named after the executor, as the stack names it.
        let large = function(&d, "exec-local-large");
        let executor = function(&d, "exec-local");
        assert_eq!(large.memory_mb, 10240);
        assert_eq!(large.env, executor.env);
        assert_eq!(large.role, executor.role, "the executor's role");
        assert_eq!(large.invoke.max_retry_attempts, 0);
        assert_eq!(large.invoke.on_failure.as_deref(), Some("sched-local"));
        for f in [&d.functions[0], &d.functions[1], &d.functions[2]] {
            assert_eq!(
                f.env["LAMBDAFUSION_LARGE_EXECUTOR_FUNCTION"],
                "exec-local-large"
            );
            assert_eq!(f.env["LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB"], "10240");
        }
        // Both roles that dispatch tasks may invoke it, and it may write its own logs.
        let role = executor.role.as_ref().unwrap();
        let scheduler = function(&d, "sched-local").role.as_ref().unwrap();
        let statement = |role: &RoleConfig, sid: &str| {
            role.statements
                .iter()
                .find(|s| s.sid.as_deref() == Some(sid))
                .unwrap()
                .resources
                .clone()
        };
        let arn = "arn:aws:lambda:us-east-1:000000000000:function:exec-local";
        for r in [role, scheduler] {
            assert_eq!(
                statement(r, "DispatchTasks"),
                [arn.to_string(), format!("{arn}-large")]
            );
        }
        assert!(statement(role, "WriteOwnLogs")
            .iter()
            .any(|l| l.ends_with("/aws/lambda/exec-local-large:*")));
    }

    #[test]
    fn a_variable_removed_from_the_module_is_gone_locally() {
        let files = mutate(
            &module_files(),
            "LAMBDAFUSION_MAX_PRESIGN_SECS  = tostring(var.max_presign_seconds)\n",
            "",
        );
        let d = deploy(&files, &[]).unwrap();
        for f in &d.functions {
            assert!(
                !f.env.contains_key("LAMBDAFUSION_MAX_PRESIGN_SECS"),
                "{}",
                f.name
            );
            assert!(f.env.contains_key("LAMBDAFUSION_MAX_QUERY_SECONDS"));
        }
        // And one added to the executor only reaches the executor.
        let files = mutate(
            &module_files(),
            "LAMBDAFUSION_MAX_SPILL_BYTES    = tostring(local.max_spill_bytes.executor)\n    })",
            "LAMBDAFUSION_MAX_SPILL_BYTES    = tostring(local.max_spill_bytes.executor)\n      LAMBDAFUSION_ONLY_HERE = \"1\"\n    })",
        );
        let d = deploy(&files, &[]).unwrap();
        assert_eq!(
            function(&d, "exec-local").env["LAMBDAFUSION_ONLY_HERE"],
            "1"
        );
        assert!(!function(&d, "sched-local")
            .env
            .contains_key("LAMBDAFUSION_ONLY_HERE"));
    }

    #[test]
    fn what_cannot_be_played_locally_fails_naming_resource_and_attribute() {
        let err = |files: Vec<(String, String)>| deploy(&files, &[]).unwrap_err().to_string();
        let e = err(mutate(
            &module_files(),
            "LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name",
            "LAMBDAFUSION_EXECUTOR_FUNCTION  = local.executor_function_name\n      QUEUE = aws_sqs_queue.poison.url",
        ));
        assert!(
            e.contains("aws_lambda_function.scheduler: environment.variables")
                && e.contains("aws_sqs_queue.poison.url"),
            "{e}"
        );
        let e = err(mutate(
            &module_files(),
            "  batch_size                         = var.stream_batch_size",
            "  batch_size                         = var.stream_batch_size\n  tumbling_window_in_seconds = 30",
        ));
        assert!(
            e.contains("aws_lambda_event_source_mapping.stream: `tumbling_window_in_seconds`"),
            "{e}"
        );
        let e = err(mutate(
            &module_files(),
            "function_response_types        = [\"ReportBatchItemFailures\"]",
            "function_response_types        = []",
        ));
        assert!(e.contains("lacks ReportBatchItemFailures"), "{e}");
        let e = err(mutate(
            &module_files(),
            "destination = aws_lambda_function.scheduler.arn",
            "destination = aws_sqs_queue.poison.arn",
        ));
        assert!(
            e.contains("aws_lambda_function_event_invoke_config.executor: destination_config.on_failure.destination"),
            "{e}"
        );
        let e = err(mutate(
            &module_files(),
            "memory_size                    = var.executor_memory_mb",
            "memory_size                    = max(var.executor_memory_mb, nonsense(1))",
        ));
        assert!(
            e.contains("aws_lambda_function.executor: memory_size") && e.contains("nonsense"),
            "{e}"
        );
        // The bucket AWS would name: the stack must name it.
        let module = Module::parse(&module_files()).unwrap();
        let mut inputs = stack_inputs(&[]);
        inputs.names.retain(|a, _| a.kind != "aws_s3_bucket");
        let e = deployment(&module, &inputs).unwrap_err().to_string();
        assert!(e.contains("--name aws_s3_bucket.shuffle=NAME"), "{e}");
        let mut inputs = stack_inputs(&[]);
        inputs
            .names
            .insert("aws_sqs_queue.poison".parse().unwrap(), "q".into());
        let e = deployment(&module, &inputs).unwrap_err().to_string();
        assert!(e.contains("names only"), "{e}");
    }

    // ---- the emulator's config ----------------------------------------------------------

    /// A local part as local/localstack/setup.py writes it.
    fn local_part() -> Json {
        json!({
            "region": "us-east-1", "account": "000000000000", "timing": "fast",
            "invoke_listen": "127.0.0.1:0", "state_dir": "/tmp/unused",
            "functions": [
                {"name": "sched-local", "command": ["scheduler-fn"], "instances": 2,
                 "env": {"AWS_REGION": "us-east-1", "RUST_LOG": "info"},
                 "url": {"listen": "127.0.0.1:0"}},
                {"name": "exec-local", "command": ["executor-fn"], "instances": 4,
                 "env": {"AWS_REGION": "us-east-1", "RUST_LOG": "info"}}
            ],
            "stream_mappings": [
                {"table": "jobs-local", "function": "sched-local",
                 "dynamodb_endpoint": "http://127.0.0.1:1", "poll_interval_ms": 250}
            ]
        })
    }

    fn functions_of(config: &Json) -> BTreeMap<String, Json> {
        config["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["name"].as_str().unwrap().to_string(), f.clone()))
            .collect()
    }

    #[test]
    fn config_is_terraform_plus_local_and_valid() {
        let d = deploy(&module_files(), &[]).unwrap();
        let overrides = env(&[
            ("LAMBDAFUSION_TASK_TIMEOUT_SECS", "30"),
            ("LAMBDAFUSION_TEST_CRASH_FILE", "/tmp/crash"),
            ("LAMBDAFUSION_SCHEDULER_FUNCTION", "sched-local"),
        ]);
        let config = emulator_config(&d, &local_part(), &overrides).unwrap();
        crate::Config::from_json(&config.to_string(), Path::new("/")).unwrap();
        let fs = functions_of(&config);
        let (s, e) = (&fs["sched-local"], &fs["exec-local"]);
        // Set by Terraform on both: replaced on both. Set on neither: added to both.
        for f in [s, e] {
            assert_eq!(f["env"]["LAMBDAFUSION_TASK_TIMEOUT_SECS"], "30");
            assert_eq!(f["env"]["LAMBDAFUSION_TEST_CRASH_FILE"], "/tmp/crash");
            assert_eq!(f["env"]["RUST_LOG"], "info");
        }
        for f in [s, e] {
            assert_eq!(f["env"]["LAMBDAFUSION_SCHEDULER_FUNCTION"], "sched-local");
            assert_eq!(f["env"]["LAMBDAFUSION_EXECUTOR_FUNCTION"], "exec-local");
        }
        assert_eq!(
            (
                &e["memory_mb"],
                &e["timeout_secs"],
                &e["ephemeral_storage_mb"]
            ),
            (&json!(3008), &json!(900), &json!(2048))
        );
        assert_eq!(e["on_failure"], "sched-local");
        assert_eq!(e["max_retry_attempts"], 0);
        assert_eq!(s["max_event_age_secs"], 900);
        assert_eq!(
            s["url"],
            json!({"listen": "127.0.0.1:0", "auth": "NONE", "integration_timeout_secs": 30})
        );
        assert_eq!(e["instances"], 4);
        let m = &config["stream_mappings"][0];
        assert_eq!(m["dynamodb_endpoint"], "http://127.0.0.1:1");
        assert_eq!(m["parallelization_factor"], 2);
        assert_eq!(
            m["filters"][1]["Pattern"],
            r#"{"dynamodb":{"NewImage":{"sk":{"S":[{"prefix":"TASK#"}]},"state":{"S":["FAILED"]}}}}"#
        );
        assert_eq!(config["timing"], "fast", "local settings pass through");

        // Reserved concurrency caps instances; a function URL brings its auth.
        let d = deploy(
            &module_files(),
            &[
                ("executor_reserved_concurrency", "3"),
                ("enable_function_url", "true"),
            ],
        )
        .unwrap();
        let config = emulator_config(&d, &local_part(), &BTreeMap::new()).unwrap();
        let fs = functions_of(&config);
        assert_eq!(fs["exec-local"]["instances"], 3);
        assert_eq!(
            fs["sched-local"]["url"],
            json!({"listen": "127.0.0.1:0", "auth": "AWS_IAM"})
        );
        crate::Config::from_json(&config.to_string(), Path::new("/")).unwrap();
    }

    #[test]
    fn config_schedules_are_terraforms_with_a_local_period() {
        let d = deploy(&module_files(), &[]).unwrap();
        let none = BTreeMap::new();
        // Without a local entry: the module's schedule and period.
        let config = emulator_config(&d, &local_part(), &none).unwrap();
        assert_eq!(
            config["schedules"],
            json!([{"name": "lambdafusion-sweep", "function": "sched-local",
                    "expression": "rate(1 minute)", "every_secs": null,
                    "max_event_age_secs": 60, "max_retry_attempts": 0}])
        );
        let c = crate::Config::from_json(&config.to_string(), Path::new("/")).unwrap();
        assert_eq!(
            crate::schedule::period(&c.schedules[0]).unwrap(),
            std::time::Duration::from_secs(60)
        );
        // A local entry (by function, as setup.py writes it, or by name) sets the period.
        for entry in [
            json!({"function": "sched-local", "every_secs": 2}),
            json!({"name": "lambdafusion-sweep", "every_secs": 2}),
        ] {
            let mut local = local_part();
            local["schedules"] = json!([entry]);
            let config = emulator_config(&d, &local, &none).unwrap();
            assert_eq!(config["schedules"][0]["every_secs"], 2);
            assert_eq!(config["schedules"][0]["expression"], "rate(1 minute)");
            let c = crate::Config::from_json(&config.to_string(), Path::new("/")).unwrap();
            assert_eq!(
                crate::schedule::period(&c.schedules[0]).unwrap(),
                std::time::Duration::from_secs(2)
            );
        }
        let with = |entry: Json| {
            let mut local = local_part();
            local["schedules"] = json!([entry]);
            emulator_config(&d, &local, &none).unwrap_err().to_string()
        };
        let e = with(json!({"function": "sched-local", "expression": "rate(2 minutes)"}));
        assert!(
            e.contains("`expression` comes from the Terraform module"),
            "{e}"
        );
        let e = with(json!({"function": "sched-local", "max_retry_attempts": 2}));
        assert!(e.contains("retry_policy.maximum_retry_attempts"), "{e}");
        let e = with(json!({"function": "exec-local", "every_secs": 2}));
        assert!(e.contains("names 0"), "{e}");
        let e = with(json!({"every_secs": 2}));
        assert!(e.contains("names no schedule"), "{e}");
        let e = with(json!({"function": "sched-local", "colour": 1}));
        assert!(e.contains("unknown field `colour`"), "{e}");

        // A cron expression needs the local period.
        let d = deploy(
            &module_files(),
            &[("sweep_schedule_expression", "cron(0/5 * * * ? *)")],
        )
        .unwrap();
        let config = emulator_config(&d, &local_part(), &none).unwrap();
        let e = crate::Config::from_json(&config.to_string(), Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("schedule \"lambdafusion-sweep\"")
                && e.contains("cron(...) schedules are not emulated"),
            "{e}"
        );
        let mut local = local_part();
        local["schedules"] = json!([{"function": "sched-local", "every_secs": 3}]);
        let config = emulator_config(&d, &local, &none).unwrap();
        crate::Config::from_json(&config.to_string(), Path::new("/")).unwrap();
    }

    #[test]
    fn config_refuses_local_copies_of_terraform_settings() {
        let d = deploy(&module_files(), &[]).unwrap();
        let none = BTreeMap::new();
        let with = |f: &dyn Fn(&mut Json)| {
            let mut local = local_part();
            f(&mut local);
            emulator_config(&d, &local, &none).unwrap_err().to_string()
        };
        let e = with(&|l| l["functions"][1]["memory_mb"] = json!(128));
        assert!(
            e.contains("`memory_mb` comes from the Terraform module"),
            "{e}"
        );
        let e = with(&|l| l["functions"][0]["url"]["auth"] = json!("NONE"));
        assert!(
            e.contains("url.auth comes from the Terraform module"),
            "{e}"
        );
        let e = with(&|l| l["stream_mappings"][0]["filters"] = json!([]));
        assert!(
            e.contains("`filters` comes from the Terraform module"),
            "{e}"
        );
        let e = with(&|l| l["functions"][0]["env"]["LAMBDAFUSION_TABLE"] = json!("x"));
        assert!(e.contains("set by the Terraform module"), "{e}");
        let e = with(&|l| l["functions"][1]["name"] = json!("other"));
        assert!(
            e.contains("\"other\" is not deployed by the Terraform module"),
            "{e}"
        );
        let e = with(&|l| {
            l["functions"].as_array_mut().unwrap().pop();
        });
        assert!(e.contains("aws_lambda_function.executor"), "{e}");
        let e = with(&|l| l["functions"][1]["url"] = json!({"listen": "127.0.0.1:0"}));
        assert!(
            e.contains("neither through a function URL nor an HTTP API"),
            "{e}"
        );
        let e = with(&|l| l["stream_mappings"][0]["table"] = json!("other"));
        assert!(e.contains("aws_lambda_event_source_mapping.stream"), "{e}");

        let d = deploy(&module_files(), &[("executor_reserved_concurrency", "0")]).unwrap();
        let e = emulator_config(&d, &local_part(), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("reserved_concurrent_executions = 0"), "{e}");
    }
}
