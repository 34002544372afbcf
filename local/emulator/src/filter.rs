//! Lambda event filtering (the subset the stream trigger needs).
//!
//! A mapping has a list of patterns; a record passes if it matches any of them (an
//! empty list passes everything). A pattern is a JSON object mirroring the record:
//! an object value descends into the record's object; an array value lists matchers
//! for that field, any of which may match:
//!
//! | matcher | matches when the field… |
//! |---|---|
//! | `"text"`, `5`, `true`, `null` | equals it (strings as strings: DynamoDB's `{"N": "0"}` matches `"0"`, not `0`) |
//! | `{"prefix": "p"}` / `{"suffix": "s"}` | is a string with that prefix / suffix |
//! | `{"equals-ignore-case": "t"}` | is a string equal to it ignoring ASCII case |
//! | `{"exists": true}` / `{"exists": false}` | is present / absent |
//! | `{"anything-but": [...]}` (or one value, or `{"prefix": ..}`) | is present and none of them |
//! | `{"numeric": [">", 0, "<=", 5]}` | is a JSON number meeting every condition |
//!
//! When the record's field is an array, a matcher matches if any element does. As in
//! AWS, `numeric` never matches strings, so it does not apply to DynamoDB `N` values.

use serde_json::Value;

/// Parses the configured filters: pattern objects, or `{"Pattern": "<json>"}` as the
/// AWS API writes them. Returns the pattern objects, or what is wrong.
pub fn parse_filters(filters: &[Value]) -> Result<Vec<Value>, String> {
    filters
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let pattern = match f.get("Pattern") {
                Some(Value::String(text)) => serde_json::from_str(text)
                    .map_err(|e| format!("filter {i}: `Pattern` is not JSON: {e}"))?,
                _ => f.clone(),
            };
            check_pattern(&pattern).map_err(|e| format!("filter {i}: {e}"))?;
            Ok(pattern)
        })
        .collect()
}

fn check_pattern(pattern: &Value) -> Result<(), String> {
    let Value::Object(map) = pattern else {
        return Err("a pattern must be a JSON object".into());
    };
    for (key, sub) in map {
        match sub {
            Value::Object(_) => check_pattern(sub).map_err(|e| format!("{key}.{e}"))?,
            Value::Array(matchers) => {
                for m in matchers {
                    check_matcher(m).map_err(|e| format!("{key}: {e}"))?;
                }
            }
            _ => return Err(format!("{key}: expected an object or an array of matchers")),
        }
    }
    Ok(())
}

fn check_matcher(m: &Value) -> Result<(), String> {
    let Value::Object(op) = m else { return Ok(()) };
    if op.len() != 1 {
        return Err(format!("matcher {m} must have exactly one operator"));
    }
    match op.iter().next() {
        Some((k, Value::String(_)))
            if ["prefix", "suffix", "equals-ignore-case"].contains(&k.as_str()) =>
        {
            Ok(())
        }
        Some((k, Value::Bool(_))) if k == "exists" => Ok(()),
        Some((k, _)) if k == "anything-but" => Ok(()),
        Some((k, Value::Array(conds))) if k == "numeric" => {
            if conds.len() % 2 != 0 || conds.is_empty() {
                return Err("numeric takes operator/value pairs".into());
            }
            for pair in conds.chunks(2) {
                let ok_op = pair[0]
                    .as_str()
                    .is_some_and(|o| ["=", "<", "<=", ">", ">="].contains(&o));
                if !ok_op || !pair[1].is_number() {
                    return Err(format!("bad numeric condition {pair:?}"));
                }
            }
            Ok(())
        }
        _ => Err(format!("unsupported matcher {m}")),
    }
}

/// Whether `event` matches any of `patterns` (always, if there are none).
pub fn matches_any(patterns: &[Value], event: &Value) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| matches(p, event))
}

