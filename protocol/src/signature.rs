//! The one signature and summary renderer shared by the CLI and the MCP bridge (§L7.5).
//!
//! Schemas come from apps and are never validated beyond being JSON, so every function here is
//! total: whatever cannot be read renders as `...` or `unknown`. Recursion is bounded by the
//! rules themselves (objects expand at most one level below a parameter or a root, arrays nest
//! at most four deep), so no schema, however deep, can exhaust the stack.
//!
//! Cost is bounded too (project decisions on top of §L7.5, which only says the renderer never
//! fails): a `type` array renders each distinct type once and at most
//! [`MAX_TYPE_MEMBERS`] of them, then ` | …`, so a schema node is rendered at most once; and a
//! signature is at most [`MAX_SIGNATURE_CHARS`] characters: once that many are written, the last
//! one becomes `…` and rendering stops descending. Work is therefore linear in the schema and
//! output is bounded, whatever the schema.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::canonical::compact_json_prefix;

/// Longest signature, in code points; a longer one is cut and ends with `…`.
pub const MAX_SIGNATURE_CHARS: usize = 4_096;
/// Distinct members of a `type` array shown before ` | …`.
pub const MAX_TYPE_MEMBERS: usize = 5;
/// Longest `default` (compact JSON, code points) shown after a parameter.
const MAX_DEFAULT_CHARS: usize = 20;
/// Longest enum literal (compact JSON, code points) before it is cut with `…`.
const MAX_LITERAL_CHARS: usize = 40;
/// Enum literals shown before ` | …`.
const MAX_ENUM_LITERALS: usize = 5;
/// Arrays nested deeper than this render as `...[]`.
const MAX_ARRAY_DEPTH: usize = 4;
/// Summary length in code points, before the `…`.
const MAX_SUMMARY_CHARS: usize = 120;

/// `<name>(<params>)`, then ` -> <T(output_schema)>` when an output schema exists.
///
/// `sum(a: number, b: number) -> { total?: number }`
pub fn render_tool_signature(
    name: &str,
    input_schema: Option<&Value>,
    output_schema: Option<&Value>,
) -> String {
    let mut out = Output::new(MAX_SIGNATURE_CHARS);
    out.push(name);
    out.push("(");
    render_params(&mut out, input_schema);
    out.push(")");
    if let Some(output) = output_schema {
        out.push(" -> ");
        render_type(&mut out, output, Expand::Object, 0);
    }
    out.text
}

/// The event name, then a space and `T(payload_schema)` when a payload schema is declared:
/// `checkout_completed { orderId: string }`.
pub fn render_event_signature(name: &str, payload_schema: Option<&Value>) -> String {
    let mut out = Output::new(MAX_SIGNATURE_CHARS);
    out.push(name);
    if let Some(schema) = payload_schema {
        out.push(" ");
        render_type(&mut out, schema, Expand::Object, 0);
    }
    out.text
}

/// One-line summary of a description: up to the first `\n` or `\r`, control characters
/// (U+0000–U+001F, U+007F–U+009F) removed, surrounding whitespace trimmed, and cut to 120 code
/// points followed by `…` when longer.
pub fn summarize_description(description: &str) -> String {
    let first_line = description
        .split(['\n', '\r'])
        .next()
        .unwrap_or(description);
    let cleaned: String = first_line.chars().filter(|c| !c.is_control()).collect();
    let trimmed = cleaned.trim();
    match trimmed.char_indices().nth(MAX_SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// The signature being written, with its character budget.
struct Output {
    text: String,
    /// Characters that may still be written.
    room: usize,
    /// The budget ran out: the text ends with `…` and nothing more is written.
    full: bool,
}

impl Output {
    fn new(limit: usize) -> Self {
        Self {
            text: String::new(),
            room: limit,
            full: false,
        }
    }

    /// Appends `s`, or as much of it as fits, replacing the last character with `…` when it
    /// does not fit. Costs at most `room + 1` characters of scanning.
    fn push(&mut self, s: &str) {
        if self.full {
            return;
        }
        match s.char_indices().nth(self.room) {
            None => {
                self.room -= s.chars().count();
                self.text.push_str(s);
            }
            Some((cut, _)) => {
                self.text.push_str(&s[..cut]);
                self.text.pop();
                self.text.push('…');
                self.room = 0;
                self.full = true;
            }
        }
    }
}

/// Whether an object schema at this position shows its properties or collapses to `{...}`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expand {
    /// A parameter's own schema, or the root of an output or payload schema.
    Object,
    /// Inside an object or as array items.
    Collapsed,
}

fn render_params(out: &mut Output, input_schema: Option<&Value>) {
    let Some(schema) = input_schema else {
        return;
    };
    let Some(schema) = schema.as_object() else {
        return out.push("...");
    };
    if !type_allows_object(schema) {
        return out.push("...");
    }
    match schema.get("properties").and_then(Value::as_object) {
        Some(properties) => render_properties(out, schema, properties, Expand::Object),
        None if additional_properties_false(schema) => {}
        None => out.push("..."),
    }
}

/// True when `type` is `"object"` or an array containing `"object"`.
fn type_allows_object(schema: &Map<String, Value>) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t.as_str() == Some("object")),
        _ => false,
    }
}

