//! Tool declarations for registries (§D18, an extension beyond appduct v2): `riskLevel`,
//! `requiredPermissions` and `testCases` on a tool descriptor, their shape checks, and the
//! result-shape check a test case's `expect.schema` runs (a small, closed subset of JSON Schema).
//!
//! A v2 SDK never sends these fields; a descriptor without them is as valid as before. When
//! present, each must have the shape below or the descriptor is invalid (§D8.1), like any other
//! descriptor field. Whether a registry *requires* them is the daemon's `registry.require`
//! setting (docs/state.md §S2.2).

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::descriptor::{DescriptorError, json_kind};
use crate::text::utf16_len_within;

/// Most entries of `requiredPermissions`.
pub const MAX_PERMISSIONS: usize = 32;
/// Longest permission string and test-case `name`, in UTF-16 code units.
pub const MAX_DECLARATION_TEXT_LEN: usize = 128;
/// Most entries of `testCases` (at least one when the field is present).
pub const MAX_TEST_CASES: usize = 16;
/// Largest `testCases` array as compact JSON text (bytes of UTF-8), all cases together.
pub const MAX_TEST_CASES_BYTES: usize = 16_384;
/// Longest `expect.error` (an error type such as `tool_execution_error`), in bytes.
pub const MAX_ERROR_TYPE_LEN: usize = 64;

/// The three declaration fields, by their wire names, in the order `registry.require` lists them.
pub const DECLARATION_FIELDS: [&str; 3] = ["riskLevel", "requiredPermissions", "testCases"];

/// A tool's declared (or derived) risk (§D18.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RiskLevel {
    Low,
    Medium,
    High,
}

impl RiskLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }
}

impl fmt::Display for RiskLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `riskLevel` as received.
pub(crate) fn risk_level(v: &Value) -> Result<RiskLevel, DescriptorError> {
    v.as_str()
        .and_then(RiskLevel::parse)
        .ok_or(DescriptorError::RiskLevel)
}

/// `requiredPermissions` as received: at most 32 strings of 1 to 128 units; repeats are kept
/// once, in first-seen order.
pub(crate) fn required_permissions(v: &Value) -> Result<Vec<String>, DescriptorError> {
    let Value::Array(items) = v else {
        return Err(DescriptorError::WrongType {
            field: "requiredPermissions",
            expected: "an array",
            found: json_kind(v),
        });
    };
    if items.len() > MAX_PERMISSIONS {
        return Err(DescriptorError::Permissions);
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) if utf16_len_within(s, 1, MAX_DECLARATION_TEXT_LEN) => {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
            _ => return Err(DescriptorError::Permissions),
        }
    }
    Ok(out)
}

/// One declared test case (§D18.3).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TestCase {
    /// Shown in reports; `None`: the report names the case by its index.
    pub name: Option<String>,
    /// The `args` of the `tools.call` the case makes.
    pub arguments: Map<String, Value>,
    pub expect: Expect,
}

/// What a test case expects of its call.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// The call succeeds; with `Some(shape)`, its JSON `result` also matches the shape.
    Success(Option<Value>),
    /// The call fails with this error `type` (§C7).
    Error(String),
}

/// A tool's validated `testCases`: 1 to 16 cases, known keys only, kept as compact JSON text
/// (descriptors are held by the thousand; clones share the text).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TestCases(Arc<str>);

