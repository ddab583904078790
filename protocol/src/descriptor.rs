//! Tool and event descriptors (§D8.1, §D8.2): the typed form, the validators and the name
//! and group patterns.
//!
//! Descriptors are only built through the validators (deserialising goes through them too), so
//! holding a [`ToolDescriptor`] or an [`EventDescriptor`] means every rule of §D8 held. Unknown
//! fields are dropped, never stored (§D1). Schemas are kept as the objects received, in their
//! key order, and are never inspected: as their compact JSON text ([`Schema`]).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::declarations::{RiskLevel, TestCases, required_permissions, risk_level};
use crate::limits::{
    DEFAULT_CALL_TIMEOUT_MS, MAX_CALL_TIMEOUT_MS, MAX_FREE_TEXT_LEN, MAX_TOOL_NAME_LEN,
    MIN_CALL_TIMEOUT_MS,
};
use crate::text::{as_integer, truncate_utf16, utf16_len, utf16_len_within};

/// Why a descriptor was refused. Every variant names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptorError {
    #[error("a descriptor must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("`{field}` is required")]
    Missing { field: &'static str },
    /// Wrong JSON type, including an explicit `null` on an optional field (§D1).
    #[error("`{field}` must be {expected}, not {found}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("`{field}` must be {min} to {max} UTF-16 code units long, not {len}")]
    Length {
        field: &'static str,
        min: usize,
        max: usize,
        len: usize,
    },
    #[error("`name` must match ^[A-Za-z0-9_-]{{1,64}}$")]
    NamePattern,
    #[error("`group` must be one or two '/'-separated segments matching [A-Za-z0-9_-]{{1,64}}")]
    GroupPattern,
    #[error(
        "`annotations` may only hold readOnlyHint, destructiveHint and idempotentHint, not {key:?}"
    )]
    UnknownAnnotation { key: String },
    #[error("`annotations.{key}` must be a boolean, not {found}")]
    AnnotationNotBoolean {
        key: &'static str,
        found: &'static str,
    },
    #[error("`timeout_ms` must be an integer of at least 1")]
    TimeoutNotPositiveInteger,
    /// §D18.1.
    #[error("`riskLevel` must be \"low\", \"medium\" or \"high\"")]
    RiskLevel,
    /// §D18.2.
    #[error("`requiredPermissions` must hold at most 32 strings of 1 to 128 UTF-16 code units")]
    Permissions,
    /// §D18.3.
    #[error("`testCases` must hold 1 to 16 cases, not {count}")]
    TestCaseCount { count: usize },
    /// §D18.3: `problem` never quotes the peer's text.
    #[error("`testCases[{index}]` {problem}")]
    TestCase { index: usize, problem: &'static str },
    /// §D18.3.
    #[error("`testCases` take {bytes} bytes as compact JSON, over the limit of 16384")]
    TestCasesTooBig { bytes: usize },
}

impl DescriptorError {
    /// The descriptor field at fault (`""` when the descriptor itself is not an object).
    pub fn field(&self) -> &'static str {
        match self {
            Self::NotAnObject { .. } => "",
            Self::Missing { field }
            | Self::WrongType { field, .. }
            | Self::Length { field, .. } => field,
            Self::NamePattern => "name",
            Self::GroupPattern => "group",
            Self::UnknownAnnotation { .. } | Self::AnnotationNotBoolean { .. } => "annotations",
            Self::TimeoutNotPositiveInteger => "timeout_ms",
            Self::RiskLevel => "riskLevel",
            Self::Permissions => "requiredPermissions",
            Self::TestCaseCount { .. } | Self::TestCase { .. } | Self::TestCasesTooBig { .. } => {
                "testCases"
            }
        }
    }
}

/// The three MCP tool hints a descriptor may carry. Each is absent or a boolean; absent hints
/// stay absent when the descriptor is encoded again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Annotations {
    pub read_only_hint: Option<bool>,
    pub destructive_hint: Option<bool>,
    pub idempotent_hint: Option<bool>,
}