fn additional_properties_false(schema: &Map<String, Value>) -> bool {
    schema.get("additionalProperties") == Some(&Value::Bool(false))
}

/// `name: T` / `name?: T`, plus ` = <default>` for short defaults, in declared order, joined
/// by `, `.
fn render_properties(
    out: &mut Output,
    schema: &Map<String, Value>,
    properties: &Map<String, Value>,
    child_expand: Expand,
) {
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (i, (name, property)) in properties.iter().enumerate() {
        if out.full {
            return;
        }
        if i > 0 {
            out.push(", ");
        }
        render_property_name(out, name);
        if !required.contains(name.as_str()) {
            out.push("?");
        }
        out.push(": ");
        render_type(out, property, child_expand, 0);
        if let Some(default) = property.get("default") {
            let (text, complete) = compact_json_prefix(default, MAX_DEFAULT_CHARS);
            if complete {
                out.push(" = ");
                out.push(&text);
            }
        }
    }
}

/// Identifiers as they are; anything else as a JSON string (`"x-id"`).
fn render_property_name(out: &mut Output, name: &str) {
    let mut chars = name.chars();
    let is_identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if is_identifier {
        return out.push(name);
    }
    // One character past the room is enough for `push` to see the overflow.
    let (text, _) = compact_json_prefix(&Value::String(name.to_owned()), out.room + 1);
    out.push(&text);
}

/// `T(schema)` of the table in §L7.5. `arrays` counts the arrays enclosing this schema.
fn render_type(out: &mut Output, schema: &Value, expand: Expand, arrays: usize) {
    if out.full {
        return;
    }
    // A schema that is not an object (`true`, `3`, `null`) matches no row but the last.
    let Some(schema) = schema.as_object() else {
        return out.push("unknown");
    };
    if let Some(literals) = schema.get("enum") {
        return render_enum(out, literals);
    }
    if let Some(literal) = schema.get("const") {
        // Shown whole (only enum literals are cut); the signature budget still applies.
        let (text, _) = compact_json_prefix(literal, out.room + 1);
        return out.push(&text);
    }
    if ["anyOf", "oneOf", "allOf", "not", "$ref"]
        .iter()
        .any(|key| schema.contains_key(*key))
    {
        return out.push("...");
    }
    match schema.get("type") {
        Some(Value::String(t)) => render_named_type(out, schema, TypeName::of(t), expand, arrays),
        Some(Value::Array(types)) if !types.is_empty() => {
            // Each distinct type once: repeating a member would repeat its whole rendering.
            let mut distinct: Vec<TypeName> = Vec::new();
            let mut more = false;
            for member in types {
                let name = member.as_str().map_or(TypeName::Unknown, TypeName::of);
                if distinct.contains(&name) {
                    continue;
                }
                if distinct.len() == MAX_TYPE_MEMBERS {
                    more = true;
                    break;
                }
                distinct.push(name);
            }
            for (i, name) in distinct.into_iter().enumerate() {
                if i > 0 {
                    out.push(" | ");
                }
                render_named_type(out, schema, name, expand, arrays);
            }
            if more {
                out.push(" | …");
            }
        }
        _ => out.push("unknown"),
    }
}

