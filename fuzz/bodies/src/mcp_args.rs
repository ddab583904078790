//! Target `mcp_args`: the MCP bridge's argument hygiene for its built-ins (§M4),
//! `appduct_mcp::args::validate` against each built-in's advertised input schema, and the
//! error result it becomes (§M6).
//!
//! Input: byte 0 picks the built-in (`(byte - '0') mod 9`, so seeds start with a digit in
//! `tools/list` order), the rest is the `arguments` JSON (an object, or `null` for absent;
//! anything else is skipped: MCP carries arguments as an object). Invariants:
//! - accepted arguments hold exactly the schema properties sent with a non-null value, every
//!   one of the declared type, length, range and enum, every required one present; no unknown
//!   key is ever accepted; validating the accepted arguments again gives them back;
//! - a refusal is an `invalid_request` naming `arguments` (unknown keys, listed) or one schema
//!   property in `details.param`, with a bounded text, and its tool result has `isError`,
//!   `_meta["appduct/error"]` and no `structuredContent`.

use appduct_mcp::ToolFailure;
use appduct_mcp::args::{Args, validate};
use appduct_mcp::catalog::{Builtin, builtins};
use appduct_mcp::error::ERROR_META_KEY;
use appduct_protocol::errors::ErrorType;
use serde_json::{Map, Value};

/// The text of a refusal may list every unknown key and is otherwise fixed wording.
const TEXT_GROWTH: usize = 3;
const TEXT_SLACK: usize = 4096;

pub fn run(data: &[u8]) {
    let [selector, json @ ..] = data else {
        return;
    };
    let all = builtins();
    let builtin = &all[usize::from(selector.wrapping_sub(b'0')) % all.len()];
    let arguments = match serde_json::from_slice::<Value>(json) {
        Ok(Value::Object(map)) => Some(map),
        Ok(Value::Null) => None,
        _ => return,
    };
    match validate(&builtin.input_schema, arguments.as_ref()) {
        Ok(args) => check_accepted(builtin, arguments.as_ref(), &args),
        Err(failure) => check_refused(builtin, arguments.as_ref(), &failure, json.len()),
    }
}

fn properties(builtin: &Builtin) -> &Map<String, Value> {
    builtin.input_schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{} has no properties", builtin.name))
}

fn check_accepted(builtin: &Builtin, arguments: Option<&Map<String, Value>>, args: &Args) {
    let name = builtin.name;
    let props = properties(builtin);
    let empty = Map::new();
    let sent = arguments.unwrap_or(&empty);
    for key in sent.keys() {
        assert!(
            props.contains_key(key),
            "{name} accepted the unknown key {key:?}"
        );
    }
    if let Some(required) = builtin.input_schema["required"].as_array() {
        for key in required.iter().filter_map(Value::as_str) {
            assert!(
                args.has(key),
                "{name} accepted without the required {key:?}"
            );
        }
    }

    let mut again = Map::new();
    for (key, prop) in props {
        let present = sent.get(key).is_some_and(|v| !v.is_null());
        assert_eq!(
            args.has(key),
            present,
            "{name}.{key}: presence differs from the input"
        );
        if !present {
            continue;
        }
        let value = check_value(name, key, prop, args);
        again.insert(key.clone(), value);
    }
    let revalidated = validate(&builtin.input_schema, Some(&again))
        .unwrap_or_else(|f| panic!("{name}: accepted arguments are refused again: {}", f.text()));
    assert_eq!(&revalidated, args, "{name}: validation is not idempotent");
}