setters!(Annotations {
    with_read_only_hint => read_only_hint: Option<bool>,
    with_destructive_hint => destructive_hint: Option<bool>,
    with_idempotent_hint => idempotent_hint: Option<bool>,
});

impl Annotations {
    /// Wire keys, in the order they are written.
    const KEYS: [&'static str; 3] = ["readOnlyHint", "destructiveHint", "idempotentHint"];

    fn from_value(v: &Value) -> Result<Self, DescriptorError> {
        let map = match v {
            Value::Object(map) => map,
            other => {
                return Err(DescriptorError::WrongType {
                    field: "annotations",
                    expected: "an object",
                    found: json_kind(other),
                });
            }
        };
        let mut out = Self::default();
        for (key, value) in map {
            let slot = match key.as_str() {
                "readOnlyHint" => (&mut out.read_only_hint, Self::KEYS[0]),
                "destructiveHint" => (&mut out.destructive_hint, Self::KEYS[1]),
                "idempotentHint" => (&mut out.idempotent_hint, Self::KEYS[2]),
                _ => {
                    return Err(DescriptorError::UnknownAnnotation {
                        key: truncate_utf16(key, 64).to_owned(),
                    });
                }
            };
            match value {
                Value::Bool(b) => *slot.0 = Some(*b),
                other => {
                    return Err(DescriptorError::AnnotationNotBoolean {
                        key: slot.1,
                        found: json_kind(other),
                    });
                }
            }
        }
        Ok(out)
    }

    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        let hints = [
            self.read_only_hint,
            self.destructive_hint,
            self.idempotent_hint,
        ];
        for (key, hint) in Self::KEYS.into_iter().zip(hints) {
            if let Some(b) = hint {
                map.insert(key.to_owned(), Value::Bool(b));
            }
        }
        Value::Object(map)
    }
}

/// A schema object of a descriptor (`input_schema`, `output_schema`, `payload_schema`) as the
/// app sent it: its compact JSON text, keys in received order. Schemas are never inspected, and
/// the daemon holds thousands of registries: parsed, a small tool's two schemas take about
/// 1.4 KiB of maps and values, as text about 100 bytes. Clones share the text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Schema(Arc<str>);

impl Schema {
    /// `value` must be an object; the validators check that before.
    fn from_object_value(value: &Value) -> Self {
        // `Display` of a `Value` is its compact JSON text and cannot fail.
        Self(value.to_string().into())
    }

    /// The compact JSON text of the object.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The object, keys in received order.
    pub fn to_map(&self) -> Map<String, Value> {
        // The text was written from an object, so it always parses back into one.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Map<String, Value>> for Schema {
    fn from(map: Map<String, Value>) -> Self {
        Self::from_object_value(&Value::Object(map))
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(Self::from)
    }
}

/// What a descriptor's keys, annotations and number take beyond its texts, counted once per
/// descriptor by `held_bytes` so that many tiny entries also add up.
pub const FIXED_DESCRIPTOR_BYTES: usize = 128;

fn schema_bytes(schema: Option<&Schema>) -> usize {
    schema.map_or(0, |s| s.as_str().len())
}

/// A validated tool descriptor (§D8.1), in wire form. Equal descriptors are equal on the
/// wire (schemas compare as text), so a holder may share one copy among equal registrations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ToolDescriptor {
    pub name: String,
    pub description: String,
    pub input_schema: Option<Schema>,
    pub output_schema: Option<Schema>,
    pub annotations: Option<Annotations>,
    /// As sent, before the clamp of [`ToolDescriptor::effective_timeout_ms`].
    pub timeout_ms: Option<u64>,
    pub group: Option<String>,
    /// `riskLevel` as declared (§D18.1); see [`ToolDescriptor::effective_risk_level`].
    pub risk_level: Option<RiskLevel>,
    /// `requiredPermissions` (§D18.2), repeats removed.
    pub required_permissions: Option<Vec<String>>,
    /// `testCases` (§D18.3).
    pub test_cases: Option<TestCases>,
}