/// Literals as compact JSON joined by ` | `, each cut to 40 characters with `…`, at most five
/// then ` | …`. An `enum` that is not a non-empty array has no literals to show.
fn render_enum(out: &mut Output, literals: &Value) {
    let literals = match literals.as_array() {
        Some(literals) if !literals.is_empty() => literals,
        _ => return out.push("..."),
    };
    for (i, literal) in literals.iter().take(MAX_ENUM_LITERALS).enumerate() {
        if i > 0 {
            out.push(" | ");
        }
        let (text, complete) = compact_json_prefix(literal, MAX_LITERAL_CHARS);
        out.push(&text);
        if !complete {
            out.push("…");
        }
    }
    if literals.len() > MAX_ENUM_LITERALS {
        out.push(" | …");
    }
}

/// The `type` names the table distinguishes; every other value reads as `Unknown`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TypeName {
    String,
    Number,
    Integer,
    Boolean,
    Null,
    Array,
    Object,
    Unknown,
}

impl TypeName {
    fn of(name: &str) -> Self {
        match name {
            "string" => Self::String,
            "number" => Self::Number,
            "integer" => Self::Integer,
            "boolean" => Self::Boolean,
            "null" => Self::Null,
            "array" => Self::Array,
            "object" => Self::Object,
            _ => Self::Unknown,
        }
    }
}

