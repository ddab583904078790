//! Property tests of the device frames (§D7): every frame survives encode → decode, the
//! decoders never panic, the lone-surrogate sanitizer never changes valid JSON's meaning, and
//! every frame the encoders write or the decoders accept fits its schema in docs/schemas/.

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::collections::HashSet;

use appduct_protocol::descriptor::{Annotations, EventDescriptor, Schema, ToolDescriptor};
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, DeviceInfo, EventDelta, EventFrame, EventRegistryDelta,
    EventRegistrySnapshot, Phase, SessionAck, SessionClaim, SessionResume, ToolCall,
    ToolCallProgress, ToolCancel, ToolDelta, ToolError, ToolErrorBody, ToolErrorType,
    ToolRegistryDelta, ToolRegistrySnapshot, ToolResult, check_outgoing_size, decode_app_message,
    decode_app_value, decode_daemon_message, decode_daemon_value, sanitize_lone_surrogates,
};
use appduct_protocol::limits::MAX_SAFE_INTEGER;
use appduct_protocol::schema;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Text of `min..max` arbitrary characters (control and astral ones included).
fn text(min: usize, max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), min..max).prop_map(String::from_iter)
}

/// Numbers whose text form reads back exactly: integers, and decimals with at most three
/// places (serde_json's default float parser is exact for these).
fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<i32>().prop_filter_map("finite", |i| Number::from_f64(f64::from(i) / 1000.0)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        text(0, 12).prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            json_object(inner).prop_map(Value::Object),
        ]
    })
}

fn json_object(values: impl Strategy<Value = Value>) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((text(0, 6), values), 0..4).prop_map(|kv| kv.into_iter().collect())
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    json_object(json_value())
}

fn schema() -> impl Strategy<Value = Schema> {
    object().prop_map(Schema::from)
}

fn identifier() -> impl Strategy<Value = String> {
    text(1, 40)
}

fn tool_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,64}"
}

fn tool_descriptor() -> impl Strategy<Value = ToolDescriptor> {
    let annotations = (
        any::<Option<bool>>(),
        any::<Option<bool>>(),
        any::<Option<bool>>(),
    )
        .prop_map(|(r, d, i)| {
            Annotations::default()
                .with_read_only_hint(r)
                .with_destructive_hint(d)
                .with_idempotent_hint(i)
        });
    (
        tool_name(),
        text(1, 30),
        prop::option::of(schema()),
        prop::option::of(schema()),
        prop::option::of(annotations),
        prop::option::of(1..=MAX_SAFE_INTEGER),
        prop::option::of("[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?"),
    )
        .prop_map(
            |(name, description, input_schema, output_schema, annotations, timeout_ms, group)| {
                ToolDescriptor::new(name, description)
                    .with_input_schema(input_schema)
                    .with_output_schema(output_schema)
                    .with_annotations(annotations)
                    .with_timeout_ms(timeout_ms)
                    .with_group(group)
            },
        )
}

fn event_descriptor() -> impl Strategy<Value = EventDescriptor> {
    (text(1, 30), text(1, 30), prop::option::of(schema())).prop_map(
        |(name, description, payload_schema)| {
            EventDescriptor::new(name, description).with_payload_schema(payload_schema)
        },
    )
}

/// Keeps the first entry of each name, as a snapshot requires unique names.
fn unique_by_name<T>(items: Vec<T>, name: impl Fn(&T) -> &str) -> Vec<T> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|t| seen.insert(name(t).to_owned()))
        .collect()
}

