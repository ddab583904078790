//! Target `control_line`: the control plane's line framer, message classifier and method
//! validation (§C2, §C3.1, §C5): [`LineBuffer`], [`parse_incoming`], [`ControlRequest::parse`],
//! and the client's [`parse_server_message`] on the daemon's replies.
//!
//! Input: byte 0 picks the line cap (`>= 0x80`: the daemon's 1 MiB cap, else `8 × byte`),
//! byte 1 the read size (`1 + byte % 64`), the rest is the byte stream a client sends.
//! Seeds start with two printable bytes (`"z7"`: cap 976, reads of 56 bytes).
//! Invariants:
//! - the framer yields exactly the lines (and the overflow) of a one-pass reference split,
//!   whatever the read sizes, and never holds more than the cap (+ one `\r`) of an unfinished
//!   line between reads;
//! - a request or notification re-serialises to a line that classifies the same;
//! - every reply the daemon would write (invalid message, unknown method, bad params) has the
//!   code §C4.1 gives it, names the parameter on `-32602`, is one line, is bounded by the
//!   input, and reads back unchanged through the client's parser;
//! - validated params re-serialise (as a client sends them) to params that validate equal.

use appduct_protocol::control::{ControlRequest, METHODS};
use appduct_protocol::jsonrpc::{
    Incoming, LineBuffer, RequestId, Response, ServerMessage, codes, parse_incoming,
    parse_server_message, to_line,
};
use appduct_protocol::limits::CONTROL_LINE_CAP_BYTES;
use serde::Serialize;
use serde_json::Value;

/// A reply may quote parts of the request (unknown keys, the method name) a few times over,
/// but never more than this multiple of the line plus a constant. The worst case is a method
/// name of DEL characters: one byte each on the wire, `\u{7f}` in the Rust-escaped message
/// (seven bytes as JSON) plus one byte in `details.method`.
const REPLY_GROWTH: usize = 8;
const REPLY_SLACK: usize = 4096;

#[derive(Debug, PartialEq)]
enum Item {
    Line(Vec<u8>),
    Overflow,
}

pub fn run(data: &[u8]) {
    let [cap_byte, read_byte, stream @ ..] = data else {
        return;
    };
    let cap = if *cap_byte >= 0x80 {
        CONTROL_LINE_CAP_BYTES
    } else {
        usize::from(*cap_byte) * 8
    };
    let read_size = 1 + usize::from(*read_byte % 64);

    let framed = frame(stream, cap, read_size);
    assert_eq!(
        framed,
        reference(stream, cap),
        "LineBuffer differs from the reference split"
    );
    for item in &framed {
        if let Item::Line(line) = item {
            check_line(line);
        }
    }
}

/// The lines the daemon's framer yields for `stream` read `read_size` bytes at a time.
fn frame(stream: &[u8], cap: usize, read_size: usize) -> Vec<Item> {
    let mut buffer = LineBuffer::new(cap);
    let mut out = Vec::new();
    for read in stream.chunks(read_size) {
        buffer.push(read);
        loop {
            match buffer.next_line() {
                None => break,
                Some(Ok(line)) => {
                    assert!(line.len() <= cap, "a line over the cap came out");
                    out.push(Item::Line(line));
                }
                Some(Err(overflow)) => {
                    assert_eq!(overflow.cap, cap);
                    out.push(Item::Overflow);
                    return out;
                }
            }
        }
        assert!(
            buffer.pending() <= cap.saturating_add(1),
            "{} bytes pending with a cap of {cap}",
            buffer.pending()
        );
    }
    out
}

/// The lines of `stream` in one pass: split on `\n`, drop one `\r` before it, skip empty
/// lines; the first line (or unfinished tail) longer than the cap is an overflow that ends it.
fn reference(stream: &[u8], cap: usize) -> Vec<Item> {
    let mut out = Vec::new();
    let mut parts: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    let tail = parts.pop().unwrap_or_default();
    for part in parts {
        let line = part.strip_suffix(b"\r").unwrap_or(part);
        if line.len() > cap {
            out.push(Item::Overflow);
            return out;
        }
        if !line.is_empty() {
            out.push(Item::Line(line.to_vec()));
        }
    }
    // An unfinished line may still end in `\r\n`, so its last `\r` does not count yet.
    if tail.len() > cap.saturating_add(usize::from(tail.last() == Some(&b'\r'))) {
        out.push(Item::Overflow);
    }
    out
}

fn check_line(line: &[u8]) {
    // Whatever the daemon makes of a line, the client side must cope with the same bytes.
    let _ = parse_server_message(line);

    match parse_incoming(line) {
        // A line of one `\r` (sent as `\r\r\n`): the classifier drops that `\r` too.
        Incoming::Empty => assert_eq!(line, b"\r", "a non-empty line classified as empty"),
        Incoming::Invalid(response) => {
            let Err(error) = &response.outcome else {
                panic!("an invalid message answered with a result");
            };
            assert!(
                [codes::PARSE_ERROR, codes::INVALID_REQUEST].contains(&error.code),
                "invalid message answered with code {}",
                error.code
            );
            check_reply(&response, line);
        }
        Incoming::Notification(notification) => {
            let again = reclassify(&notification);
            assert_eq!(again, Incoming::Notification(notification));
        }
        Incoming::Request(request) => {
            let again = reclassify(&request);
            assert_eq!(again, Incoming::Request(request.clone()));
            check_request(request.id, &request.method, request.params.as_ref(), line);
        }
    }
}

