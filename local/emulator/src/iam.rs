//! IAM as the local stack plays it. Each function runs with credentials of its own, those
//! of the execution role the Terraform module gives it, and the front (DynamoDB, DynamoDB
//! Streams, S3), the Invoke API and the stream trigger check every request signed with
//! them against that role's policy statements, refusing what the role may not do with
//! the `AccessDenied` answers AWS gives.
//!
//! What is evaluated: the role's identity-based statements (the module's
//! `aws_iam_role_policy` documents, read by `terraform.rs`), `Allow` and `Deny`, their
//! `actions` (case-insensitive) and `resources` (case-sensitive), both with the `*` and
//! `?` wildcards; an explicit deny wins, and what no statement allows is denied. Not
//! played: conditions, `NotAction` / `NotResource` (the Terraform reader refuses a module
//! that uses them), resource policies, permission boundaries, SCPs and session policies.
//! Requests signed with any other access key (the tests', the CLI's, `setup.py`'s `test`)
//! are the deployer's and are not checked; signatures are not verified here (moto does
//! not either), only the access key they name is read.
//!
//! Which action and resource a request needs follows AWS's Service Authorization
//! Reference (<https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html>,
//! `list_amazons3.html`, `list_awslambda.html`): one action per DynamoDB operation on the
//! table's ARN (a batch on each table it names, a transaction's parts as their own
//! operations: `Put` as `PutItem`, `ConditionCheck` as `ConditionCheckItem`), the
//! stream's ARN for the stream operations, `s3:ListBucket` on the bucket for listings,
//! `s3:GetObject` / `s3:PutObject` / `s3:DeleteObject` / `s3:AbortMultipartUpload` on
//! `bucket/key` for object requests (a multipart upload's parts are `PutObject`, a
//! multi-object delete needs `DeleteObject` on every key), `lambda:InvokeFunction` on
//! the function's ARN (with its qualifier when one is given). Stream ARNs are compared
//! with their label replaced by the Terraform reader's ([`crate::terraform::STREAM_LABEL`]),
//! since the policy names the stream before moto gives it a label; a multi-object delete
//! with one key denied is refused whole (S3 would delete the others and list the denied
//! key in its answer).

use axum::http::{HeaderMap, Method};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

use crate::config::Config;

/// The execution role of a function, as the Terraform module grants it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// The role's ARN, `arn:aws:iam::<account>:role/<name>`.
    pub arn: String,
    /// Every statement of the role's policies.
    pub statements: Vec<Statement>,
}

/// One statement of an identity-based policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// The statement's `Sid`, shown in messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    /// `Allow` (default) or `Deny`.
    #[serde(default)]
    pub effect: Effect,
    /// Actions, e.g. `s3:GetObject`, `dynamodb:*`.
    pub actions: Vec<String>,
    /// Resource ARNs, with wildcards.
    pub resources: Vec<String>,
}

/// A statement's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Effect {
    /// Grants the actions on the resources.
    #[default]
    Allow,
    /// Refuses them, whatever else allows them.
    Deny,
}

/// The temporary credentials Lambda hands a function (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleCredentials {
    /// `ASIA…`, unique to the function.
    pub access_key: String,
    /// Any secret: signatures are not verified.
    pub secret_key: String,
    /// The session token.
    pub session_token: String,
}

impl RoleConfig {
    /// The role's name (the ARN's last part).
    pub fn name(&self) -> &str {
        self.arn.rsplit('/').next().unwrap_or(&self.arn)
    }

    /// The credentials `function` runs with under this role: stable, and different for
    /// every function and role.
    pub fn credentials(&self, function: &str) -> RoleCredentials {
        let id = crate::injection::fnv1a(format!("{}\n{function}", self.arn).as_bytes());
        RoleCredentials {
            access_key: format!("ASIA{id:016X}"),
            secret_key: format!("local-secret-{id:016x}"),
            session_token: format!("local-session-{id:016x}"),
        }
    }
}

/// What a request needs: one action on one resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// e.g. `dynamodb:GetItem`.
    pub action: String,
    /// e.g. `arn:aws:dynamodb:us-east-1:000000000000:table/jobs`.
    pub resource: String,
}

impl Access {
    fn new(action: impl Into<String>, resource: impl Into<String>) -> Access {
        Access {
            action: action.into(),
            resource: resource.into(),
        }
    }
}