fn app_frame() -> impl Strategy<Value = AppFrame> {
    let device = (
        prop::option::of(text(0, 20)),
        prop::option::of(text(0, 20)),
        prop::option::of(text(0, 20)),
    )
        .prop_map(|(manufacturer, model, os)| {
            DeviceInfo::default()
                .with_manufacturer(manufacturer)
                .with_model(model)
                .with_os(os)
        });
    let error_type = prop::sample::select(ToolErrorType::ALL.to_vec());
    let ts = prop_oneof![
        (0..=MAX_SAFE_INTEGER).prop_map(Number::from),
        any::<u32>().prop_filter_map("finite", |i| Number::from_f64(f64::from(i) / 1000.0)),
    ];
    prop_oneof![
        (identifier(), identifier(), device).prop_map(|(session_id, token, device)| {
            AppFrame::SessionClaim(SessionClaim::new(session_id, token).with_device(device))
        }),
        (identifier(), identifier()).prop_map(|(session_id, resume_token)| {
            AppFrame::SessionResume(SessionResume::new(session_id, resume_token))
        }),
        (identifier(), prop::collection::vec(tool_descriptor(), 0..4)).prop_map(
            |(session_id, tools)| {
                AppFrame::ToolRegistrySnapshot(ToolRegistrySnapshot::new(
                    session_id,
                    unique_by_name(tools, |t| &t.name),
                ))
            }
        ),
        (
            identifier(),
            prop_oneof![
                tool_descriptor().prop_map(ToolDelta::Upsert),
                text(1, 30).prop_map(|name| ToolDelta::Remove { name }),
            ]
        )
            .prop_map(|(session_id, change)| {
                AppFrame::ToolRegistryDelta(ToolRegistryDelta::new(session_id, change))
            }),
        (
            identifier(),
            prop::collection::vec(event_descriptor(), 0..4)
        )
            .prop_map(|(session_id, events)| {
                AppFrame::EventRegistrySnapshot(EventRegistrySnapshot::new(
                    session_id,
                    unique_by_name(events, |e| &e.name),
                ))
            }),
        (
            identifier(),
            prop_oneof![
                event_descriptor().prop_map(EventDelta::Upsert),
                text(1, 30).prop_map(|name| EventDelta::Remove { name }),
            ]
        )
            .prop_map(|(session_id, change)| {
                AppFrame::EventRegistryDelta(EventRegistryDelta::new(session_id, change))
            }),
        (identifier(), identifier(), json_value()).prop_map(|(session_id, id, result)| {
            AppFrame::ToolResult(ToolResult::new(session_id, id, result))
        }),
        (
            identifier(),
            identifier(),
            error_type,
            text(0, 30),
            prop::option::of(json_value())
        )
            .prop_map(|(session_id, id, error_type, message, details)| {
                AppFrame::ToolError(ToolError::new(
                    session_id,
                    id,
                    ToolErrorBody::new(error_type, message).with_details(details),
                ))
            }),
        (
            identifier(),
            identifier(),
            prop::option::of(number()),
            prop::option::of(text(0, 30))
        )
            .prop_map(|(session_id, id, progress, message)| {
                AppFrame::ToolCallProgress(
                    ToolCallProgress::new(session_id, id)
                        .with_progress(progress)
                        .with_message(message),
                )
            }),
        (
            identifier(),
            text(1, 30),
            prop::option::of(json_value()),
            ts
        )
            .prop_map(|(session_id, name, payload, ts)| {
                AppFrame::Event(EventFrame::new(session_id, name, ts).with_payload(payload))
            }),
    ]
}

fn daemon_frame() -> impl Strategy<Value = DaemonFrame> {
    prop_oneof![
        (
            identifier(),
            text(0, 20),
            identifier(),
            0..=MAX_SAFE_INTEGER,
            0..=MAX_SAFE_INTEGER,
            any::<bool>()
        )
            .prop_map(
                |(
                    session_id,
                    alias,
                    resume_token,
                    keepalive_interval_s,
                    grace_s,
                    event_registry,
                )| {
                    DaemonFrame::SessionAck(
                        SessionAck::new(
                            session_id,
                            alias,
                            resume_token,
                            keepalive_interval_s,
                            grace_s,
                        )
                        .with_event_registry(event_registry),
                    )
                }
            ),
        (identifier(), identifier(), text(0, 20), object()).prop_map(
            |(session_id, id, name, args)| {
                DaemonFrame::ToolCall(ToolCall::new(session_id, id, name, args))
            }
        ),
        (identifier(), identifier(), text(1, 30)).prop_map(|(session_id, id, reason)| {
            DaemonFrame::ToolCancel(ToolCancel::new(session_id, id, reason))
        }),
    ]
}

const FRAME_TYPES: &[&str] = &[
    "session_claim",
    "session_resume",
    "session_ack",
    "tool_registry_snapshot",
    "tool_registry_delta",
    "event_registry_snapshot",
    "event_registry_delta",
    "tool_call",
    "tool_result",
    "tool_error",
    "tool_call_progress",
    "tool_cancel",
    "event",
    "unknown",
];