setters!(ToolDescriptor {
    with_risk_level => risk_level: Option<RiskLevel>,
    with_required_permissions => required_permissions: Option<Vec<String>>,
    with_test_cases => test_cases: Option<TestCases>,
    with_input_schema => input_schema: Option<Schema>,
    with_output_schema => output_schema: Option<Schema>,
    with_annotations => annotations: Option<Annotations>,
    with_timeout_ms => timeout_ms: Option<u64>,
    with_group => group: Option<String>,
});

impl ToolDescriptor {
    /// A descriptor with only its required fields; the optional ones through the setters.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: None,
            output_schema: None,
            annotations: None,
            timeout_ms: None,
            group: None,
            risk_level: None,
            required_permissions: None,
            test_cases: None,
        }
    }

    /// Bytes the descriptor's text takes as held: name, description, group and each schema's
    /// compact JSON, plus [`FIXED_DESCRIPTOR_BYTES`] for the rest. What
    /// [`crate::limits::MAX_REGISTRY_BYTES`] counts.
    pub fn held_bytes(&self) -> usize {
        FIXED_DESCRIPTOR_BYTES
            + self.name.len()
            + self.description.len()
            + self.group.as_ref().map_or(0, String::len)
            + schema_bytes(self.input_schema.as_ref())
            + schema_bytes(self.output_schema.as_ref())
            + self
                .required_permissions
                .as_ref()
                .map_or(0, |p| p.iter().map(String::len).sum())
            + self.test_cases.as_ref().map_or(0, |t| t.as_str().len())
    }

    /// The risk a tool carries (§D18.1): `riskLevel` when declared, else `high` for
    /// `destructiveHint: true`, else `low` for `readOnlyHint: true`, else none.
    pub fn effective_risk_level(&self) -> Option<RiskLevel> {
        self.risk_level.or_else(|| {
            let a = self.annotations?;
            if a.destructive_hint == Some(true) {
                Some(RiskLevel::High)
            } else if a.read_only_hint == Some(true) {
                Some(RiskLevel::Low)
            } else {
                None
            }
        })
    }

    /// Whether `appduct tools test` treats the tool as destructive (§L7.6): `destructiveHint:
    /// true`, an effective risk of `high`, or [`Self::presumed_destructive`].
    pub fn is_risky(&self) -> bool {
        self.is_destructive()
            || self.effective_risk_level() == Some(RiskLevel::High)
            || self.presumed_destructive()
    }

    /// A tool that says nothing about its risk, read as MCP reads unset hints (§L7.6): no
    /// `riskLevel`, `readOnlyHint` not `true` and `destructiveHint` not `false` — MCP's
    /// `destructiveHint` defaults to `true` for a tool that is not read-only.
    pub fn presumed_destructive(&self) -> bool {
        let hints = self.annotations.unwrap_or_default();
        self.risk_level.is_none()
            && hints.read_only_hint != Some(true)
            && hints.destructive_hint != Some(false)
    }

    /// The first declaration field of `required` (wire names, §D18) the tool lacks. A risk
    /// derived from annotations satisfies `riskLevel`.
    pub fn missing_declaration<'a>(&self, required: &[&'a str]) -> Option<&'a str> {
        required.iter().copied().find(|field| match *field {
            "riskLevel" => self.effective_risk_level().is_none(),
            "requiredPermissions" => self.required_permissions.is_none(),
            "testCases" => self.test_cases.is_none(),
            _ => false,
        })
    }

    /// The call deadline: `timeout_ms` clamped to [1000, 600000], or 10000 when absent.
    pub fn effective_timeout_ms(&self) -> u64 {
        self.timeout_ms.map_or(DEFAULT_CALL_TIMEOUT_MS, |t| {
            t.clamp(MIN_CALL_TIMEOUT_MS, MAX_CALL_TIMEOUT_MS)
        })
    }

    /// `annotations.destructiveHint == true` routes policy through `policy.destructive`.
    pub fn is_destructive(&self) -> bool {
        self.annotations
            .is_some_and(|a| a.destructive_hint == Some(true))
    }

    /// The wire object: known fields only, absent optionals omitted.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("name".into(), Value::String(self.name.clone()));
        map.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        if let Some(s) = &self.input_schema {
            map.insert("input_schema".into(), s.to_value());
        }
        if let Some(s) = &self.output_schema {
            map.insert("output_schema".into(), s.to_value());
        }
        if let Some(a) = &self.annotations {
            map.insert("annotations".into(), a.to_value());
        }
        if let Some(t) = self.timeout_ms {
            map.insert("timeout_ms".into(), Value::from(t));
        }
        if let Some(g) = &self.group {
            map.insert("group".into(), Value::String(g.clone()));
        }
        if let Some(r) = self.risk_level {
            map.insert("riskLevel".into(), Value::String(r.as_str().to_owned()));
        }
        if let Some(p) = &self.required_permissions {
            map.insert(
                "requiredPermissions".into(),
                Value::Array(p.iter().cloned().map(Value::String).collect()),
            );
        }
        if let Some(t) = &self.test_cases {
            map.insert("testCases".into(), t.to_value());
        }
        map
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }
}