/// A refused request: who, what, on what, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The caller: `arn:aws:sts::<account>:assumed-role/<role>/<function>`.
    pub principal: String,
    /// The first access no statement allows (or one denies).
    pub access: Access,
    /// Whether a `Deny` statement refused it.
    pub explicit: bool,
}

impl Denied {
    /// AWS's message: "User: … is not authorized to perform: … on resource: … because …".
    pub fn message(&self) -> String {
        let why = if self.explicit {
            "with an explicit deny in an identity-based policy".to_string()
        } else {
            format!(
                "because no identity-based policy allows the {} action",
                self.access.action
            )
        };
        format!(
            "User: {} is not authorized to perform: {} on resource: {} {why}",
            self.principal, self.access.action, self.access.resource
        )
    }
}

#[derive(Debug)]
struct Principal {
    arn: String,
    statements: Vec<Statement>,
}

/// The functions' credentials and what each may do.
#[derive(Debug)]
pub struct Iam {
    enforce: bool,
    region: String,
    account: String,
    principals: HashMap<String, Principal>,
}

impl Iam {
    /// The roles of `config`'s functions; checks nothing unless `config.iam` enforces.
    pub fn new(config: &Config) -> Iam {
        let mut principals = HashMap::new();
        for f in &config.functions {
            if let Some(role) = &f.role {
                principals.insert(
                    role.credentials(&f.name).access_key,
                    Principal {
                        arn: format!(
                            "arn:aws:sts::{}:assumed-role/{}/{}",
                            config.account,
                            role.name(),
                            f.name
                        ),
                        statements: role.statements.clone(),
                    },
                );
            }
        }
        Iam {
            enforce: config.iam == IamMode::Enforce,
            region: config.region.clone(),
            account: config.account.clone(),
            principals,
        }
    }

    /// Whether a function's request needs `needed` and may have it. `access_key` is the
    /// one the request was signed with; keys of no function role pass.
    pub fn check(&self, access_key: Option<&str>, needed: &[Access]) -> Result<(), Denied> {
        if !self.enforce {
            return Ok(());
        }
        let Some(principal) = access_key.and_then(|k| self.principals.get(k)) else {
            return Ok(());
        };
        for access in needed {
            let matching = |effect: Effect| {
                principal.statements.iter().any(|s| {
                    s.effect == effect
                        && s.actions.iter().any(|a| glob(a, &access.action, true))
                        && s.resources.iter().any(|r| glob(r, &access.resource, false))
                })
            };
            let explicit = matching(Effect::Deny);
            if explicit || !matching(Effect::Allow) {
                return Err(Denied {
                    principal: principal.arn.clone(),
                    access: access.clone(),
                    explicit,
                });
            }
        }
        Ok(())
    }

    fn table_arn(&self, table: &str) -> String {
        if table.starts_with("arn:") {
            table.to_string()
        } else {
            format!(
                "arn:aws:dynamodb:{}:{}:table/{table}",
                self.region, self.account
            )
        }
    }

    /// A stream ARN in the account and region of the stack, with the Terraform reader's
    /// label.
    fn stream_arn(&self, arn: &str) -> String {
        match arn
            .split_once(":table/")
            .and_then(|(_, t)| t.split_once("/stream/"))
        {
            Some((table, _label)) => format!(
                "{}/stream/{}",
                self.table_arn(table),
                crate::terraform::STREAM_LABEL
            ),
            None => arn.to_string(),
        }
    }

    /// What a DynamoDB (`op` of `DynamoDB_20120810`) request needs.
    pub fn dynamodb(&self, op: &str, request: &Value) -> Vec<Access> {
        let action = |op: &str| format!("dynamodb:{op}");
        let table = |v: &Value| {
            v.get("TableName")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let mut needed = BTreeSet::new();
        match op {
            "BatchGetItem" | "BatchWriteItem" => {
                if let Some(items) = request.get("RequestItems").and_then(Value::as_object) {
                    for t in items.keys() {
                        needed.insert(Access::new(action(op), self.table_arn(t)));
                    }
                }
            }
            "TransactWriteItems" | "TransactGetItems" => {
                for item in request
                    .get("TransactItems")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    for (part, part_action) in [
                        ("Put", "PutItem"),
                        ("Update", "UpdateItem"),
                        ("Delete", "DeleteItem"),
                        ("ConditionCheck", "ConditionCheckItem"),
                        ("Get", "GetItem"),
                    ] {
                        if let Some(t) = item.get(part).and_then(table) {
                            needed.insert(Access::new(action(part_action), self.table_arn(&t)));
                        }
                    }
                }
            }
            _ => {
                let resource = match (table(request), request.get("IndexName")) {
                    (Some(t), Some(Value::String(index))) => {
                        format!("{}/index/{index}", self.table_arn(&t))
                    }
                    (Some(t), _) => self.table_arn(&t),
                    (None, _) => "*".to_string(),
                };
                needed.insert(Access::new(action(op), resource));
            }
        }
        needed.into_iter().collect()
    }

