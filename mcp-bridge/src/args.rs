//! Argument hygiene for every built-in (§M4), driven by the advertised input schema, so
//! the validator and `tools/list` cannot drift apart.
//!
//! Order: unknown keys, then required keys, then types and ranges in schema order; the first
//! failure is reported as an `invalid_request` tool error naming the parameter. Each built-in
//! then reads its validated arguments as its own typed struct ([`Args::parse`]), so the refusals
//! stay these, worded once.

use appduct_protocol::control::is_valid_group;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::text::as_integer;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::error::ToolFailure;

/// Validated arguments: `null`s removed, integers normalised (`1500.0` → `1500`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args(Map<String, Value>);

impl Args {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    pub fn u64(&self, key: &str) -> Option<u64> {
        self.0.get(key).and_then(Value::as_u64)
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(Value::as_bool)
    }

    pub fn object(&self, key: &str) -> Option<&Map<String, Value>> {
        self.0.get(key).and_then(Value::as_object)
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The arguments as a built-in's typed struct. They passed the schema that struct mirrors,
    /// so a mismatch is a bug in the bridge, not the caller's.
    pub fn parse<T: DeserializeOwned>(self) -> Result<T, ToolFailure> {
        serde_json::from_value(Value::Object(self.0)).map_err(|e| {
            ToolFailure::new(
                ErrorType::InternalError,
                format!("validated arguments do not fit the built-in: {e}"),
            )
        })
    }
}

fn invalid(param: &str, message: String) -> ToolFailure {
    ToolFailure::new(ErrorType::InvalidRequest, message).with_details(json!({ "param": param }))
}

fn quoted(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("\"{k}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Validates `arguments` (absent = `{}`) against a built-in's input schema.
pub fn validate(
    schema: &Value,
    arguments: Option<&Map<String, Value>>,
) -> Result<Args, ToolFailure> {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let arguments = arguments.unwrap_or(&empty);

    let unknown: Vec<String> = arguments
        .keys()
        .filter(|k| !props.contains_key(*k))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        let accepted: Vec<String> = props.keys().cloned().collect();
        let noun = if unknown.len() == 1 {
            "argument"
        } else {
            "arguments"
        };
        let accepted_text = if accepted.is_empty() {
            "none".to_owned()
        } else {
            accepted.join(", ")
        };
        return Err(ToolFailure::new(
            ErrorType::InvalidRequest,
            format!(
                "unknown {noun} {}; accepted: {accepted_text}",
                quoted(&unknown)
            ),
        )
        .with_details(json!({
            "param": "arguments",
            "unknownKeys": unknown,
            "acceptedKeys": accepted,
        })));
    }

    // `null` means absent (§M4).
    let mut present: Map<String, Value> = arguments
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !present.contains_key(key) {
                return Err(invalid(key, format!("missing required argument \"{key}\"")));
            }
        }
    }

    for (key, prop) in props {
        if let Some(value) = present.get(key) {
            let checked = check(key, prop, value)?;
            present.insert(key.clone(), checked);
        }
    }
    Ok(Args(present))
}

fn check(key: &str, prop: &Value, value: &Value) -> Result<Value, ToolFailure> {
    let ty = prop.get("type").and_then(Value::as_str).unwrap_or_default();
    match ty {
        "string" => {
            let Some(s) = value.as_str() else {
                return Err(invalid(key, format!("\"{key}\" must be a string")));
            };
            let len = s.chars().count() as u64;
            if let Some(min) = prop.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                let message = if min == 1 {
                    format!("\"{key}\" must not be empty")
                } else {
                    format!("\"{key}\" must be at least {min} characters")
                };
                return Err(invalid(key, message));
            }
            if let Some(max) = prop.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                return Err(invalid(
                    key,
                    format!("\"{key}\" must be at most {max} characters"),
                ));
            }
            if prop.get("pattern").is_some() && !is_valid_group(s) {
                // The only pattern in the catalog is the tool-group pattern (§C8.8).
                return Err(invalid(
                    key,
                    format!(
                        "\"{key}\" must be 1 or 2 segments joined by \"/\", each [a-zA-Z0-9_-]{{1,64}}"
                    ),
                ));
            }
            if let Some(allowed) = prop.get("enum").and_then(Value::as_array)
                && !allowed.iter().any(|a| a.as_str() == Some(s))
            {
                let list: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
                return Err(
                    invalid(key, format!("\"{key}\" must be one of {}", list.join(", ")))
                        .merge_details(json!({ "acceptedValues": list })),
                );
            }
            Ok(value.clone())
        }
        "integer" => {
            let min = prop.get("minimum").and_then(Value::as_i64);
            let max = prop.get("maximum").and_then(Value::as_i64);
            let range = match (min, max) {
                (Some(lo), Some(hi)) => format!(" between {lo} and {hi}"),
                (Some(lo), None) => format!(" of at least {lo}"),
                (None, Some(hi)) => format!(" of at most {hi}"),
                (None, None) => String::new(),
            };
            let message = format!("\"{key}\" must be an integer{range}");
            let n = as_integer(value).ok_or_else(|| invalid(key, message.clone()))?;
            if min.is_some_and(|lo| n < lo) || max.is_some_and(|hi| n > hi) {
                return Err(invalid(key, message));
            }
            Ok(json!(n))
        }
        "boolean" => match value {
            Value::Bool(_) => Ok(value.clone()),
            _ => Err(invalid(key, format!("\"{key}\" must be true or false"))),
        },
        "object" => match value {
            Value::Object(_) => Ok(value.clone()),
            _ => Err(invalid(key, format!("\"{key}\" must be a JSON object"))),
        },
        _ => Ok(value.clone()),
    }
}