/// A message serialised as the peer would send it, then classified again.
fn reclassify<T: Serialize>(message: &T) -> Incoming {
    let line = to_line(message).unwrap_or_else(|e| panic!("serialising a message: {e}"));
    parse_incoming(line.strip_suffix(b"\n").unwrap_or(&line))
}

fn check_request(id: RequestId, method: &str, params: Option<&Value>, line: &[u8]) {
    match ControlRequest::parse(method, params) {
        Ok(request) => {
            assert_eq!(request.method(), method);
            let resent = params_of(&request);
            let again = ControlRequest::parse(method, Some(&resent))
                .unwrap_or_else(|e| panic!("re-sent params of {method} are refused: {e}"));
            assert_eq!(
                again, request,
                "re-sent params of {method} validate differently"
            );
        }
        Err(error) => {
            let known = METHODS.contains(&method);
            if known {
                assert_eq!(error.code, codes::INVALID_PARAMS, "{method}: {error}");
                let param = error
                    .details()
                    .and_then(|d| d.get("param"))
                    .and_then(Value::as_str);
                assert!(param.is_some(), "-32602 without details.param: {error}");
            } else {
                assert_eq!(error.code, codes::METHOD_NOT_FOUND, "{method}: {error}");
            }
            check_reply(&Response::error(Some(id), error), line);
        }
    }
}

/// A reply is one bounded line that the client reads back unchanged.
fn check_reply(response: &Response, line: &[u8]) {
    let bytes = to_line(response).unwrap_or_else(|e| panic!("serialising a reply: {e}"));
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    assert!(!body.contains(&b'\n'), "a reply spans several lines");
    assert!(
        body.len() <= REPLY_GROWTH * line.len() + REPLY_SLACK,
        "a {}-byte line got a {}-byte reply",
        line.len(),
        body.len()
    );
    match parse_server_message(body) {
        Ok(ServerMessage::Response(read)) => assert_eq!(&read, response, "reply read back differs"),
        other => panic!("the client cannot read the daemon's reply: {other:?}"),
    }
    if let Err(error) = &response.outcome {
        assert!(
            !error.message.is_empty(),
            "an error reply without a message"
        );
    }
}

/// The params a client would send for a validated request.
fn params_of(request: &ControlRequest) -> Value {
    fn json<T: Serialize>(params: &T) -> Value {
        serde_json::to_value(params).unwrap_or_else(|e| panic!("serialising params: {e}"))
    }
    match request {
        ControlRequest::DaemonHello(p) => json(p),
        ControlRequest::DaemonStatus(p)
        | ControlRequest::DaemonShutdown(p)
        | ControlRequest::SessionsList(p)
        | ControlRequest::ApprovalsList(p)
        | ControlRequest::GrantsList(p)
        | ControlRequest::CallsList(p)
        | ControlRequest::PolicyList(p)
        | ControlRequest::DaemonReload(p) => json(p),
        ControlRequest::PolicySet(p) => json(p),
        ControlRequest::PolicyReset(p) => json(p),
        ControlRequest::ApprovalsChallenge(p) => json(p),
        ControlRequest::ApprovalsDecide(p) => json(p),
        ControlRequest::GrantsRevoke(p) => json(p),
        ControlRequest::LinkCreate(p) => json(p),
        ControlRequest::ConsentCreate(p) => json(p),
        ControlRequest::ConsentTake(p) => json(p),
        ControlRequest::SessionsDescribe(p)
        | ControlRequest::SessionsRevoke(p)
        | ControlRequest::SessionsRelease(p) => json(p),
        ControlRequest::SessionsLease(p) => json(p),
        ControlRequest::ToolsResult(p) => json(p),
        ControlRequest::ToolsList(p) => json(p),
        ControlRequest::ToolsCall(p) => json(p),
        ControlRequest::ToolsCancel(p) => json(p),
        ControlRequest::EventsList(p) => json(p),
        ControlRequest::EventsSubscribe(p) => json(p),
        ControlRequest::EventsSince(p) => json(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Item {
        Item::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn the_reference_split_follows_the_framing_rules() {
        assert_eq!(reference(b"a\r\n\nbc\r", 2), vec![line("a")]);
        assert_eq!(reference(b"a\r\n\nbc\n", 2), vec![line("a"), line("bc")]);
        assert_eq!(reference(b"ab\r\r\nx", 2), vec![Item::Overflow]);
        assert_eq!(reference(b"x\nabcd", 3), vec![line("x"), Item::Overflow]);
        assert_eq!(reference(b"abc\r", 3), vec![]);
    }

    #[test]
    fn the_framer_matches_the_reference_for_every_read_size() {
        let stream = b"{\"a\":1}\r\n\r\n\n{\"b\":2}\nxyzxyzxyz\r";
        for cap in [0, 1, 7, 9, 64] {
            for read_size in 1..=stream.len() {
                assert_eq!(frame(stream, cap, read_size), reference(stream, cap));
            }
        }
    }

    #[test]
    fn a_seed_with_every_method_passes() {
        let mut data = b"z7".to_vec();
        for method in METHODS {
            data.extend_from_slice(
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#).as_bytes(),
            );
            data.push(b'\n');
        }
        run(&data);
    }

    #[test]
    #[should_panic(expected = "reply")]
    fn an_oversized_reply_is_caught() {
        let error = appduct_protocol::jsonrpc::ErrorObject::invalid_request("x".repeat(10_000));
        check_reply(&Response::error(None, error), b"{}");
    }
}
