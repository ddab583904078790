use appduct_protocol::close::{self, CloseReason};
use serde_json::Value;

use super::common::{Report, load_array};

#[test]
fn terminal_close_codes() {
    let mut report = Report::new("close-codes.json");
    for case in load_array("close-codes.json") {
        let code = case["code"].as_u64().and_then(|c| u16::try_from(c).ok());
        let reason = case["reason"].as_str();
        let terminal = case["terminal"].as_bool();
        let label = format!("{:?}/{:?}", case["code"], case["reason"]);
        report.check(&label, terminal == Some(close::is_terminal(code)), || {
            format!("expected terminal={terminal:?}")
        });
        // Rows with a code the daemon itself sends must name a reason the table knows.
        if let (Some(code @ (1000 | 1001 | 1003 | 1008 | 1011)), Some(reason)) = (code, reason) {
            report.check(
                &label,
                CloseReason::from_parts(code, reason).is_some()
                    || !matches!(case.get("reason"), Some(Value::String(_))),
                || format!("reason {reason:?} with code {code} is not in the close table"),
            );
        }
    }
    report.finish();
}