/// A validated event descriptor (§D8.2), in wire form.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventDescriptor {
    pub name: String,
    pub description: String,
    pub payload_schema: Option<Schema>,
}

impl EventDescriptor {
    /// A descriptor without `payload_schema`; add one with `with_payload_schema`.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            payload_schema: None,
        }
    }
}

setters!(EventDescriptor {
    with_payload_schema => payload_schema: Option<Schema>,
});

impl EventDescriptor {
    /// Bytes the descriptor's text takes as held, as [`ToolDescriptor::held_bytes`] counts.
    pub fn held_bytes(&self) -> usize {
        FIXED_DESCRIPTOR_BYTES
            + self.name.len()
            + self.description.len()
            + schema_bytes(self.payload_schema.as_ref())
    }

    /// The wire object: known fields only, `payload_schema` omitted when absent.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("name".into(), Value::String(self.name.clone()));
        map.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        if let Some(s) = &self.payload_schema {
            map.insert("payload_schema".into(), s.to_value());
        }
        map
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }
}

/// Validates a tool descriptor as received (§D8.1).
pub fn validate_tool_descriptor(v: &Value) -> Result<ToolDescriptor, DescriptorError> {
    let map = as_object(v)?;
    let name = required_str(map, "name")?;
    if !is_valid_tool_name(name) {
        return Err(DescriptorError::NamePattern);
    }
    let description = free_text(map, "description")?;
    let input_schema = optional_schema(map, "input_schema")?;
    let output_schema = optional_schema(map, "output_schema")?;
    let annotations = map
        .get("annotations")
        .map(Annotations::from_value)
        .transpose()?;
    // Only the snake_case key counts; a camelCase `timeoutMs` is an ignored unknown field.
    let timeout_ms = match map.get("timeout_ms") {
        None => None,
        Some(t) => match as_integer(t) {
            Some(i) if i >= 1 => Some(i.unsigned_abs()),
            _ => return Err(DescriptorError::TimeoutNotPositiveInteger),
        },
    };
    let group = match map.get("group") {
        None => None,
        Some(Value::String(g)) if is_valid_group(g) => Some(g.clone()),
        Some(Value::String(_)) => return Err(DescriptorError::GroupPattern),
        Some(other) => {
            return Err(DescriptorError::WrongType {
                field: "group",
                expected: "a string",
                found: json_kind(other),
            });
        }
    };
    // §D18: the registry declarations (an extension; absent from v2 descriptors).
    let risk_level = map.get("riskLevel").map(risk_level).transpose()?;
    let required_permissions = map
        .get("requiredPermissions")
        .map(required_permissions)
        .transpose()?;
    let test_cases = map
        .get("testCases")
        .map(TestCases::from_value)
        .transpose()?;
    Ok(ToolDescriptor {
        name: name.to_owned(),
        description,
        input_schema,
        output_schema,
        annotations,
        timeout_ms,
        group,
        risk_level,
        required_permissions,
        test_cases,
    })
}