const FIELD_NAMES: &[&str] = &[
    "session_id",
    "protocol_version",
    "token",
    "resume_token",
    "device_model",
    "tools",
    "events",
    "operation",
    "tool",
    "event",
    "name",
    "id",
    "result",
    "error",
    "progress",
    "message",
    "payload",
    "ts",
    "args",
    "reason",
    "status",
    "alias",
    "grace_s",
];

/// Objects shaped like frames: a known (or unknown) `type` and known field names holding
/// arbitrary values, so the guards get past their first checks.
fn frame_like_value() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(FRAME_TYPES),
        prop::collection::vec((prop::sample::select(FIELD_NAMES), json_value()), 0..8),
    )
        .prop_map(|(ty, fields)| {
            let mut m = Map::new();
            m.insert("type".into(), Value::from(ty));
            for (k, v) in fields {
                m.insert(k.to_owned(), v);
            }
            Value::Object(m)
        })
}

/// The phase an app frame is decoded in.
fn phase_for(frame: &AppFrame) -> Phase<'_> {
    match frame {
        AppFrame::SessionClaim(_) | AppFrame::SessionResume(_) => Phase::PreAck,
        other => Phase::Acked {
            session_id: other.session_id(),
        },
    }
}

/// JSON string text the way `JSON.stringify` escapes it with every non-ASCII unit as `\uXXXX`
/// (lone surrogates included), upper or lower case hex by `upper`.
fn js_string_literal(units: &[u16], upper: bool) -> String {
    let mut out = String::from("\"");
    for &u in units {
        match u {
            0x22 => out.push_str("\\\""),
            0x5C => out.push_str("\\\\"),
            0x20..=0x7E => out.push(char::from(u as u8)),
            _ if upper => out.push_str(&format!("\\u{u:04X}")),
            _ => out.push_str(&format!("\\u{u:04x}")),
        }
    }
    out.push('"');
    out
}