impl fmt::Debug for TestCases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TestCases {
    /// The compact JSON text of the array.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn to_value(&self) -> Value {
        // Written from a validated array, so it always parses back.
        serde_json::from_str(&self.0).unwrap_or(Value::Array(Vec::new()))
    }

    /// The cases, in declared order.
    pub fn cases(&self) -> Vec<TestCase> {
        let Value::Array(items) = self.to_value() else {
            return Vec::new();
        };
        items
            .into_iter()
            .filter_map(|item| {
                let Value::Object(mut m) = item else {
                    return None;
                };
                let name = match m.remove("name") {
                    Some(Value::String(s)) => Some(s),
                    _ => None,
                };
                let arguments = match m.remove("arguments") {
                    Some(Value::Object(a)) => a,
                    _ => Map::new(),
                };
                let mut expect = match m.remove("expect") {
                    Some(Value::Object(e)) => e,
                    _ => Map::new(),
                };
                let expect = match expect.remove("error") {
                    Some(Value::String(e)) => Expect::Error(e),
                    _ => Expect::Success(expect.remove("schema")),
                };
                Some(TestCase {
                    name,
                    arguments,
                    expect,
                })
            })
            .collect()
    }

    /// Validates `testCases` as received (§D18.3).
    pub fn from_value(v: &Value) -> Result<Self, DescriptorError> {
        let Value::Array(items) = v else {
            return Err(DescriptorError::WrongType {
                field: "testCases",
                expected: "an array",
                found: json_kind(v),
            });
        };
        if items.is_empty() || items.len() > MAX_TEST_CASES {
            return Err(DescriptorError::TestCaseCount { count: items.len() });
        }
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            out.push(
                test_case(item).map_err(|problem| DescriptorError::TestCase { index, problem })?,
            );
        }
        let text = Value::Array(out).to_string();
        if text.len() > MAX_TEST_CASES_BYTES {
            return Err(DescriptorError::TestCasesTooBig { bytes: text.len() });
        }
        Ok(Self(text.into()))
    }
}

/// The keys a test case may hold (§D18.3).
const CASE_KEYS: &[&str] = &["name", "arguments", "expect"];
/// The keys a case's `expect` may hold (§D18.3).
const EXPECT_KEYS: &[&str] = &["schema", "error"];

/// One case, checked; unknown keys in it or in its `expect` are refused, so a typo
/// (`"shcema"`) never turns into "any success passes" and the stored case is the sent one.
/// `Err` is the problem, without peer text.
fn test_case(v: &Value) -> Result<Value, &'static str> {
    let Value::Object(m) = v else {
        return Err("must be an object");
    };
    if m.keys().any(|k| !CASE_KEYS.contains(&k.as_str())) {
        return Err("has a key other than `name`, `arguments` and `expect`");
    }
    let mut out = Map::new();
    match m.get("name") {
        None => {}
        Some(Value::String(s)) if utf16_len_within(s, 1, MAX_DECLARATION_TEXT_LEN) => {
            out.insert("name".into(), Value::String(s.clone()));
        }
        Some(_) => return Err("`name` must be a string of 1 to 128 UTF-16 code units"),
    }
    match m.get("arguments") {
        Some(a @ Value::Object(_)) => {
            out.insert("arguments".into(), a.clone());
        }
        None => return Err("`arguments` is required"),
        Some(_) => return Err("`arguments` must be an object"),
    }
    let Some(Value::Object(expect)) = m.get("expect") else {
        return Err("`expect` is required and must be an object");
    };
    if expect.keys().any(|k| !EXPECT_KEYS.contains(&k.as_str())) {
        return Err("`expect` has a key other than `schema` and `error`");
    }
    let mut exp = Map::new();
    match (expect.get("schema"), expect.get("error")) {
        (Some(_), Some(_)) => return Err("`expect` may hold `schema` or `error`, not both"),
        (Some(shape), None) => {
            check_shape_schema(shape, 0)?;
            exp.insert("schema".into(), shape.clone());
        }
        (None, Some(Value::String(e))) if is_error_type(e) => {
            exp.insert("error".into(), Value::String(e.clone()));
        }
        (None, Some(_)) => {
            return Err("`expect.error` must be an error type (^[a-z_]{1,64}$)");
        }
        (None, None) => {}
    }
    out.insert("expect".into(), Value::Object(exp));
    Ok(Value::Object(out))
}