/// The accepted value of `key` meets its property schema; returns it as JSON.
fn check_value(name: &str, key: &str, prop: &Value, args: &Args) -> Value {
    let min = prop["minimum"].as_i64();
    let max = prop["maximum"].as_i64();
    match prop["type"].as_str() {
        Some("string") => {
            let s = args
                .str(key)
                .unwrap_or_else(|| panic!("{name}.{key} accepted as a non-string"));
            let len = s.chars().count() as u64;
            assert!(
                prop["minLength"].as_u64().is_none_or(|m| len >= m),
                "{name}.{key} too short"
            );
            assert!(
                prop["maxLength"].as_u64().is_none_or(|m| len <= m),
                "{name}.{key} too long"
            );
            if let Some(allowed) = prop["enum"].as_array() {
                assert!(
                    allowed.iter().any(|a| a.as_str() == Some(s)),
                    "{name}.{key} = {s:?}"
                );
            }
            Value::from(s)
        }
        Some("integer") => {
            // Every integer of the catalog has a minimum of at least 0.
            let n = args
                .u64(key)
                .unwrap_or_else(|| panic!("{name}.{key} accepted as a non-integer"));
            let n = i64::try_from(n).unwrap_or_else(|_| panic!("{name}.{key} = {n}"));
            assert!(
                min.is_none_or(|lo| n >= lo),
                "{name}.{key} = {n} below {min:?}"
            );
            assert!(
                max.is_none_or(|hi| n <= hi),
                "{name}.{key} = {n} above {max:?}"
            );
            Value::from(n)
        }
        Some("boolean") => Value::from(
            args.bool(key)
                .unwrap_or_else(|| panic!("{name}.{key} accepted as a non-boolean")),
        ),
        Some("object") => Value::Object(
            args.object(key)
                .unwrap_or_else(|| panic!("{name}.{key} accepted as a non-object"))
                .clone(),
        ),
        other => panic!("{name}.{key} has the unexpected type {other:?}"),
    }
}

fn check_refused(
    builtin: &Builtin,
    arguments: Option<&Map<String, Value>>,
    failure: &ToolFailure,
    input_len: usize,
) {
    let name = builtin.name;
    assert_eq!(
        failure.error_type,
        ErrorType::InvalidRequest,
        "{name}: {}",
        failure.text()
    );
    let details = failure
        .details
        .as_deref()
        .unwrap_or_else(|| panic!("{name}: a refusal without details"));
    let param = details["param"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: a refusal without details.param: {details}"));
    let props = properties(builtin);
    if param == "arguments" {
        let unknown = details["unknownKeys"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: unknownKeys missing: {details}"));
        assert!(!unknown.is_empty());
        let sent = arguments.unwrap_or_else(|| panic!("{name}: unknown keys in no arguments"));
        for key in unknown {
            let key = key.as_str().unwrap_or_default();
            assert!(
                sent.contains_key(key) && !props.contains_key(key),
                "{name}: {key:?}"
            );
        }
    } else {
        assert!(props.contains_key(param), "{name}: details.param {param:?}");
    }

    let text = failure.text();
    assert!(text.starts_with("[invalid_request] "), "{text:?}");
    assert!(
        text.len() <= TEXT_GROWTH * input_len + TEXT_SLACK,
        "{} bytes",
        text.len()
    );

    let result = serde_json::to_value(failure.clone().into_result())
        .unwrap_or_else(|e| panic!("serialising the tool result: {e}"));
    assert_eq!(result["isError"], Value::Bool(true), "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert_eq!(
        result["_meta"][ERROR_META_KEY]["type"], "invalid_request",
        "{result}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(name: &str) -> &'static Builtin {
        appduct_mcp::catalog::builtin(name).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn valid_and_invalid_arguments_pass_every_check() {
        run(br#"4{"name":"cart_total","args":{},"timeoutMs":1500.0}"#);
        run(br#"4{"name":"cart_total","timeout_ms":5}"#);
        run(b"8null");
    }

    #[test]
    #[should_panic(expected = "details.param")]
    fn a_refusal_naming_a_foreign_parameter_is_caught() {
        let failure =
            ToolFailure::invalid_request("bad").with_details(serde_json::json!({"param": "nope"}));
        check_refused(builtin("appduct_call_tool"), None, &failure, 0);
    }

    #[test]
    #[should_panic(expected = "presence differs")]
    fn accepted_arguments_that_lost_a_key_are_caught() {
        let schema = &builtin("appduct_list_tools").input_schema;
        let sent = serde_json::json!({"limit": 5, "offset": 1});
        let fewer = validate(schema, serde_json::json!({"limit": 5}).as_object())
            .unwrap_or_else(|f| panic!("{}", f.text()));
        check_accepted(builtin("appduct_list_tools"), sent.as_object(), &fewer);
    }
}