/// Validates an event descriptor as received (§D8.2).
pub fn validate_event_descriptor(v: &Value) -> Result<EventDescriptor, DescriptorError> {
    let map = as_object(v)?;
    let name = free_text(map, "name")?;
    let description = free_text(map, "description")?;
    let payload_schema = optional_schema(map, "payload_schema")?;
    Ok(EventDescriptor {
        name,
        description,
        payload_schema,
    })
}

/// `^[A-Za-z0-9_-]{1,64}$` over the whole string (so `"tool\n"` fails).
pub fn is_valid_tool_name(s: &str) -> bool {
    (1..=MAX_TOOL_NAME_LEN).contains(&s.len()) && s.bytes().all(is_name_byte)
}

/// `^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?$` over the whole string.
pub fn is_valid_group(s: &str) -> bool {
    let mut segments = s.split('/');
    let first_ok = segments.next().is_some_and(is_valid_tool_name);
    let second_ok = segments.next().is_none_or(is_valid_tool_name);
    first_ok && second_ok && segments.next().is_none()
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The JSON type of a value, for error messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn as_object(v: &Value) -> Result<&Map<String, Value>, DescriptorError> {
    v.as_object().ok_or(DescriptorError::NotAnObject {
        found: json_kind(v),
    })
}

fn required_str<'a>(
    map: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, DescriptorError> {
    match map.get(field) {
        None => Err(DescriptorError::Missing { field }),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(DescriptorError::WrongType {
            field,
            expected: "a string",
            found: json_kind(other),
        }),
    }
}

/// A required string of 1..=4096 UTF-16 code units.
fn free_text(map: &Map<String, Value>, field: &'static str) -> Result<String, DescriptorError> {
    let s = required_str(map, field)?;
    if !utf16_len_within(s, 1, MAX_FREE_TEXT_LEN) {
        return Err(DescriptorError::Length {
            field,
            min: 1,
            max: MAX_FREE_TEXT_LEN,
            len: utf16_len(s),
        });
    }
    Ok(s.to_owned())
}

fn optional_schema(
    map: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<Schema>, DescriptorError> {
    match map.get(field) {
        None => Ok(None),
        Some(schema @ Value::Object(_)) => Ok(Some(Schema::from_object_value(schema))),
        Some(other) => Err(DescriptorError::WrongType {
            field,
            expected: "an object",
            found: json_kind(other),
        }),
    }
}

// Serde goes through the wire form and the validators, so a descriptor can never be built from
// unchecked input by deserialising it.

impl Serialize for ToolDescriptor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolDescriptor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(deserializer)?;
        validate_tool_descriptor(&v).map_err(serde::de::Error::custom)
    }
}

