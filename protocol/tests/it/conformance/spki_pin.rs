use appduct_protocol::pin::SpkiPin;
use base64::Engine as _;

use super::common::{Report, load};

#[test]
fn spki_pin_matches_expected() {
    let v = load("spki-pin.json");
    let der = v["certificateDerBase64"].as_str().unwrap_or_default();
    let expected = v["expectedPin"].as_str().unwrap_or_default();
    let der = base64::engine::general_purpose::STANDARD
        .decode(der)
        .unwrap_or_default();
    let mut report = Report::new("spki-pin.json");
    let got = SpkiPin::from_certificate_der(&der);
    report.check(
        "certificateDerBase64",
        got.as_ref().map(SpkiPin::as_str) == Ok(expected),
        || format!("expected {expected}, got {got:?}"),
    );
    report.finish();
}
