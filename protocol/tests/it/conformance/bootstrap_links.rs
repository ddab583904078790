//! `bootstrap-links.json` (§D15): `link::parse`, which does not check expiry, yields the
//! `base64url` of payload entry `payloadIndex` and the expected pin (absent for `null`).

use appduct_protocol::link;
use serde_json::Value;

use super::common::{Report, load_array, name_of};

#[test]
fn bootstrap_links() {
    let payloads = load_array("bootstrap-payloads.json");
    let mut report = Report::new("bootstrap-links.json");
    for case in load_array("bootstrap-links.json") {
        let name = name_of(&case);
        let url = case.get("url").and_then(Value::as_str).unwrap_or_default();
        let expected = &case["expected"];
        let want_payload = expected["payloadIndex"]
            .as_u64()
            .and_then(|i| payloads.get(usize::try_from(i).ok()?))
            .and_then(|p| p["base64url"].as_str());
        let want_pin = expected["pin"].as_str();
        let parsed = link::parse(url);
        let got_payload = parsed.as_ref().ok().map(|p| p.payload.as_str());
        report.check(
            &name,
            want_payload.is_some() && got_payload == want_payload,
            || {
                format!(
                    "payload: expected {want_payload:?}, got {got_payload:?} ({:?})",
                    parsed.as_ref().err()
                )
            },
        );
        let got_pin = parsed
            .as_ref()
            .ok()
            .and_then(|p| p.pin.as_ref().map(|p| p.as_str()));
        report.check(&name, parsed.is_ok() && got_pin == want_pin, || {
            format!("pin: expected {want_pin:?}, got {got_pin:?}")
        });
        // The decoded payload is the one the link's raw value encodes, and handle_url agrees.
        let consistent = parsed
            .as_ref()
            .is_ok_and(|p| p.decoded.encode().ok().as_deref() == Some(p.payload.as_str()));
        report.check(&name, consistent && link::handle_url(url), || {
            "decoded payload does not re-encode to the raw value, or handle_url is false".into()
        });
    }
    report.finish();
}