/// Text dense in backslashes and surrogate-looking hex, so its JSON form is full of `\\ud800`
/// (an escaped backslash, then literal text) that the sanitizer must not read as an escape.
fn escape_heavy_text() -> impl Strategy<Value = String> {
    let pieces = vec![
        "\\",
        "\\u",
        "ud800",
        "uDBFF",
        "udc00",
        "uDFFF",
        "d8",
        "00",
        "x",
        "\"",
        "\u{1F600}",
    ];
    prop::collection::vec(prop::sample::select(pieces), 0..12).prop_map(|p| p.concat())
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn every_app_frame_survives_encode_then_decode(frame in app_frame()) {
        let text = frame.encode();
        prop_assert!(check_outgoing_size(&text).is_ok());
        let decoded = decode_app_message(&text, phase_for(&frame));
        prop_assert_eq!(decoded.as_ref(), Ok(&frame), "{}", text);
        prop_assert_eq!(decoded.unwrap().encode(), text);
    }

    #[test]
    fn every_daemon_frame_survives_encode_then_decode(frame in daemon_frame()) {
        let text = frame.encode();
        let decoded = decode_daemon_message(&text);
        prop_assert_eq!(decoded, Ok(Some(frame)), "{}", text);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_text(s in any::<String>()) {
        let _ = decode_app_message(&s, Phase::PreAck);
        let _ = decode_app_message(&s, Phase::Acked { session_id: "s" });
        let _ = decode_daemon_message(&s);
    }

    #[test]
    fn decoders_never_panic_on_json_like_text(s in r#"[{}\[\]":,\\ u0-9a-fA-Fdnrtl]{0,64}"#) {
        let _ = decode_app_message(&s, Phase::PreAck);
        let _ = decode_app_message(&s, Phase::Acked { session_id: "s" });
        let _ = decode_daemon_message(&s);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_values(v in json_value()) {
        let _ = decode_app_value(&v, Phase::PreAck);
        let _ = decode_app_value(&v, Phase::Acked { session_id: "s" });
        let _ = decode_daemon_value(&v);
    }

    /// Whatever a decoder accepts encodes to a frame it accepts again unchanged.
    #[test]
    fn accepted_frame_like_values_are_stable(v in frame_like_value(), acked in any::<bool>()) {
        let phase = if acked {
            Phase::Acked { session_id: v["session_id"].as_str().unwrap_or("s") }
        } else {
            Phase::PreAck
        };
        if let Ok(frame) = decode_app_value(&v, phase) {
            prop_assert_eq!(decode_app_message(&frame.encode(), phase), Ok(frame));
        }
        if let Ok(Some(frame)) = decode_daemon_value(&v) {
            prop_assert_eq!(decode_daemon_message(&frame.encode()), Ok(Some(frame)));
        }
    }

    /// The hand-kept frame schemas of docs/schemas/ (issue #25) admit every frame the encoders
    /// write ...
    #[test]
    fn every_encoded_frame_fits_its_schema(app in app_frame(), daemon in daemon_frame()) {
        let s = schema::app_frame(app.type_name()).unwrap();
        let checked = crate::schemas::validate(&s, &app.to_value());
        prop_assert!(checked.is_ok(), "{}: {:?}", app.encode(), checked);
        let s = schema::daemon_frame(daemon.type_name()).unwrap();
        let checked = crate::schemas::validate(&s, &daemon.to_value());
        prop_assert!(checked.is_ok(), "{}: {:?}", daemon.encode(), checked);
    }

    /// ... and every frame-like value the decoders accept, unknown fields included.
    #[test]
    fn accepted_frame_like_values_fit_their_schema(v in frame_like_value(), acked in any::<bool>()) {
        let phase = if acked {
            Phase::Acked { session_id: v["session_id"].as_str().unwrap_or("s") }
        } else {
            Phase::PreAck
        };
        if let Ok(frame) = decode_app_value(&v, phase) {
            let checked = crate::schemas::validate(&schema::app_frame(frame.type_name()).unwrap(), &v);
            prop_assert!(checked.is_ok(), "{}: {:?}", v, checked);
        }
        // Daemon frame schemas describe what the daemon writes (the app-side decoder is
        // lenient: a missing `args` reads as `{}`), so the re-encoding is checked.
        if let Ok(Some(frame)) = decode_daemon_value(&v) {
            let checked = crate::schemas::validate(
                &schema::daemon_frame(frame.type_name()).unwrap(),
                &frame.to_value(),
            );
            prop_assert!(checked.is_ok(), "{}: {:?}", v, checked);
        }
    }

    #[test]
    fn sanitizer_leaves_serialised_json_untouched(v in json_value()) {
        let text = v.to_string();
        prop_assert!(matches!(sanitize_lone_surrogates(&text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn sanitizer_leaves_escape_heavy_strings_untouched(s in escape_heavy_text()) {
        // serde_json escapes every backslash, so `\ud800`-looking text is literal and must stay.
        let text = Value::String(s.clone()).to_string();
        prop_assert!(matches!(sanitize_lone_surrogates(&text), Cow::Borrowed(t) if t == text));
        let back: Value = serde_json::from_str(&sanitize_lone_surrogates(&text)).unwrap();
        prop_assert_eq!(back, Value::String(s));
    }

    #[test]
    fn sanitizer_keeps_paired_escapes(s in text(0, 24), upper in any::<bool>()) {
        let units: Vec<u16> = s.encode_utf16().collect();
        let literal = js_string_literal(&units, upper);
        prop_assert!(matches!(sanitize_lone_surrogates(&literal), Cow::Borrowed(t) if t == literal));
        let back: Value = serde_json::from_str(&literal).unwrap();
        prop_assert_eq!(back, Value::String(s));
    }

    /// Any UTF-16 string a JavaScript app can stringify reads as its lossy conversion: each
    /// unpaired surrogate becomes one U+FFFD, so every UTF-16 length is unchanged.
    #[test]
    fn lone_surrogates_read_as_utf16_lossy(
        units in prop::collection::vec(
            prop_oneof![
                0xD800u16..=0xDFFF,
                prop::sample::select(b"\\ud8Dc0".map(u16::from).to_vec()),
                any::<u16>(),
            ],
            0..24,
        ),
        upper in any::<bool>(),
    ) {
        let literal = js_string_literal(&units, upper);
        let read: Value = serde_json::from_str(&sanitize_lone_surrogates(&literal)).unwrap();
        let want = String::from_utf16_lossy(&units);
        prop_assert_eq!(want.encode_utf16().count(), units.len());
        prop_assert_eq!(read, Value::String(want));
    }
}
