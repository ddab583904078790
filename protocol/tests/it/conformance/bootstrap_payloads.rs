//! `bootstrap-payloads.json` (§D15): `bootstrap::decode` equals `expected` (or fails when it
//! is `null`), and for valid cases encoding the expected view reproduces `base64url` exactly.

use appduct_protocol::bootstrap::{self, BootstrapPayload, Decoded};
use serde_json::Value;

use super::common::{Report, load_array, name_of};

#[test]
fn bootstrap_payloads() {
    let mut report = Report::new("bootstrap-payloads.json");
    for case in load_array("bootstrap-payloads.json") {
        let name = name_of(&case);
        let Some(text) = case.get("base64url").and_then(Value::as_str) else {
            report.check(&name, false, || "no base64url string".into());
            continue;
        };
        let got = bootstrap::decode(text);
        match case.get("expected") {
            Some(Value::Null) => {
                report.check(&name, got.is_err(), || {
                    format!(
                        "decoded a payload the vector rejects: {:?}",
                        got.map(|p| p.decoded())
                    )
                });
            }
            Some(expected) => {
                let got_json = got
                    .as_ref()
                    .ok()
                    .and_then(|p| serde_json::to_value(p.decoded()).ok());
                report.check(&name, got_json.as_ref() == Some(expected), || {
                    format!(
                        "decode: expected {expected}, got {got_json:?} ({:?})",
                        got.as_ref().err()
                    )
                });
                // Re-encode both what we decoded and the vector's own view, independently.
                let reencoded = got.as_ref().ok().map(BootstrapPayload::encode);
                report.check(&name, reencoded == Some(Ok(text.to_owned())), || {
                    format!("encode(decode(x)) gave {reencoded:?}")
                });
                let from_view = serde_json::from_value::<Decoded>(expected.clone())
                    .ok()
                    .and_then(|view| BootstrapPayload::try_from(&view).ok())
                    .map(|p| p.encode());
                report.check(&name, from_view == Some(Ok(text.to_owned())), || {
                    format!("encode(expected) gave {from_view:?}")
                });
            }
            None => report.check(&name, false, || "no expected field".into()),
        }
    }
    report.finish();
}