/// Whether `event` matches one pattern object.
pub fn matches(pattern: &Value, event: &Value) -> bool {
    matches_value(pattern, Some(event))
}

fn matches_value(pattern: &Value, event: Option<&Value>) -> bool {
    let Value::Object(pattern) = pattern else {
        return false;
    };
    pattern.iter().all(|(key, sub)| {
        let field = event.and_then(|e| e.get(key));
        match sub {
            Value::Object(_) => match field {
                Some(Value::Array(items)) => {
                    items.iter().any(|item| matches_value(sub, Some(item)))
                }
                other => matches_value(sub, other),
            },
            Value::Array(matchers) => matchers.iter().any(|m| matcher(m, field)),
            _ => false,
        }
    })
}

/// Applies `test` to a value, or to any element of an array value.
fn any_scalar(field: &Value, test: impl Fn(&Value) -> bool) -> bool {
    match field {
        Value::Array(items) => items.iter().any(test),
        other => test(other),
    }
}

fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn matcher(m: &Value, field: Option<&Value>) -> bool {
    let Value::Object(op) = m else {
        return field.is_some_and(|f| any_scalar(f, |v| scalar_eq(m, v)));
    };
    let Some((name, arg)) = op.iter().next() else {
        return false;
    };
    if name == "exists" {
        return arg.as_bool() == Some(field.is_some());
    }
    let Some(field) = field else { return false };
    match name.as_str() {
        "prefix" => string_test(field, arg, |s, p| s.starts_with(p)),
        "suffix" => string_test(field, arg, |s, p| s.ends_with(p)),
        "equals-ignore-case" => string_test(field, arg, |s, p| s.eq_ignore_ascii_case(p)),
        "anything-but" => any_scalar(field, |v| !anything_but_hit(arg, v)),
        "numeric" => any_scalar(field, |v| numeric(arg, v)),
        _ => false,
    }
}

fn string_test(field: &Value, arg: &Value, test: impl Fn(&str, &str) -> bool) -> bool {
    let Some(arg) = arg.as_str() else {
        return false;
    };
    any_scalar(field, |v| v.as_str().is_some_and(|s| test(s, arg)))
}

/// Whether `v` is one of what `anything-but` excludes.
fn anything_but_hit(arg: &Value, v: &Value) -> bool {
    match arg {
        Value::Array(list) => list.iter().any(|x| scalar_eq(x, v)),
        Value::Object(op) => match op.get("prefix").and_then(Value::as_str) {
            Some(p) => v.as_str().is_some_and(|s| s.starts_with(p)),
            None => false,
        },
        scalar => scalar_eq(scalar, v),
    }
}