    /// What a Glue (`op` of `AWSGlue`) request needs: the action on the catalog, the
    /// database and the table it names (Glue checks all three; a listing of a database's
    /// tables checks them all, `table/<database>/*`).
    pub fn glue(&self, op: &str, request: &Value) -> Vec<Access> {
        let action = format!("glue:{op}");
        let base = format!("arn:aws:glue:{}:{}", self.region, self.account);
        let field = |k: &str| request.get(k).and_then(Value::as_str);
        let mut needed = vec![Access::new(action.clone(), format!("{base}:catalog"))];
        if let Some(database) = field("DatabaseName") {
            needed.push(Access::new(
                action.clone(),
                format!("{base}:database/{database}"),
            ));
            let table = field("TableName").or(field("Name"));
            let table = match (op, table) {
                ("GetTables", _) => Some("*"),
                (_, t) => t,
            };
            if let Some(table) = table {
                needed.push(Access::new(
                    action,
                    format!("{base}:table/{database}/{table}"),
                ));
            }
        }
        needed
    }

    /// What a DynamoDB Streams (`op` of `DynamoDBStreams_20120810`) request needs.
    pub fn dynamodb_streams(&self, op: &str, request: &Value) -> Vec<Access> {
        let stream = request
            .get("StreamArn")
            .and_then(Value::as_str)
            .or_else(|| {
                // An iterator is `<stream ARN>|<n>|<token>`, in DynamoDB as in moto.
                request
                    .get("ShardIterator")
                    .and_then(Value::as_str)
                    .and_then(|i| i.split('|').next())
            })
            .map(|arn| self.stream_arn(arn))
            .unwrap_or_else(|| "*".to_string());
        vec![Access::new(format!("dynamodb:{op}"), stream)]
    }

    /// What an S3 request needs (path-style: `/<bucket>/<key>`). `deleted` are the keys
    /// of a multi-object delete (`POST /<bucket>?delete`).
    pub fn s3(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        deleted: &[String],
    ) -> Vec<Access> {
        let params: BTreeSet<String> = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split('=').next().unwrap_or_default().to_string())
            .collect();
        let has = |p: &str| params.contains(p);
        let path = path.strip_prefix('/').unwrap_or(path);
        let (bucket, key) = match path.split_once('/') {
            Some((b, k)) => (b, crate::sigv4::path_decode(k)),
            None => (path, String::new()),
        };
        if bucket.is_empty() {
            return vec![Access::new("s3:ListAllMyBuckets", "*")];
        }
        let bucket_arn = format!("arn:aws:s3:::{bucket}");
        if key.is_empty() {
            let action = match *method {
                Method::POST if has("delete") => {
                    return deleted
                        .iter()
                        .map(|k| Access::new("s3:DeleteObject", format!("{bucket_arn}/{k}")))
                        .collect()
                }
                Method::GET if has("uploads") => "s3:ListBucketMultipartUploads",
                Method::GET if has("location") => "s3:GetBucketLocation",
                Method::GET if has("versions") => "s3:ListBucketVersions",
                Method::GET if has("lifecycle") => "s3:GetLifecycleConfiguration",
                Method::PUT if has("lifecycle") => "s3:PutLifecycleConfiguration",
                Method::GET if has("policy") => "s3:GetBucketPolicy",
                Method::PUT if has("policy") => "s3:PutBucketPolicy",
                Method::PUT if params.is_empty() => "s3:CreateBucket",
                Method::DELETE if params.is_empty() => "s3:DeleteBucket",
                Method::GET | Method::HEAD => "s3:ListBucket",
                // Any other bucket configuration: the functions never need one.
                _ => "s3:PutBucketConfiguration",
            };
            return vec![Access::new(action, bucket_arn)];
        }
        let object = format!("{bucket_arn}/{key}");
        let mut needed = vec![];
        let action = match *method {
            Method::GET | Method::HEAD if has("uploadId") => "s3:ListMultipartUploadParts",
            Method::GET | Method::HEAD if has("tagging") => "s3:GetObjectTagging",
            Method::GET | Method::HEAD => "s3:GetObject",
            Method::PUT if has("tagging") => "s3:PutObjectTagging",
            Method::DELETE if has("uploadId") => "s3:AbortMultipartUpload",
            Method::DELETE => "s3:DeleteObject",
            Method::POST if has("select") => "s3:GetObject",
            // Uploads: whole, a part, or starting / completing a multipart upload.
            _ => "s3:PutObject",
        };
        needed.push(Access::new(action, object));
        if *method == Method::PUT {
            if let Some(source) = headers
                .get("x-amz-copy-source")
                .and_then(|v| v.to_str().ok())
            {
                let source = crate::sigv4::path_decode(source.split('?').next().unwrap_or(source));
                let source = source.strip_prefix('/').unwrap_or(&source);
                needed.push(Access::new(
                    "s3:GetObject",
                    format!("arn:aws:s3:::{source}"),
                ));
            }
        }
        needed
    }

    /// What invoking `arn` (a function's ARN, qualified if the call was) needs.
    pub fn lambda_invoke(arn: &str) -> Vec<Access> {
        vec![Access::new("lambda:InvokeFunction", arn)]
    }
}