fn render_named_type(
    out: &mut Output,
    schema: &Map<String, Value>,
    type_name: TypeName,
    expand: Expand,
    arrays: usize,
) {
    match type_name {
        TypeName::String => out.push("string"),
        TypeName::Number => out.push("number"),
        TypeName::Integer => out.push("int"),
        TypeName::Boolean => out.push("bool"),
        TypeName::Null => out.push("null"),
        TypeName::Array if arrays >= MAX_ARRAY_DEPTH => out.push("...[]"),
        TypeName::Array => {
            match schema.get("items") {
                // A non-object `items` (tuple form, boolean schema) renders as `unknown`.
                Some(items) => render_type(out, items, Expand::Collapsed, arrays + 1),
                None => out.push("unknown"),
            }
            out.push("[]");
        }
        TypeName::Object if expand == Expand::Object => {
            match schema.get("properties").and_then(Value::as_object) {
                Some(properties) if properties.is_empty() => out.push("{}"),
                Some(properties) => {
                    out.push("{ ");
                    render_properties(out, schema, properties, Expand::Collapsed);
                    out.push(" }");
                }
                None if additional_properties_false(schema) => out.push("{}"),
                None => out.push("{...}"),
            }
        }
        TypeName::Object => out.push("{...}"),
        TypeName::Unknown => out.push("unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sig(input: Option<Value>, output: Option<Value>) -> String {
        render_tool_signature("t", input.as_ref(), output.as_ref())
    }

    fn param(schema: Value) -> String {
        sig(
            Some(json!({"type": "object", "properties": {"p": schema}, "required": ["p"]})),
            None,
        )
    }

    // --- The example table of §L7.5 ---

    #[test]
    fn spec_example_no_input_no_output() {
        assert_eq!(render_tool_signature("ping", None, None), "ping()");
    }

    #[test]
    fn spec_example_sum() {
        let input = json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]});
        let output = json!({"type":"object","properties":{"total":{"type":"number"}}});
        assert_eq!(
            render_tool_signature("sum", Some(&input), Some(&output)),
            "sum(a: number, b: number) -> { total?: number }"
        );
    }

    #[test]
    fn spec_example_add_item_with_default() {
        let input = json!({"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","default":1}},"required":["sku"]});
        assert_eq!(
            render_tool_signature("add_item", Some(&input), None),
            "add_item(sku: string, qty?: int = 1)"
        );
    }

    #[test]
    fn spec_example_echo_non_object_input() {
        let input = json!({"type": "string"});
        assert_eq!(
            render_tool_signature("echo", Some(&input), None),
            "echo(...)"
        );
    }

    #[test]
    fn spec_example_tag_array_and_nested_object() {
        let input = json!({"type":"object","properties":{
            "tags":{"type":"array","items":{"type":"string"}},
            "meta":{"type":"object","properties":{"x":{"type":"object"}}}
        }});
        assert_eq!(
            render_tool_signature("tag", Some(&input), None),
            "tag(tags?: string[], meta?: { x?: {...} })"
        );
    }

    #[test]
    fn spec_example_cli_listing_lines() {
        let pay = json!({"type":"object","properties":{"method":{"enum":["card","cash"]}},"required":["method"]});
        let ok = json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]});
        assert_eq!(
            render_tool_signature("pay", Some(&pay), Some(&ok)),
            r#"pay(method: "card" | "cash") -> { ok: bool }"#
        );
    }

    // --- Params ---

    #[test]
    fn params_of_object_input_without_properties_follow_additional_properties() {
        assert_eq!(sig(Some(json!({"type": "object"})), None), "t(...)");
        assert_eq!(
            sig(
                Some(json!({"type": "object", "additionalProperties": false})),
                None
            ),
            "t()"
        );
        assert_eq!(
            sig(
                Some(json!({"type": "object", "additionalProperties": true})),
                None
            ),
            "t(...)"
        );
        // `properties` that is not an object counts as absent.
        assert_eq!(
            sig(Some(json!({"type": "object", "properties": null})), None),
            "t(...)"
        );
        assert_eq!(
            sig(Some(json!({"type": "object", "properties": {}})), None),
            "t()"
        );
    }

    #[test]
    fn params_accept_a_type_array_containing_object() {
        let input = json!({"type": ["null", "object"], "properties": {"a": {"type": "string"}}});
        assert_eq!(sig(Some(input), None), "t(a?: string)");
        assert_eq!(
            sig(Some(json!({"type": ["null", "string"]})), None),
            "t(...)"
        );
    }

    #[test]
    fn params_of_non_object_or_typeless_input_are_unreadable() {
        assert_eq!(sig(Some(json!({})), None), "t(...)");
        assert_eq!(sig(Some(json!(true)), None), "t(...)");
        assert_eq!(sig(Some(json!("not a schema")), None), "t(...)");
        assert_eq!(sig(Some(Value::Null), None), "t(...)");
        assert_eq!(sig(Some(json!({"properties": {"a": {}}})), None), "t(...)");
    }

    #[test]
    fn params_keep_declared_order_and_mark_optional_ones() {
        let input = json!({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"},"m":{"type":"null"}},"required":["a"]});
        assert_eq!(sig(Some(input), None), "t(z?: string, a: int, m?: null)");
    }

    #[test]
    fn required_that_is_not_a_string_array_marks_nothing_required() {
        let input = json!({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":"a"});
        assert_eq!(sig(Some(input), None), "t(a?: string, b?: string)");
        let input = json!({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":[1,"b"]});
        assert_eq!(sig(Some(input), None), "t(a?: string, b: string)");
    }

    #[test]
    fn defaults_show_only_when_their_compact_json_is_at_most_20_characters() {
        let render = |default: Value| {
            sig(
                Some(
                    json!({"type":"object","properties":{"d":{"type":"string","default": default}}}),
                ),
                None,
            )
        };
        assert_eq!(render(json!("abc")), r#"t(d?: string = "abc")"#);
        assert_eq!(render(json!(null)), "t(d?: string = null)");
        // 20 characters exactly, counted in code points: quotes + 18 × 'é'.
        assert_eq!(
            render(json!("é".repeat(18))),
            format!("t(d?: string = \"{}\")", "é".repeat(18))
        );
        assert_eq!(render(json!("é".repeat(19))), "t(d?: string)");
        assert_eq!(render(json!(["a", "b", "c", "d", "e"])), "t(d?: string)");
        assert_eq!(
            render(json!({"k": [1, 2]})),
            r#"t(d?: string = {"k":[1,2]})"#
        );
    }

    #[test]
    fn defaults_apply_to_required_parameters_and_inline_object_fields_too() {
        let input = json!({"type":"object","properties":{
            "n":{"type":"integer","default":5},
            "o":{"type":"object","properties":{"f":{"type":"boolean","default":false}}}
        },"required":["n"]});
        assert_eq!(
            sig(Some(input), None),
            "t(n: int = 5, o?: { f?: bool = false })"
        );
    }

    #[test]
    fn non_identifier_property_names_are_json_strings() {
        let input = json!({"type":"object","properties":{
            "x-id":{"type":"string"}, "_ok$1":{"type":"string"}, "1st":{"type":"string"},
            "":{"type":"string"}, "a b":{"type":"string"}, "q\"\n":{"type":"string"}, "é":{"type":"string"}
        },"required":["_ok$1"]});
        assert_eq!(
            sig(Some(input), None),
            r#"t("x-id"?: string, _ok$1: string, "1st"?: string, ""?: string, "a b"?: string, "q\"\n"?: string, "é"?: string)"#
        );
    }

    // --- Types ---

    #[test]
    fn primitive_types_use_short_names() {
        assert_eq!(param(json!({"type": "string"})), "t(p: string)");
        assert_eq!(param(json!({"type": "number"})), "t(p: number)");
        assert_eq!(param(json!({"type": "integer"})), "t(p: int)");
        assert_eq!(param(json!({"type": "boolean"})), "t(p: bool)");
        assert_eq!(param(json!({"type": "null"})), "t(p: null)");
    }

    #[test]
    fn enum_literals_are_compact_json_joined_by_bars() {
        assert_eq!(
            param(json!({"enum": ["a", 1, null, true, {"k": "v"}]})),
            r#"t(p: "a" | 1 | null | true | {"k":"v"})"#
        );
        // Enum wins over type.
        assert_eq!(
            param(json!({"type": "string", "enum": ["x"]})),
            r#"t(p: "x")"#
        );
    }

    #[test]
    fn more_than_five_enum_literals_end_with_an_ellipsis() {
        assert_eq!(
            param(json!({"enum": [1, 2, 3, 4, 5]})),
            "t(p: 1 | 2 | 3 | 4 | 5)"
        );
        assert_eq!(
            param(json!({"enum": [1, 2, 3, 4, 5, 6]})),
            "t(p: 1 | 2 | 3 | 4 | 5 | …)"
        );
    }

    #[test]
    fn long_literals_are_cut_to_40_characters() {
        let exactly_40 = "x".repeat(38);
        assert_eq!(
            param(json!({"enum": [exactly_40]})),
            format!("t(p: \"{exactly_40}\")")
        );
        let long = "y".repeat(100);
        assert_eq!(
            param(json!({"enum": [long, "z"]})),
            format!("t(p: \"{}… | \"z\")", "y".repeat(39))
        );
    }

    #[test]
    fn const_literals_are_never_cut() {
        // The 40-character cut of §L7.5 is for enum literals only.
        let long = "é".repeat(50);
        assert_eq!(param(json!({"const": long})), format!("t(p: \"{long}\")"));
        let object = json!({"const": {"k": "v".repeat(60), "n": [1, 2, 3]}});
        assert_eq!(
            param(object),
            format!("t(p: {{\"k\":\"{}\",\"n\":[1,2,3]}})", "v".repeat(60))
        );
    }

    #[test]
    fn unreadable_enum_renders_as_dots() {
        // "has `enum`" is the first row; an enum without literals cannot be read.
        assert_eq!(
            param(json!({"type": "string", "enum": {"not": "an array"}})),
            "t(p: ...)"
        );
        assert_eq!(param(json!({"type": "string", "enum": []})), "t(p: ...)");
        assert_eq!(param(json!({"enum": null})), "t(p: ...)");
    }

    #[test]
    fn const_renders_its_literal() {
        assert_eq!(param(json!({"const": "strict"})), r#"t(p: "strict")"#);
        assert_eq!(param(json!({"const": null})), "t(p: null)");
        assert_eq!(param(json!({"const": 3, "type": "string"})), "t(p: 3)");
    }

    #[test]
    fn composed_schemas_render_as_dots() {
        for key in ["anyOf", "oneOf", "allOf", "not", "$ref"] {
            let schema = json!({key: [{"type": "string"}], "type": "string"});
            assert_eq!(param(schema), "t(p: ...)", "{key}");
        }
        assert_eq!(
            sig(None, Some(json!({"anyOf": [{"type": "string"}]}))),
            "t() -> ..."
        );
    }

    #[test]
    fn arrays_render_items_then_brackets() {
        assert_eq!(
            param(json!({"type": "array", "items": {"type": "integer"}})),
            "t(p: int[])"
        );
        assert_eq!(param(json!({"type": "array"})), "t(p: unknown[])");
        assert_eq!(
            param(json!({"type": "array", "items": 3})),
            "t(p: unknown[])"
        );
        assert_eq!(
            param(json!({"type": "array", "items": [{"type": "string"}]})),
            "t(p: unknown[])"
        );
        assert_eq!(
            param(
                json!({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}})
            ),
            "t(p: {...}[])"
        );
    }

    #[test]
    fn arrays_nested_deeper_than_four_collapse() {
        let nest = |levels: usize| {
            let mut schema = json!({"type": "string"});
            for _ in 0..levels {
                schema = json!({"type": "array", "items": schema});
            }
            param(schema)
        };
        assert_eq!(nest(4), "t(p: string[][][][])");
        assert_eq!(nest(5), "t(p: ...[][][][][])");
        assert_eq!(nest(9), "t(p: ...[][][][][])");
    }

    #[test]
    fn objects_expand_only_as_a_parameter_or_a_root() {
        assert_eq!(
            param(
                json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}})
            ),
            "t(p: { a?: {...} })"
        );
        assert_eq!(param(json!({"type": "object"})), "t(p: {...})");
        assert_eq!(
            param(json!({"type": "object", "additionalProperties": false})),
            "t(p: {})"
        );
        assert_eq!(
            param(json!({"type": "object", "properties": {}})),
            "t(p: {})"
        );
        assert_eq!(
            param(
                json!({"type": "object", "properties": {"x": {"type": "object", "additionalProperties": false}}})
            ),
            "t(p: { x?: {...} })"
        );
    }

    #[test]
    fn type_arrays_render_each_member() {
        assert_eq!(
            param(json!({"type": ["string", "null"]})),
            "t(p: string | null)"
        );
        assert_eq!(
            param(json!({"type": ["array", "null"], "items": {"type": "number"}})),
            "t(p: number[] | null)"
        );
        assert_eq!(
            param(json!({"type": ["object", "null"], "properties": {"a": {"type": "string"}}})),
            "t(p: { a?: string } | null)"
        );
        assert_eq!(
            param(json!({"type": ["string", 7]})),
            "t(p: string | unknown)"
        );
        assert_eq!(param(json!({"type": []})), "t(p: unknown)");
    }

    #[test]
    fn type_arrays_render_each_distinct_type_once() {
        assert_eq!(
            param(json!({"type": ["string", "null", "string", "null"]})),
            "t(p: string | null)"
        );
        // Unrecognised names and non-strings all read as `unknown`, shown once.
        assert_eq!(
            param(json!({"type": ["string", 7, "bogus", null]})),
            "t(p: string | unknown)"
        );
        assert_eq!(
            param(json!({"type": ["array", "array"], "items": {"type": "integer"}})),
            "t(p: int[])"
        );
    }

    #[test]
    fn type_arrays_show_at_most_five_members() {
        assert_eq!(
            param(json!({"type": ["string", "number", "integer", "boolean", "null"]})),
            "t(p: string | number | int | bool | null)"
        );
        assert_eq!(
            param(json!({"type": ["string", "number", "integer", "boolean", "null", "object"]})),
            "t(p: string | number | int | bool | null | …)"
        );
        // Duplicates do not count towards the five.
        assert_eq!(
            param(
                json!({"type": ["string", "string", "number", "number", "null", "boolean", "integer"]})
            ),
            "t(p: string | number | null | bool | int)"
        );
    }

    #[test]
    fn anything_else_is_unknown() {
        assert_eq!(param(json!({})), "t(p: unknown)");
        assert_eq!(param(json!({"type": "date"})), "t(p: unknown)");
        assert_eq!(param(json!({"type": 5})), "t(p: unknown)");
        // Non-object schemas fall through to the catch-all row, wherever they appear.
        assert_eq!(param(json!(3)), "t(p: unknown)");
        assert_eq!(param(json!(true)), "t(p: unknown)");
        assert_eq!(param(Value::Null), "t(p: unknown)");
        assert_eq!(
            param(json!({"type": "array", "items": true})),
            "t(p: unknown[])"
        );
        assert_eq!(sig(None, Some(json!(true))), "t() -> unknown");
        assert_eq!(render_event_signature("e", Some(&json!("x"))), "e unknown");
    }

    // --- Output ---

    #[test]
    fn output_root_expands_objects_and_renders_other_types() {
        assert_eq!(
            sig(
                Some(json!({"type": "object", "properties": {}})),
                Some(
                    json!({"type":"object","properties":{"added":{"type":"integer"},"cart":{"type":"object"}},"required":["added"]})
                )
            ),
            "t() -> { added: int, cart?: {...} }"
        );
        assert_eq!(
            sig(
                None,
                Some(json!({"type": "array", "items": {"type": "string"}}))
            ),
            "t() -> string[]"
        );
        assert_eq!(sig(None, Some(json!({"type": "object"}))), "t() -> {...}");
        assert_eq!(
            sig(
                None,
                Some(json!({"type": "object", "additionalProperties": false}))
            ),
            "t() -> {}"
        );
        assert_eq!(sig(None, Some(Value::Null)), "t() -> unknown");
    }

    // --- Events ---

    #[test]
    fn event_signature_appends_the_payload_type() {
        let payload = json!({"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"]});
        assert_eq!(
            render_event_signature("checkout_completed", Some(&payload)),
            "checkout_completed { orderId: string }"
        );
        assert_eq!(
            render_event_signature("playground_ping", None),
            "playground_ping"
        );
        assert_eq!(
            render_event_signature("n", Some(&json!({"type": "number"}))),
            "n number"
        );
        assert_eq!(
            render_event_signature("n", Some(&json!({"type": "object"}))),
            "n {...}"
        );
    }

    // --- Summary ---

    #[test]
    fn summary_is_the_first_line_without_control_characters() {
        assert_eq!(
            summarize_description("Add an item to the cart.\nQuantities above 99 are rejected."),
            "Add an item to the cart."
        );
        assert_eq!(summarize_description("first\rsecond"), "first");
        assert_eq!(
            summarize_description("  a\tb\u{1b}[31mc\u{7f}d\u{85}e\u{9f}  \n"),
            "ab[31mcde"
        );
        assert_eq!(summarize_description("\nonly second line"), "");
        assert_eq!(summarize_description(""), "");
        // Non-control characters in the C1 neighbourhood survive.
        assert_eq!(summarize_description("\u{a0}x\u{a0}é"), "x\u{a0}é");
    }

    #[test]
    fn summary_is_cut_to_120_code_points_plus_an_ellipsis() {
        let exactly = "é".repeat(120);
        assert_eq!(summarize_description(&exactly), exactly);
        let long = "😀".repeat(4_000);
        let summary = summarize_description(&long);
        assert_eq!(summary.chars().count(), 121);
        assert_eq!(summary, format!("{}…", "😀".repeat(120)));
        // Trimming happens before the cut.
        let padded = format!("   {}   ", "a".repeat(121));
        assert_eq!(
            summarize_description(&padded),
            format!("{}…", "a".repeat(120))
        );
    }

    // --- Cost bounds ---

    /// `{"type": ["array" × n], "items": inner}`.
    fn array_union(n: usize, items: Value) -> Value {
        json!({"type": vec!["array"; n], "items": items})
    }

    #[test]
    fn repeated_array_members_do_not_multiply_the_output() {
        // Four levels of 64 `array` members: rendering every member re-rendered `items`, so
        // the output grew as 64^4 and the process aborted allocating gigabytes.
        let mut schema = json!({"type": "string"});
        for _ in 0..4 {
            schema = array_union(64, schema);
        }
        let rendered = param(schema);
        assert_eq!(rendered, "t(p: string[][][][])");
    }

    #[test]
    fn repeated_object_members_with_many_properties_stay_within_the_budget() {
        let mut properties = Map::new();
        for i in 0..2_000 {
            properties.insert(format!("field_{i}"), json!({"type": "string"}));
        }
        let output = json!({"type": vec!["object"; 2_000], "properties": properties});
        let rendered = sig(None, Some(output.clone()));
        assert!(rendered.chars().count() <= MAX_SIGNATURE_CHARS);
        assert!(rendered.starts_with("t() -> { field_0?: string, field_1?: string"));
        assert!(rendered.ends_with('…'), "{rendered}");
        let event = render_event_signature("e", Some(&output));
        assert!(event.chars().count() <= MAX_SIGNATURE_CHARS);
        assert!(event.ends_with('…'));
    }

    #[test]
    fn the_budget_cuts_long_parameter_lists_and_names() {
        let mut properties = Map::new();
        for i in 0..1_000 {
            properties.insert(format!("p{i}"), json!({"type": "integer"}));
        }
        let input = json!({"type": "object", "properties": properties});
        let rendered = sig(Some(input), Some(json!({"type": "string"})));
        assert_eq!(rendered.chars().count(), MAX_SIGNATURE_CHARS);
        assert!(rendered.ends_with('…'));
        assert!(!rendered.contains(" -> "));
        // One long property name, quoted, and one long const.
        let long_name = "-".repeat(10_000);
        let input =
            json!({"type": "object", "properties": {long_name: {"const": "x".repeat(10_000)}}});
        let rendered = sig(Some(input), None);
        assert_eq!(rendered.chars().count(), MAX_SIGNATURE_CHARS);
        assert!(rendered.starts_with("t(\"---"));
        // A huge tool name alone is cut the same way.
        let rendered = render_tool_signature(&"n".repeat(5_000), None, None);
        assert_eq!(rendered.chars().count(), MAX_SIGNATURE_CHARS);
        assert!(rendered.ends_with("n…"));
    }

    #[test]
    fn a_signature_of_exactly_the_budget_is_not_cut() {
        // Name + `()` exactly MAX_SIGNATURE_CHARS long.
        let name = "n".repeat(MAX_SIGNATURE_CHARS - 2);
        let rendered = render_tool_signature(&name, None, None);
        assert_eq!(rendered, format!("{name}()"));
        let name = "n".repeat(MAX_SIGNATURE_CHARS - 1);
        let rendered = render_tool_signature(&name, None, None);
        assert_eq!(rendered.chars().count(), MAX_SIGNATURE_CHARS);
        assert!(rendered.ends_with("n…"));
    }

    #[test]
    fn large_required_lists_are_read_once() {
        let required: Vec<String> = (0..5_000).map(|i| format!("r{i}")).collect();
        let input = json!({"type": "object", "properties": {"r4999": {"type": "string"}, "x": {"type": "string"}}, "required": required});
        assert_eq!(sig(Some(input), None), "t(r4999: string, x?: string)");
    }

    #[test]
    fn deeply_nested_schemas_render_without_exhausting_the_stack() {
        // Built by hand: `json!` and `clone` recurse and would overflow on this value.
        let mut schema = json!({"type": "string"});
        for _ in 0..50_000 {
            let mut properties = Map::new();
            properties.insert("a".to_owned(), schema);
            let mut object = Map::new();
            object.insert("type".to_owned(), json!("object"));
            object.insert("properties".to_owned(), Value::Object(properties));
            schema = Value::Object(object);
        }
        assert_eq!(
            render_tool_signature("t", Some(&schema), Some(&schema)),
            "t(a?: { a?: {...} }) -> { a?: {...} }"
        );
        assert_eq!(
            render_event_signature("e", Some(&schema)),
            "e { a?: {...} }"
        );
        // serde_json's Drop is recursive; take the value apart iteratively.
        let mut stack = vec![schema];
        while let Some(value) = stack.pop() {
            match value {
                Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
    }
}