fn numeric(arg: &Value, v: &Value) -> bool {
    let (Value::Array(conds), Some(x)) = (arg, v.as_f64().filter(|_| v.is_number())) else {
        return false;
    };
    conds.chunks(2).all(|pair| {
        let (Some(op), Some(bound)) = (pair[0].as_str(), pair.get(1).and_then(Value::as_f64))
        else {
            return false;
        };
        match op {
            "=" => x == bound,
            "<" => x < bound,
            "<=" => x <= bound,
            ">" => x > bound,
            ">=" => x >= bound,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(sk: &str, remaining: &str, state: Option<&str>) -> Value {
        let mut image = json!({"pk": {"S": "Q#1"}, "sk": {"S": sk}, "remaining": {"N": remaining}});
        if let Some(s) = state {
            image["state"] = json!({"S": s});
        }
        json!({"eventName": "MODIFY", "dynamodb": {"NewImage": image, "SizeBytes": 10}})
    }

    fn project_filters() -> Vec<Value> {
        parse_filters(&[
            json!({"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "STAGE#"}]}, "remaining": {"N": ["0"]}}}}),
            json!({"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "TASK#"}]}, "state": {"S": ["FAILED"]}}}}),
        ])
        .unwrap()
    }

    #[test]
    fn project_patterns_are_ored() {
        let f = project_filters();
        assert!(matches_any(&f, &record("STAGE#1", "0", None)));
        assert!(!matches_any(&f, &record("STAGE#1", "3", None)));
        assert!(!matches_any(&f, &record("QUERY", "0", None)));
        assert!(matches_any(&f, &record("TASK#1#0", "5", Some("FAILED"))));
        assert!(!matches_any(&f, &record("TASK#1#0", "5", Some("DONE"))));
        assert!(!matches_any(&f, &record("TASK#1#0", "5", None)));
        assert!(matches_any(&[], &record("anything", "1", None)));
    }

    #[test]
    fn strings_and_numbers_do_not_mix() {
        let ev = json!({"n": {"N": "0"}, "x": 0});
        assert!(matches(&json!({"n": {"N": ["0"]}}), &ev));
        assert!(!matches(&json!({"n": {"N": [0]}}), &ev));
        assert!(matches(&json!({"x": [0]}), &ev));
        assert!(matches(&json!({"x": [0.0]}), &ev));
        assert!(!matches(&json!({"x": ["0"]}), &ev));
        assert!(!matches(&json!({"n": {"N": [{"numeric": ["=", 0]}]}}), &ev));
    }

    #[test]
    fn operators() {
        let ev = json!({"name": "STAGE#7", "count": 5, "tags": ["a", "b"], "null": null, "obj": {"k": "v"}});
        let m = |p: Value| matches(&p, &ev);
        assert!(m(json!({"name": [{"prefix": "STAGE#"}]})));
        assert!(m(json!({"name": [{"suffix": "#7"}]})));
        assert!(m(json!({"name": [{"equals-ignore-case": "stage#7"}]})));
        assert!(!m(json!({"name": [{"prefix": "TASK#"}]})));
        assert!(m(json!({"name": [{"exists": true}]})));
        assert!(m(json!({"missing": [{"exists": false}]})));
        assert!(!m(json!({"name": [{"exists": false}]})));
        assert!(m(json!({"absent": {"deeper": [{"exists": false}]}})));
        assert!(m(json!({"obj": {"k": [{"exists": true}]}})));
        assert!(m(json!({"name": [{"anything-but": ["X", "Y"]}]})));
        assert!(!m(json!({"name": [{"anything-but": ["STAGE#7"]}]})));
        assert!(!m(json!({"name": [{"anything-but": {"prefix": "STAGE"}}]})));
        assert!(m(json!({"name": [{"anything-but": "other"}]})));
        assert!(!m(json!({"missing": [{"anything-but": ["x"]}]})));
        assert!(m(json!({"count": [{"numeric": [">", 0, "<=", 5]}]})));
        assert!(!m(json!({"count": [{"numeric": [">", 5]}]})));
        assert!(m(json!({"tags": ["b"]})));
        assert!(!m(json!({"tags": ["c"]})));
        assert!(m(json!({"null": [null]})));
        assert!(!m(json!({"missing": [null]})));
        assert!(m(json!({"name": ["nope", "STAGE#7"]})));
        assert!(m(json!({"name": ["STAGE#7"], "count": [5]})));
        assert!(!m(json!({"name": ["STAGE#7"], "count": [6]})));
    }

    #[test]
    fn aws_api_form_and_validation() {
        let f = parse_filters(&[json!({"Pattern": "{\"eventName\": [\"INSERT\"]}"})]).unwrap();
        assert!(matches_any(&f, &json!({"eventName": "INSERT"})));
        assert!(!matches_any(&f, &json!({"eventName": "REMOVE"})));
        assert!(parse_filters(&[json!({"a": "not an array"})]).is_err());
        assert!(parse_filters(&[json!({"a": [{"regex": "x"}]})]).is_err());
        assert!(parse_filters(&[json!({"a": [{"numeric": [">"]}]})]).is_err());
        assert!(parse_filters(&[json!([1])]).is_err());
    }
}