/// Whether IAM is enforced locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IamMode {
    /// Functions may do only what their roles allow (default).
    #[default]
    Enforce,
    /// Every request passes, as without IAM.
    Off,
}

/// IAM's wildcard match: `*` any run of characters (`/` included), `?` any one.
fn glob(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = if ignore_case {
        (
            pattern.to_lowercase().chars().collect(),
            text.to_lowercase().chars().collect(),
        )
    } else {
        (pattern.chars().collect(), text.chars().collect())
    };
    // Iterative matcher with one backtrack point for the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Keys of a multi-object delete's XML body (`<Delete><Object><Key>…</Key>…`), with
/// XML's five entities decoded.
pub fn delete_keys(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let mut keys = Vec::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("<Key>") {
        rest = &rest[start + 5..];
        let Some(end) = rest.find("</Key>") else {
            break;
        };
        keys.push(
            rest[..end]
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&"),
        );
        rest = &rest[end + 6..];
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn iam(statements: Vec<Statement>) -> (Iam, String) {
        let mut config: Config = serde_json::from_value(json!({
            "functions": [{"name": "exec", "command": ["true"]}],
        }))
        .unwrap();
        let role = RoleConfig {
            arn: "arn:aws:iam::000000000000:role/lf-executor".into(),
            statements,
        };
        let key = role.credentials("exec").access_key;
        config.functions[0].role = Some(role);
        (Iam::new(&config), key)
    }

    fn allow(actions: &[&str], resources: &[&str]) -> Statement {
        Statement {
            sid: None,
            effect: Effect::Allow,
            actions: actions.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn wildcards() {
        assert!(glob("s3:Get*", "s3:GetObject", true));
        assert!(glob("S3:getobject", "s3:GetObject", true));
        assert!(!glob("s3:GetObject", "s3:GetObjectTagging", true));
        assert!(glob("arn:aws:s3:::b/p/*", "arn:aws:s3:::b/p/a/b/c", false));
        assert!(!glob("arn:aws:s3:::b/p/*", "arn:aws:s3:::b/q/a", false));
        assert!(!glob("arn:aws:s3:::b/p/*", "arn:aws:s3:::b/p", false));
        assert!(glob("arn:aws:s3:::b?", "arn:aws:s3:::bx", false));
        assert!(!glob("arn:aws:s3:::B", "arn:aws:s3:::b", false));
        assert!(glob("*", "anything", false));
        assert!(glob("a*b*c", "aXXbYYbc", false));
    }

    #[test]
    fn allows_denies_and_names_the_refusal() {
        let (iam, key) = iam(vec![
            allow(
                &["s3:GetObject", "s3:PutObject"],
                &["arn:aws:s3:::shuffle/lf/*"],
            ),
            Statement {
                effect: Effect::Deny,
                ..allow(&["s3:PutObject"], &["arn:aws:s3:::shuffle/lf/secret/*"])
            },
        ]);
        let get = |k: &str| {
            vec![Access::new(
                "s3:GetObject",
                format!("arn:aws:s3:::shuffle/{k}"),
            )]
        };
        assert!(iam.check(Some(&key), &get("lf/a")).is_ok());
        let denied = iam.check(Some(&key), &get("other/a")).unwrap_err();
        assert_eq!(
            denied.message(),
            "User: arn:aws:sts::000000000000:assumed-role/lf-executor/exec is not authorized to perform: s3:GetObject on resource: arn:aws:s3:::shuffle/other/a because no identity-based policy allows the s3:GetObject action"
        );
        let put = vec![Access::new(
            "s3:PutObject",
            "arn:aws:s3:::shuffle/lf/secret/x",
        )];
        let denied = iam.check(Some(&key), &put).unwrap_err();
        assert!(denied.explicit);
        assert!(denied
            .message()
            .ends_with("with an explicit deny in an identity-based policy"));
        // The deployer's key and unsigned requests are not checked.
        assert!(iam.check(Some("test"), &get("other/a")).is_ok());
        assert!(iam.check(None, &get("other/a")).is_ok());
    }

    #[test]
    fn off_checks_nothing() {
        let (mut iam, key) = iam(vec![]);
        iam.enforce = false;
        assert!(iam
            .check(Some(&key), &[Access::new("s3:GetObject", "*")])
            .is_ok());
    }

    #[test]
    fn credentials_differ_per_function() {
        let role = RoleConfig {
            arn: "arn:aws:iam::1:role/r".into(),
            statements: vec![],
        };
        assert_ne!(
            role.credentials("a").access_key,
            role.credentials("b").access_key
        );
        assert!(role.credentials("a").access_key.starts_with("ASIA"));
        assert_eq!(role.name(), "r");
    }

    #[test]
    fn glue_calls_need_the_catalog_the_database_and_the_table() {
        let base = "arn:aws:glue:us-east-1:000000000000";
        let grant = allow(
            &["glue:GetTable", "glue:GetTables", "glue:GetPartitions"],
            &[
                &format!("{base}:catalog"),
                &format!("{base}:database/sales"),
                &format!("{base}:table/sales/*"),
            ],
        );
        let (iam, key) = iam(vec![grant]);
        let needs = |op: &str, request: Value| iam.glue(op, &request);
        let got = needs(
            "GetTable",
            json!({"DatabaseName": "sales", "Name": "orders"}),
        );
        let resources: Vec<&str> = got.iter().map(|a| a.resource.as_str()).collect();
        assert_eq!(
            resources,
            [
                format!("{base}:catalog"),
                format!("{base}:database/sales"),
                format!("{base}:table/sales/orders"),
            ]
        );
        assert!(iam.check(Some(&key), &got).is_ok());
        let partitions = needs(
            "GetPartitions",
            json!({"DatabaseName": "sales", "TableName": "orders"}),
        );
        assert!(iam.check(Some(&key), &partitions).is_ok());
        let listing = needs("GetTables", json!({"DatabaseName": "sales"}));
        assert_eq!(listing[2].resource, format!("{base}:table/sales/*"));
        assert!(iam.check(Some(&key), &listing).is_ok());
        // Another database, or an action not granted: denied.
        let other = needs("GetTable", json!({"DatabaseName": "hr", "Name": "pay"}));
        assert!(iam.check(Some(&key), &other).is_err());
        let write = needs(
            "DeleteTable",
            json!({"DatabaseName": "sales", "Name": "orders"}),
        );
        assert!(iam.check(Some(&key), &write).is_err());
    }

    #[test]
    fn dynamodb_actions() {
        let (iam, _) = iam(vec![]);
        let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/jobs";
        let got = iam.dynamodb("GetItem", &json!({"TableName": "jobs"}));
        assert_eq!(got, vec![Access::new("dynamodb:GetItem", arn)]);
        let got = iam.dynamodb(
            "Query",
            &json!({"TableName": "jobs", "IndexName": "by_caller"}),
        );
        assert_eq!(got[0].resource, format!("{arn}/index/by_caller"));
        let got = iam.dynamodb(
            "TransactWriteItems",
            &json!({"TransactItems": [
                {"Put": {"TableName": "jobs"}},
                {"ConditionCheck": {"TableName": "jobs"}},
                {"Update": {"TableName": "jobs"}},
                {"Delete": {"TableName": "other"}},
            ]}),
        );
        let actions: Vec<&str> = got.iter().map(|a| a.action.as_str()).collect();
        assert_eq!(
            actions,
            [
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem"
            ]
        );
        let got = iam.dynamodb("BatchGetItem", &json!({"RequestItems": {"a": {}, "b": {}}}));
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1].resource,
            "arn:aws:dynamodb:us-east-1:000000000000:table/b"
        );
        let got = iam.dynamodb_streams(
            "GetRecords",
            &json!({"ShardIterator": "arn:aws:dynamodb:us-east-1:123456789012:table/jobs/stream/2026-01-01T00:00:00.000|1|AAAA"}),
        );
        assert_eq!(got[0].resource, format!("{arn}/stream/local"));
        assert_eq!(
            iam.dynamodb_streams("ListStreams", &json!({}))[0],
            Access::new("dynamodb:ListStreams", "*")
        );
    }

    #[test]
    fn s3_actions() {
        let (iam, _) = iam(vec![]);
        let h = HeaderMap::new();
        let one = |m: Method, path: &str, q: Option<&str>| {
            let got = iam.s3(&m, path, q, &h, &[]);
            assert_eq!(got.len(), 1, "{got:?}");
            (got[0].action.clone(), got[0].resource.clone())
        };
        assert_eq!(
            one(Method::GET, "/b/a%20b/c", None),
            ("s3:GetObject".into(), "arn:aws:s3:::b/a b/c".into())
        );
        assert_eq!(one(Method::HEAD, "/b/k", None).0, "s3:GetObject");
        assert_eq!(
            one(Method::GET, "/b", Some("list-type=2&prefix=x")),
            ("s3:ListBucket".into(), "arn:aws:s3:::b".into())
        );
        assert_eq!(one(Method::HEAD, "/b", None).0, "s3:ListBucket");
        assert_eq!(one(Method::PUT, "/b/k", None).0, "s3:PutObject");
        assert_eq!(
            one(Method::PUT, "/b/k", Some("partNumber=1&uploadId=u")).0,
            "s3:PutObject"
        );
        assert_eq!(one(Method::POST, "/b/k", Some("uploads")).0, "s3:PutObject");
        assert_eq!(
            one(Method::POST, "/b/k", Some("uploadId=u")).0,
            "s3:PutObject"
        );
        assert_eq!(
            one(Method::DELETE, "/b/k", Some("uploadId=u")).0,
            "s3:AbortMultipartUpload"
        );
        assert_eq!(one(Method::DELETE, "/b/k", None).0, "s3:DeleteObject");
        assert_eq!(one(Method::PUT, "/b", None).0, "s3:CreateBucket");
        assert_eq!(one(Method::GET, "/", None).0, "s3:ListAllMyBuckets");
        let deleted = iam.s3(
            &Method::POST,
            "/b",
            Some("delete"),
            &h,
            &["x/1".into(), "x/2".into()],
        );
        assert_eq!(
            deleted,
            vec![
                Access::new("s3:DeleteObject", "arn:aws:s3:::b/x/1"),
                Access::new("s3:DeleteObject", "arn:aws:s3:::b/x/2"),
            ]
        );
        let mut copy = HeaderMap::new();
        copy.insert("x-amz-copy-source", "/src/a%2Fb".parse().unwrap());
        let got = iam.s3(&Method::PUT, "/b/k", None, &copy, &[]);
        assert_eq!(got[1], Access::new("s3:GetObject", "arn:aws:s3:::src/a/b"));
    }

    #[test]
    fn multi_object_delete_keys() {
        let body = b"<Delete><Object><Key>a/1</Key></Object><Object><Key>b&amp;c</Key></Object><Quiet>true</Quiet></Delete>";
        assert_eq!(
            delete_keys(body),
            vec!["a/1".to_string(), "b&c".to_string()]
        );
        assert!(delete_keys(b"<Delete></Delete>").is_empty());
    }
}