fn is_error_type(s: &str) -> bool {
    (1..=MAX_ERROR_TYPE_LEN).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// The JSON Schema keywords a result shape may use (§D18.4). Anything else would be silently
/// unchecked, so it makes the descriptor invalid instead.
pub const SHAPE_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minItems",
    "maxItems",
    // Annotations: accepted, never checked.
    "$schema",
    "title",
    "description",
];

const SHAPE_TYPES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "integer", "string",
];

/// Deepest nesting of subschemas in a shape.
const MAX_SHAPE_DEPTH: usize = 16;

fn check_shape_schema(v: &Value, depth: usize) -> Result<(), &'static str> {
    if depth > MAX_SHAPE_DEPTH {
        return Err("`expect.schema` nests more than 16 subschemas");
    }
    let Value::Object(m) = v else {
        return Err("`expect.schema` (and each subschema) must be an object");
    };
    for (key, value) in m {
        if !SHAPE_KEYWORDS.contains(&key.as_str()) {
            return Err("`expect.schema` uses a keyword the shape check does not support (§D18.4)");
        }
        let ok = match key.as_str() {
            "type" => match value {
                Value::String(t) => SHAPE_TYPES.contains(&t.as_str()),
                Value::Array(ts) => {
                    !ts.is_empty()
                        && ts
                            .iter()
                            .all(|t| t.as_str().is_some_and(|t| SHAPE_TYPES.contains(&t)))
                }
                _ => false,
            },
            "properties" => match value {
                Value::Object(props) => {
                    for sub in props.values() {
                        check_shape_schema(sub, depth + 1)?;
                    }
                    true
                }
                _ => false,
            },
            "items" => {
                check_shape_schema(value, depth + 1)?;
                true
            }
            "required" => value
                .as_array()
                .is_some_and(|r| r.iter().all(Value::is_string)),
            "additionalProperties" => value.is_boolean(),
            "enum" => value.is_array(),
            "minItems" | "maxItems" => value.as_u64().is_some(),
            _ => true,
        };
        if !ok {
            return Err("`expect.schema` has a keyword with a value of the wrong type (§D18.4)");
        }
    }
    Ok(())
}

/// Where and why a value does not match a shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeMismatch {
    /// A JSON Pointer into the checked value (`""` is the value itself).
    pub path: String,
    pub reason: String,
}

impl fmt::Display for ShapeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            self.path.as_str()
        };
        write!(f, "at {path}: {}", self.reason)
    }
}

/// Checks `value` against a result shape (§D18.4); the first mismatch found, depth first.
pub fn check_shape(shape: &Value, value: &Value) -> Result<(), ShapeMismatch> {
    check_at(shape, value, &mut String::new())
}

fn mismatch(path: &str, reason: String) -> Result<(), ShapeMismatch> {
    Err(ShapeMismatch {
        path: path.to_owned(),
        reason,
    })
}

fn type_matches(t: &str, value: &Value) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|f| f.fract() == 0.0) && value.is_number(),
        "string" => value.is_string(),
        _ => false,
    }
}

fn push_token(path: &mut String, token: &str) -> usize {
    let len = path.len();
    path.push('/');
    path.push_str(&token.replace('~', "~0").replace('/', "~1"));
    len
}