impl Serialize for EventDescriptor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EventDescriptor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(deserializer)?;
        validate_event_descriptor(&v).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Annotations {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(deserializer)?;
        Self::from_value(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(v: Value) -> Result<ToolDescriptor, DescriptorError> {
        validate_tool_descriptor(&v)
    }

    #[test]
    fn full_tool_descriptor_keeps_every_known_field_and_drops_unknown_ones() {
        let v = json!({
            "name": "clear_cart", "description": "Remove every item.",
            "input_schema": {"type": "object", "z": 1, "a": 2},
            "output_schema": {"type": "object"},
            "annotations": {"destructiveHint": true, "idempotentHint": true},
            "timeout_ms": 3000, "group": "checkout/cart",
            "timeoutMs": 5, "extra": {"x": 1}
        });
        let d = tool(v).unwrap();
        assert_eq!(d.timeout_ms, Some(3000));
        assert!(d.is_destructive());
        assert_eq!(d.group.as_deref(), Some("checkout/cart"));
        let out = d.to_value();
        assert!(out.get("timeoutMs").is_none() && out.get("extra").is_none());
        // Schema key order is kept as received.
        assert_eq!(
            out["input_schema"].to_string(),
            r#"{"type":"object","z":1,"a":2}"#
        );
        assert_eq!(
            out["annotations"],
            json!({"destructiveHint": true, "idempotentHint": true})
        );
        assert_eq!(tool(out).unwrap(), d);
    }

    #[test]
    fn schemas_are_kept_as_compact_text_in_received_key_order() {
        let d = tool(json!({"name": "t", "description": "x",
                            "input_schema": {"z": [1, 2.5], "a": {"b": null}}}))
        .unwrap();
        let schema = d.input_schema.clone().unwrap();
        assert_eq!(schema.as_str(), r#"{"z":[1,2.5],"a":{"b":null}}"#);
        assert_eq!(format!("{schema:?}"), r#"{"z":[1,2.5],"a":{"b":null}}"#);
        assert_eq!(
            schema.to_map().keys().collect::<Vec<_>>(),
            ["z", "a"],
            "parsed back in received order"
        );
        assert_eq!(schema.to_value(), json!({"z": [1, 2.5], "a": {"b": null}}));
        assert_eq!(
            serde_json::to_string(&schema).unwrap(),
            r#"{"z":[1,2.5],"a":{"b":null}}"#
        );
        let back: Schema = serde_json::from_str(r#"{"z":[1,2.5],"a":{"b":null}}"#).unwrap();
        assert_eq!(back, schema);
        // The same keys in another order are another schema on the wire.
        let reordered: Schema = serde_json::from_str(r#"{"a":{"b":null},"z":[1,2.5]}"#).unwrap();
        assert_ne!(reordered, schema);
        assert!(serde_json::from_str::<Schema>("[1]").is_err());
        assert!(serde_json::from_str::<Schema>("\"object\"").is_err());
    }

    #[test]
    fn names_must_match_the_pattern_over_the_whole_string() {
        let named = |n: &str| tool(json!({"name": n, "description": "x"}));
        assert!(named("read_file-2").is_ok());
        assert!(named(&"a".repeat(64)).is_ok());
        assert_eq!(named(&"a".repeat(65)), Err(DescriptorError::NamePattern));
        assert_eq!(named("tool\n"), Err(DescriptorError::NamePattern));
        assert_eq!(named(""), Err(DescriptorError::NamePattern));
        assert_eq!(named("émoji"), Err(DescriptorError::NamePattern));
        assert_eq!(
            tool(json!({"name": 7, "description": "x"})),
            Err(DescriptorError::WrongType {
                field: "name",
                expected: "a string",
                found: "a number"
            })
        );
        assert_eq!(
            tool(json!({"description": "x"})),
            Err(DescriptorError::Missing { field: "name" })
        );
    }

    #[test]
    fn description_length_counts_utf16_units() {
        let described = |d: String| tool(json!({"name": "t", "description": d}));
        assert!(described("😀".repeat(2048)).is_ok());
        let err = described(format!("{}x", "😀".repeat(2048))).unwrap_err();
        assert_eq!(
            err,
            DescriptorError::Length {
                field: "description",
                min: 1,
                max: 4096,
                len: 4097
            }
        );
        assert_eq!(err.field(), "description");
        assert!(described(String::new()).is_err());
    }

    #[test]
    fn explicit_null_on_an_optional_field_is_invalid() {
        for field in [
            "input_schema",
            "output_schema",
            "annotations",
            "timeout_ms",
            "group",
        ] {
            let mut v = json!({"name": "t", "description": "x"});
            v[field] = Value::Null;
            let err = tool(v).unwrap_err();
            assert_eq!(err.field(), field, "{err}");
        }
    }

    #[test]
    fn annotations_hold_only_the_three_boolean_hints() {
        let annotated = |a: Value| tool(json!({"name": "t", "description": "x", "annotations": a}));
        assert!(annotated(json!({})).is_ok());
        assert_eq!(
            annotated(json!({"extraHint": true})),
            Err(DescriptorError::UnknownAnnotation {
                key: "extraHint".into()
            })
        );
        assert_eq!(
            annotated(json!({"readOnlyHint": "yes"})),
            Err(DescriptorError::AnnotationNotBoolean {
                key: "readOnlyHint",
                found: "a string"
            })
        );
        assert!(annotated(json!(["readOnlyHint"])).is_err());
        let d = annotated(json!({"destructiveHint": false})).unwrap();
        assert!(!d.is_destructive());
    }

    #[test]
    fn timeout_follows_the_wire_integer_rule_and_clamps() {
        let timed = |t: Value| tool(json!({"name": "t", "description": "x", "timeout_ms": t}));
        assert_eq!(timed(json!(5e3)).unwrap().timeout_ms, Some(5000));
        assert_eq!(timed(json!(1)).unwrap().effective_timeout_ms(), 1000);
        assert_eq!(
            timed(json!(9_000_000)).unwrap().effective_timeout_ms(),
            600_000
        );
        assert_eq!(timed(json!(3000)).unwrap().effective_timeout_ms(), 3000);
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("60000"),
            json!(1e300),
        ] {
            assert_eq!(timed(bad), Err(DescriptorError::TimeoutNotPositiveInteger));
        }
        let untimed = tool(json!({"name": "t", "description": "x", "timeoutMs": -1})).unwrap();
        assert_eq!(untimed.timeout_ms, None);
        assert_eq!(untimed.effective_timeout_ms(), 10_000);
    }

    #[test]
    fn groups_have_one_or_two_segments() {
        for ok in ["checkout", "checkout/payment", "Feature_1/sub-area_2"] {
            assert!(is_valid_group(ok), "{ok}");
        }
        for bad in [
            "",
            "/",
            "a/",
            "/a",
            "a//b",
            "a/b/c",
            "check out",
            "café",
            "a\n",
            &"g".repeat(65),
        ] {
            assert!(!is_valid_group(bad), "{bad:?}");
        }
        assert_eq!(
            tool(json!({"name": "t", "description": "x", "group": "a/b/c"})),
            Err(DescriptorError::GroupPattern)
        );
    }

    #[test]
    fn non_object_descriptors_are_invalid() {
        for v in [json!("x"), json!(["x"]), Value::Null] {
            assert!(matches!(
                tool(v.clone()),
                Err(DescriptorError::NotAnObject { .. })
            ));
            assert!(matches!(
                validate_event_descriptor(&v),
                Err(DescriptorError::NotAnObject { .. })
            ));
        }
    }

    #[test]
    fn event_descriptors_allow_any_nonempty_name() {
        let ev = |v: Value| validate_event_descriptor(&v);
        let d = ev(json!({"name": "cart item.added", "description": "x",
                          "payload_schema": {"type": "object"}, "other": 1}))
        .unwrap();
        assert_eq!(
            d.to_value(),
            json!({"name": "cart item.added", "description": "x",
                   "payload_schema": {"type": "object"}})
        );
        assert_eq!(
            ev(json!({"name": "", "description": "x"}))
                .unwrap_err()
                .field(),
            "name"
        );
        assert_eq!(
            ev(json!({"name": "a", "description": "x", "payload_schema": null}))
                .unwrap_err()
                .field(),
            "payload_schema"
        );
        assert!(ev(json!({"name": "a".repeat(4096), "description": "x"})).is_ok());
        assert!(ev(json!({"name": "a".repeat(4097), "description": "x"})).is_err());
    }

    #[test]
    fn registry_declarations_are_kept_checked_and_derived() {
        use crate::declarations::RiskLevel;
        let d = tool(
            json!({"name": "t", "description": "x", "riskLevel": "medium",
            "requiredPermissions": ["camera"],
            "testCases": [{"arguments": {"a": 1}, "expect": {}}]}),
        )
        .unwrap();
        assert_eq!(d.effective_risk_level(), Some(RiskLevel::Medium));
        let out = d.to_value();
        assert_eq!(out["riskLevel"], "medium");
        assert_eq!(out["requiredPermissions"], json!(["camera"]));
        assert_eq!(
            out["testCases"],
            json!([{"arguments": {"a": 1}, "expect": {}}])
        );
        assert_eq!(tool(out).unwrap(), d, "round-trips through the wire form");
        assert_eq!(d.missing_declaration(&["riskLevel", "testCases"]), None);

        let plain = tool(json!({"name": "t", "description": "x"})).unwrap();
        assert_eq!(plain.effective_risk_level(), None);
        assert_eq!(
            plain.missing_declaration(&["requiredPermissions", "testCases"]),
            Some("requiredPermissions")
        );
        // Says nothing about its risk: presumed destructive, as MCP presumes.
        assert!(plain.is_risky() && plain.presumed_destructive());
        for (declares, risky) in [
            (json!({"annotations": {"readOnlyHint": true}}), false),
            (json!({"annotations": {"destructiveHint": false}}), false),
            (json!({"annotations": {"idempotentHint": true}}), true),
            (json!({"riskLevel": "low"}), false),
            (json!({"riskLevel": "medium"}), false),
            (
                json!({"riskLevel": "low", "annotations": {"destructiveHint": true}}),
                true,
            ),
        ] {
            let mut wire = json!({"name": "t", "description": "x"});
            wire.as_object_mut()
                .unwrap()
                .extend(declares.as_object().unwrap().clone());
            assert_eq!(tool(wire).unwrap().is_risky(), risky, "{declares}");
        }
        let destructive = tool(json!({"name": "t", "description": "x",
            "annotations": {"destructiveHint": true, "readOnlyHint": true}}))
        .unwrap();
        assert_eq!(destructive.effective_risk_level(), Some(RiskLevel::High));
        assert_eq!(destructive.missing_declaration(&["riskLevel"]), None);
        assert!(destructive.is_risky());
        let read_only = tool(json!({"name": "t", "description": "x",
            "annotations": {"readOnlyHint": true}}))
        .unwrap();
        assert_eq!(read_only.effective_risk_level(), Some(RiskLevel::Low));
        let declared_high = tool(json!({"name": "t", "description": "x", "riskLevel": "high",
            "annotations": {"readOnlyHint": true}}))
        .unwrap();
        assert!(declared_high.is_risky() && !declared_high.is_destructive());

        for (field, bad) in [
            ("riskLevel", json!("severe")),
            ("riskLevel", Value::Null),
            ("requiredPermissions", json!([1])),
            ("testCases", json!([{"arguments": 1, "expect": {}}])),
            ("testCases", Value::Null),
        ] {
            let mut v = json!({"name": "t", "description": "x"});
            v[field] = bad;
            assert_eq!(tool(v).unwrap_err().field(), field);
        }
        assert!(d.held_bytes() > plain.held_bytes() + 20);
    }

    #[test]
    fn serde_goes_through_the_validators() {
        let d: ToolDescriptor =
            serde_json::from_str(r#"{"name":"t","description":"x","timeout_ms":2000}"#).unwrap();
        assert_eq!(d.timeout_ms, Some(2000));
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"name":"t","description":"x","timeout_ms":2000}"#
        );
        assert!(
            serde_json::from_str::<ToolDescriptor>(r#"{"name":"t t","description":"x"}"#).is_err()
        );
        assert!(serde_json::from_str::<EventDescriptor>(r#"{"name":"e"}"#).is_err());
        assert!(serde_json::from_str::<Annotations>(r#"{"readOnlyHint":null}"#).is_err());
    }
}