fn check_at(shape: &Value, value: &Value, path: &mut String) -> Result<(), ShapeMismatch> {
    let Value::Object(m) = shape else {
        return Ok(());
    };
    if let Some(t) = m.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !types.iter().any(|t| type_matches(t, value)) {
            return mismatch(
                path,
                format!(
                    "expected {}, found {}",
                    types.join(" or "),
                    json_kind(value)
                ),
            );
        }
    }
    if let Some(c) = m.get("const")
        && c != value
    {
        return mismatch(path, "does not equal the `const` value".into());
    }
    if let Some(Value::Array(options)) = m.get("enum")
        && !options.contains(value)
    {
        return mismatch(path, "is not one of the `enum` values".into());
    }
    if let Value::Object(obj) = value {
        if let Some(Value::Array(required)) = m.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(key) {
                    let at = push_token(path, key);
                    let out = mismatch(path, "is required but missing".into());
                    path.truncate(at);
                    return out;
                }
            }
        }
        let props = m.get("properties").and_then(Value::as_object);
        for (key, sub) in obj {
            let at = push_token(path, key);
            let out = match props.and_then(|p| p.get(key)) {
                Some(sub_shape) => check_at(sub_shape, sub, path),
                None if m.get("additionalProperties") == Some(&Value::Bool(false)) => mismatch(
                    path,
                    "is not allowed (`additionalProperties: false`)".into(),
                ),
                None => Ok(()),
            };
            path.truncate(at);
            out?;
        }
    }
    if let Value::Array(items) = value {
        if let Some(min) = m.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            return mismatch(
                path,
                format!("holds {} items, fewer than {min}", items.len()),
            );
        }
        if let Some(max) = m.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            return mismatch(
                path,
                format!("holds {} items, more than {max}", items.len()),
            );
        }
        if let Some(item_shape) = m.get("items") {
            for (i, item) in items.iter().enumerate() {
                let at = push_token(path, &i.to_string());
                let out = check_at(item_shape, item, path);
                path.truncate(at);
                out?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_cases_keep_their_keys_and_check_their_shape() {
        let tc = TestCases::from_value(&json!([
            {"name": "adds", "arguments": {"sku": "A"}, "expect": {"schema": {"type": "object"}}},
            {"arguments": {}, "expect": {"error": "tool_input_validation_error"}},
            {"arguments": {}, "expect": {}}
        ]))
        .unwrap();
        let cases = tc.cases();
        assert_eq!(cases.len(), 3);
        assert_eq!(cases[0].name.as_deref(), Some("adds"));
        assert_eq!(
            cases[0].expect,
            Expect::Success(Some(json!({"type": "object"})))
        );
        assert_eq!(
            cases[1].expect,
            Expect::Error("tool_input_validation_error".into())
        );
        assert_eq!(cases[2].expect, Expect::Success(None));
    }

    #[test]
    fn unknown_keys_in_a_case_or_its_expect_are_refused() {
        let bad = |v: Value| TestCases::from_value(&v).unwrap_err();
        let case_key = bad(json!([
            {"arguments": {}, "expect": {}},
            {"arguments": {}, "expect": {}, "note": "x"}
        ]));
        assert_eq!(
            case_key,
            DescriptorError::TestCase {
                index: 1,
                problem: "has a key other than `name`, `arguments` and `expect`"
            }
        );
        assert_eq!(case_key.field(), "testCases");
        // A typo in `expect` would otherwise leave `{}`: any success passes.
        assert_eq!(
            bad(json!([{"arguments": {}, "expect": {"shcema": {"type": "object"}}}])),
            DescriptorError::TestCase {
                index: 0,
                problem: "`expect` has a key other than `schema` and `error`"
            }
        );
        // What is accepted is kept as sent.
        let sent =
            json!([{"name": "n", "arguments": {"a": 1}, "expect": {"error": "policy_denied"}}]);
        let tc = TestCases::from_value(&sent).unwrap();
        assert_eq!(serde_json::from_str::<Value>(tc.as_str()).unwrap(), sent);
    }

    #[test]
    fn bad_test_cases_are_refused() {
        let bad = |v: Value| TestCases::from_value(&v).unwrap_err();
        assert_eq!(bad(json!([])), DescriptorError::TestCaseCount { count: 0 });
        let many: Vec<Value> = (0..17)
            .map(|_| json!({"arguments": {}, "expect": {}}))
            .collect();
        assert_eq!(
            bad(Value::Array(many)),
            DescriptorError::TestCaseCount { count: 17 }
        );
        for (case, index) in [
            (json!([{"expect": {}}]), 0),
            (
                json!([{"arguments": {}, "expect": {}}, {"arguments": [], "expect": {}}]),
                1,
            ),
            (json!([{"arguments": {}}]), 0),
            (
                json!([{"arguments": {}, "expect": {"error": "x", "schema": {}}}]),
                0,
            ),
            (
                json!([{"arguments": {}, "expect": {"error": "Not A Type"}}]),
                0,
            ),
            (
                json!([{"arguments": {}, "expect": {"schema": {"pattern": "a"}}}]),
                0,
            ),
            (
                json!([{"arguments": {}, "expect": {"schema": {"type": "strin"}}}]),
                0,
            ),
            (
                json!([{"arguments": {}, "expect": {"schema": {"properties": {"a": 1}}}}]),
                0,
            ),
            (json!([{"name": "", "arguments": {}, "expect": {}}]), 0),
        ] {
            assert!(
                matches!(bad(case.clone()), DescriptorError::TestCase { index: i, .. } if i == index),
                "{case}"
            );
        }
        let big = json!([{"arguments": {"s": "x".repeat(MAX_TEST_CASES_BYTES)}, "expect": {}}]);
        assert!(matches!(bad(big), DescriptorError::TestCasesTooBig { .. }));
        assert_eq!(bad(json!({})).field(), "testCases");
    }

    #[test]
    fn permissions_are_bounded_strings() {
        assert_eq!(
            required_permissions(&json!(["camera", "net", "camera"])).unwrap(),
            ["camera", "net"]
        );
        assert_eq!(
            required_permissions(&json!([])).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            required_permissions(&json!([""])),
            Err(DescriptorError::Permissions)
        );
        assert_eq!(
            required_permissions(&json!(["x".repeat(129)])),
            Err(DescriptorError::Permissions)
        );
        let many: Vec<String> = (0..33).map(|i| format!("p{i}")).collect();
        assert_eq!(
            required_permissions(&json!(many)),
            Err(DescriptorError::Permissions)
        );
        assert!(required_permissions(&json!("camera")).is_err());
    }

    #[test]
    fn shape_check_reports_the_path_of_the_first_mismatch() {
        let shape = json!({"type": "object", "required": ["items", "cents"],
            "properties": {"cents": {"type": "integer"},
                           "items": {"type": "array", "minItems": 1,
                                     "items": {"type": "object", "properties": {"sku": {"enum": ["A", "B"]}}}}},
            "additionalProperties": false});
        assert!(check_shape(&shape, &json!({"items": [{"sku": "A"}], "cents": 5})).is_ok());
        let err = |v: Value| check_shape(&shape, &v).unwrap_err();
        assert_eq!(err(json!([])).path, "");
        assert_eq!(err(json!({"items": [{"sku": "A"}]})).path, "/cents");
        let e = err(json!({"items": [{"sku": "A"}], "cents": 1.5}));
        assert_eq!(
            (e.path.as_str(), e.reason.as_str()),
            ("/cents", "expected integer, found a number")
        );
        assert_eq!(
            err(json!({"items": [{"sku": "A"}, {"sku": "C"}], "cents": 1})).path,
            "/items/1/sku"
        );
        assert_eq!(err(json!({"items": [], "cents": 1})).path, "/items");
        assert_eq!(
            err(json!({"items": [{}], "cents": 1, "a/b": 0})).path,
            "/a~1b"
        );
        assert_eq!(
            err(json!({"items": [{}], "cents": 1, "a/b": 0})).to_string(),
            "at /a~1b: is not allowed (`additionalProperties: false`)"
        );
        assert!(check_shape(&json!({"const": 3}), &json!(3)).is_ok());
        assert!(check_shape(&json!({"type": ["string", "null"]}), &Value::Null).is_ok());
    }

    #[test]
    fn risk_levels_are_a_closed_set() {
        assert_eq!(risk_level(&json!("high")), Ok(RiskLevel::High));
        assert_eq!(risk_level(&json!("High")), Err(DescriptorError::RiskLevel));
        assert_eq!(risk_level(&json!(2)), Err(DescriptorError::RiskLevel));
    }
}
