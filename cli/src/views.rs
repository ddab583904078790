//! Results of the daemon-backed commands as [`Success`] values: the JSON `data` each command
//! prints and its human rendering (05 §6–§9). Pure functions of the control-plane results, so
//! wiring a command is "make the request, pass the result here".

use appduct_protocol::control::{
    AppEventData, EventData, EventNotification, EventsListResult, EventsSinceResult,
    LinkCreateResult, PolicyDecision, RevokeResult, RevokedKind, SessionState, SessionSummary,
    StatusResult, ToolsCallResult, ToolsListEntry, ToolsListResult, Transport,
};
use appduct_protocol::signature::{
    render_event_signature, render_tool_signature, summarize_description,
};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::command::ToolsLs;
use crate::output::{Output, Success};
use crate::render::{self, Row, Section};

/// At most this many top-level groups are named in the `tools ls` footer (05 §7.1).
const FOOTER_GROUPS: usize = 10;

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// App-supplied JSON (results, schemas) as pretty human text, control characters escaped.
fn pretty(v: &Value) -> String {
    render::human_json(v, true)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

// ---------------------------------------------------------------------------------------------
// sessions
// ---------------------------------------------------------------------------------------------

/// `sessions ls` (05 §6.1): `data` is the array; human is the borderless table.
pub fn sessions_ls(sessions: &[SessionSummary], now: OffsetDateTime) -> Success {
    if sessions.is_empty() {
        return Success::new(
            json!([]),
            "No sessions. Run \"appduct sessions link\" to connect an app.\n",
        );
    }
    let mut rows = vec![
        ["ALIAS", "STATE", "DEVICE", "TOOLS", "AGE"]
            .map(String::from)
            .to_vec(),
    ];
    for s in sessions {
        let state = match (s.state, s.suspend_reason) {
            (SessionState::Active, _) => "active".to_owned(),
            (SessionState::Suspended, Some(reason)) => format!("suspended ({reason})"),
            (SessionState::Suspended, None) => "suspended".to_owned(),
        };
        let age = render::parse_instant(&s.claimed_at).map_or_else(
            || "-".to_owned(),
            |at| render::age(render::seconds_between(at, now)),
        );
        rows.push(vec![
            render::clean_line(&s.alias),
            state,
            device_text(s),
            s.tool_count.to_string(),
            age,
        ]);
    }
    Success::new(to_value(&sessions), render::table(&rows))
}

/// `manufacturer model (os)` with the parts that are known; `-` when none is. The parts come
/// from the app's claim, so they are cleaned (08 §4.13).
fn device_text(s: &SessionSummary) -> String {
    let d = &s.device;
    let part = |p: Option<&str>| p.map(render::clean_line).filter(|p| !p.is_empty());
    let name = [part(d.manufacturer.as_deref()), part(d.model.as_deref())]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    match (name.is_empty(), part(d.os.as_deref())) {
        (true, None) => "-".to_owned(),
        (true, Some(os)) => os,
        (false, None) => name,
        (false, Some(os)) => format!("{name} ({os})"),
    }
}

/// `sessions revoke` (05 §6.2).
pub fn sessions_revoke(r: &RevokeResult) -> Success {
    let human = match (r.revoked, r.alias.as_deref()) {
        (RevokedKind::Link, _) => format!("Discarded pending link {}.\n", r.session_id),
        (RevokedKind::Session, Some(alias)) => format!(
            "Revoked {} ({}).\n",
            render::clean_line(alias),
            r.session_id
        ),
        (RevokedKind::Session, None) => format!("Revoked {}.\n", r.session_id),
    };
    Success::new(to_value(r), human)
}

/// A delivery that ran for `sessions link --open` (05 §6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `android`, `ios-sim` or `ios-device`.
    pub target: String,
    /// The serial or UDID used.
    pub device: String,
}

/// `sessions link` for native targets, `--transport web` and no target (05 §6.3). `deep_link`
/// is the composed link (with `pin` only for the native transport).
pub fn link_created(
    link: &LinkCreateResult,
    deep_link: &str,
    delivery: Option<&Delivery>,
    now: OffsetDateTime,
) -> Success {
    let web = link.transport == Transport::Web;
    let mut data = Map::new();
    data.insert("sessionId".into(), json!(link.session_id));
    data.insert("transport".into(), to_value(&link.transport));
    data.insert("deepLink".into(), json!(deep_link));
    data.insert("endpoint".into(), to_value(&link.endpoint));
    data.insert("expiresAt".into(), json!(link.expires_at));
    if !web {
        data.insert("pin".into(), json!(link.pin));
    }
    if let Some(d) = delivery {
        data.insert("delivered".into(), json!(true));
        data.insert("target".into(), json!(d.target));
        data.insert("device".into(), json!(d.device));
    }
    let host = if link.endpoint.address.contains(':') {
        format!("[{}]", link.endpoint.address)
    } else {
        link.endpoint.address.clone()
    };
    let scheme = if web { "ws" } else { "wss" };
    let mut rows = vec![
        Row::field("Session", link.session_id.as_str()),
        Row::field("Deep link", deep_link),
        Row::field(
            "Endpoint",
            format!("{scheme}://{host}:{}", link.endpoint.port),
        ),
    ];
    if web {
        rows.push(Row::field("Transport", "web"));
    } else {
        rows.push(Row::field("Pin", link.pin.as_str()));
    }
    rows.push(Row::field("Expires", expires_text(link.expires_at, now)));
    if let Some(d) = delivery {
        rows.push(Row::field(
            "Delivered",
            format!("{} {}", d.target, d.device),
        ));
    }
    Success::new(
        Value::Object(data),
        render::sections(&[Section::new("Link created", rows)]),
    )
}

/// `sessions link --open web --url <url>` (05 §6.3): `url` is the page URL with the payload
/// fragment, `script` the console snippet.
pub fn web_link_created(
    session_id: &str,
    url: &str,
    script: &str,
    expires_at: u64,
    now: OffsetDateTime,
) -> Success {
    let data =
        json!({"sessionId": session_id, "url": url, "script": script, "expiresAt": expires_at});
    let mut human = render::sections(&[Section::new(
        "Web link created",
        vec![
            Row::field("Session", session_id),
            Row::field("URL", url),
            Row::field("Script", script),
            Row::field("Expires", expires_text(expires_at, now)),
        ],
    )]);
    human.push_str("Open the URL in the page's tab, or run the script in its console.\n");
    Success::new(data, human)
}

fn expires_text(expires_at: u64, now: OffsetDateTime) -> String {
    let at = i64::try_from(expires_at)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok());
    match at {
        Some(at) => format!("{} ({})", render::iso_seconds(at), render::until(at, now)),
        None => expires_at.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// tools
// ---------------------------------------------------------------------------------------------

fn entry_schema<'a>(entry: &'a ToolsListEntry, key: &str) -> Option<&'a Value> {
    entry.descriptor.get(key)
}

/// The signature of a listed tool (05 §7.5), as data (`--json`).
pub fn tool_signature(entry: &ToolsListEntry) -> String {
    render_tool_signature(
        entry.name(),
        entry_schema(entry, "input_schema"),
        entry_schema(entry, "output_schema"),
    )
}

/// The signature for human output: schema property names are app-supplied (08 §4.13).
fn human_signature(entry: &ToolsListEntry) -> String {
    render::clean_line(&tool_signature(entry))
}

fn describe_block(entry: &ToolsListEntry) -> String {
    let mut rows = vec![
        Row::field("Signature", human_signature(entry)),
        Row::field("Description", render::clean_text(entry.description())),
        Row::field("Policy", entry.policy.as_str()),
    ];
    if let Some(group) = &entry.group {
        rows.push(Row::field("Group", render::clean_line(group)));
    }
    if let Some(Value::Object(annotations)) = entry.descriptor.get("annotations") {
        let pairs: Vec<String> = annotations
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        rows.push(Row::field(
            "Annotations",
            render::clean_line(&pairs.join(", ")),
        ));
    }
    if let Some(timeout) = entry.descriptor.get("timeout_ms") {
        rows.push(Row::field("Timeout (ms)", timeout.to_string()));
    }
    for (label, key) in [
        ("Input schema", "input_schema"),
        ("Output schema", "output_schema"),
    ] {
        let text = entry_schema(entry, key).map_or_else(|| "(none)".to_owned(), pretty);
        rows.push(Row::block(label, text));
    }
    render::sections(&[Section::new(
        format!("Tool: {}", render::clean_line(entry.name())),
        rows,
    )])
}

/// `tools describe` (05 §7.2): the entry plus `signature`.
pub fn tools_describe(entry: &ToolsListEntry) -> Success {
    let mut data = match to_value(entry) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    data.insert("signature".into(), json!(tool_signature(entry)));
    Success::new(Value::Object(data), describe_block(entry))
}

/// `tools call` (05 §7.3): `data` is the tool's result verbatim; `meta.call` describes the call.
pub fn tools_call(name: &str, r: &ToolsCallResult) -> Success {
    let mut human = format!(
        "Result ({name} on {}, {} ms)\n",
        render::clean_line(&r.alias),
        r.duration_ms
    );
    human.push_str(&render::indent(&pretty(&r.result), 2));
    let mut success = Success::new(r.result.clone(), human);
    success.meta.insert(
        "call".into(),
        json!({"callId": r.call_id, "sessionId": r.session_id, "alias": r.alias, "durationMs": r.duration_ms}),
    );
    success
}

/// The page size a `tools ls` / `events ls` request used: the user's `--limit`, else 50 in
/// human mode and none under `--json` (05 §7.1).
pub fn effective_limit(given: Option<u64>, json: bool) -> Option<u64> {
    given.or((!json).then_some(crate::command::HUMAN_DEFAULT_LIMIT))
}

/// `tools ls` (05 §7.1), for a `tools.list` made with `req.params` (and the human default
/// limit when applicable). `alias` names the session in titles and messages.
pub fn tools_ls(req: &ToolsLs, result: &ToolsListResult, alias: &str) -> Success {
    if req.groups_only {
        return tools_groups(result, alias);
    }
    let p = &req.params;
    let mut data = Map::new();
    data.insert("tools".into(), to_value(&result.tools));
    data.insert("total".into(), json!(result.total));
    data.insert("hasMore".into(), json!(result.has_more));
    data.insert("groups".into(), to_value(&result.groups));
    if let Some(g) = &p.group {
        data.insert("group".into(), json!(g));
    }
    if let Some(f) = &p.filter {
        data.insert("filter".into(), json!(f));
    }
    if let Some(l) = p.limit {
        data.insert("limit".into(), json!(l));
    }
    if let Some(o) = p.offset {
        data.insert("offset".into(), json!(o));
    }
    Success::new(Value::Object(data), tools_ls_human(req, result, alias))
}

fn tools_ls_human(req: &ToolsLs, result: &ToolsListResult, alias: &str) -> String {
    let alias = &render::clean_line(alias);
    let p = &req.params;
    let filter = p.filter.as_deref().filter(|f| !f.is_empty());
    if result.tools.is_empty() {
        let line = if result.total > 0 {
            format!(
                "No tools at offset {}; {} matching tools in total.",
                result.offset, result.total
            )
        } else if let Some(f) = filter {
            let in_group = p
                .group
                .as_ref()
                .map(|g| format!(" in group \"{g}\""))
                .unwrap_or_default();
            format!("No tools match \"{f}\"{in_group} on {alias}.")
        } else if let Some(g) = &p.group {
            format!(
                "No tools in group \"{g}\" on {alias}. Run \"appduct tools ls --groups\" to list groups."
            )
        } else {
            format!("No tools registered on {alias}.")
        };
        return line + "\n";
    }
    let mut out = match &p.group {
        Some(g) => format!("Tools in group {g} on {alias}\n"),
        None => format!("Tools on {alias}\n"),
    };
    let has_groups = result.groups.iter().any(|g| g.group.is_some());
    if req.full {
        for entry in &result.tools {
            out.push('\n');
            out.push_str(&render::indent(&describe_block(entry), 2));
        }
    } else if p.group.is_some() || !has_groups {
        for entry in &result.tools {
            push_tool(&mut out, entry, 2);
        }
    } else {
        push_grouped(&mut out, result);
    }

    out.push('\n');
    let shown = result.tools.len() as u64;
    if shown < result.total {
        let mut footer = format!(
            "Showing {shown} of {} tools (offset {}). Narrow with --filter <text>",
            result.total, result.offset
        );
        if p.group.is_none() && has_groups {
            let top: Vec<String> = result
                .groups
                .iter()
                .filter_map(|g| g.group.as_deref().map(|name| (name, g.total)))
                .filter(|(name, _)| !name.contains('/'))
                .map(|(name, total)| format!("{} {total}", render::clean_line(name)))
                .collect();
            let mut list = top
                .iter()
                .take(FOOTER_GROUPS)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if top.len() > FOOTER_GROUPS {
                list.push_str(&format!(
                    ", … {} more; see --groups",
                    top.len() - FOOTER_GROUPS
                ));
            }
            footer.push_str(&format!(" or --group <name> (groups: {list})"));
        }
        if result.has_more {
            footer.push_str(&format!(
                ", or page with --offset {}",
                result.offset + shown
            ));
        }
        footer.push_str(".\n");
        out.push_str(&footer);
    }
    out.push_str("Run \"appduct tools describe <name>\" to see a tool's schemas.\n");
    out
}

/// Signature (plus a non-`allow` policy tag) at `indent`, summary 2 spaces further.
fn push_tool(out: &mut String, entry: &ToolsListEntry, indent: usize) {
    let pad = " ".repeat(indent);
    let tag = match entry.policy {
        PolicyDecision::Allow => String::new(),
        other => format!("  [{other}]"),
    };
    out.push_str(&format!("{pad}{}{tag}\n", human_signature(entry)));
    let summary = summarize_description(entry.description());
    if !summary.is_empty() {
        out.push_str(&format!("{pad}  {summary}\n"));
    }
}

/// The grouped layout: headings in the order of `groups` (tree order), `(ungrouped)` last;
/// headings with no tool on the page are left out.
fn push_grouped(out: &mut String, result: &ToolsListResult) {
    let tools_in = |group: Option<&str>| -> Vec<&ToolsListEntry> {
        result
            .tools
            .iter()
            .filter(|t| t.group.as_deref() == group)
            .collect()
    };
    let page_has_under = |top: &str| {
        result.tools.iter().any(|t| {
            t.group
                .as_deref()
                .is_some_and(|g| g == top || g.starts_with(&format!("{top}/")))
        })
    };
    for row in &result.groups {
        let Some(name) = row.group.as_deref() else {
            continue;
        };
        let heading = render::clean_line(name);
        if name.contains('/') {
            let tools = tools_in(Some(name));
            if !tools.is_empty() {
                out.push_str(&format!("    {heading}\n"));
                for t in tools {
                    push_tool(out, t, 6);
                }
            }
        } else if page_has_under(name) {
            out.push_str(&format!("  {heading}\n"));
            for t in tools_in(Some(name)) {
                push_tool(out, t, 4);
            }
        }
    }
    let ungrouped = tools_in(None);
    if !ungrouped.is_empty() {
        out.push_str("  (ungrouped)\n");
        for t in ungrouped {
            push_tool(out, t, 4);
        }
    }
}

/// `tools ls --groups`: `{groups, total}` and the group summary.
fn tools_groups(result: &ToolsListResult, alias: &str) -> Success {
    let data = json!({"groups": to_value(&result.groups), "total": result.total});
    let alias = render::clean_line(alias);
    if result.groups.is_empty() {
        return Success::new(data, format!("No tools registered on {alias}.\n"));
    }
    let labels: Vec<(usize, String, u64)> = result
        .groups
        .iter()
        .map(|g| match g.group.as_deref() {
            Some(name) if name.contains('/') => (4, render::clean_line(name), g.total),
            Some(name) => (2, render::clean_line(name), g.total),
            None => (2, "(ungrouped)".to_owned(), g.total),
        })
        .collect();
    let width = labels
        .iter()
        .map(|(indent, label, _)| indent + label.chars().count())
        .max()
        .unwrap_or(0)
        + 3;
    let mut out = format!("Groups on {alias}\n");
    for (indent, label, total) in labels {
        let head = format!("{}{label}", " ".repeat(indent));
        out.push_str(&format!("{head:<width$}{total}\n"));
    }
    out.push_str(&format!(
        "Total: {}\n",
        plural(result.total, "tool", "tools")
    ));
    Success::new(data, out)
}

// ---------------------------------------------------------------------------------------------
// events
// ---------------------------------------------------------------------------------------------

/// `events ls` (05 §8.1). `name`, `limit` and `offset` are what the user gave.
pub fn events_ls(
    result: &EventsListResult,
    alias: &str,
    name: Option<&str>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Success {
    let mut data = Map::new();
    data.insert("events".into(), to_value(&result.events));
    data.insert("total".into(), json!(result.total));
    data.insert("hasMore".into(), json!(result.has_more));
    if let Some(n) = name {
        data.insert("name".into(), json!(n));
    }
    if let Some(l) = limit {
        data.insert("limit".into(), json!(l));
    }
    if let Some(o) = offset {
        data.insert("offset".into(), json!(o));
    }

    let alias = render::clean_line(alias);
    let human = if result.events.is_empty() {
        if result.total > 0 {
            format!(
                "No events at offset {}; {} matching events in total.\n",
                result.offset, result.total
            )
        } else if let Some(n) = name {
            format!("No events match \"{n}\" on {alias}.\n")
        } else {
            format!("No events declared on {alias}.\n")
        }
    } else {
        let mut out = format!("Events on {alias}\n");
        for e in &result.events {
            out.push_str(&format!(
                "  {}\n",
                render::clean_line(&render_event_signature(&e.name, e.payload_schema.as_ref()))
            ));
            let summary = summarize_description(&e.description);
            if !summary.is_empty() {
                out.push_str(&format!("    {summary}\n"));
            }
        }
        if let Some(exact) = name.filter(|n| !n.contains('*'))
            && let Some(e) = result.events.iter().find(|e| e.name == exact)
        {
            let text = e
                .payload_schema
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), pretty);
            out.push_str("  Payload schema:\n");
            out.push_str(&render::indent(&text, 4));
        }
        let shown = result.events.len() as u64;
        if shown < result.total {
            out.push_str(&format!(
                "\nShowing {shown} of {} events (offset {}). Narrow with --name <glob>",
                result.total, result.offset
            ));
            if result.has_more {
                out.push_str(&format!(
                    ", or page with --offset {}",
                    result.offset + shown
                ));
            }
            out.push_str(".\n");
        }
        out
    };
    Success::new(Value::Object(data), human)
}

/// The stderr notice of `events tail` before the first event (05 §8.2).
pub fn events_tail_notice(alias: Option<&str>) -> String {
    match alias {
        Some(alias) => format!(
            "Listening for app events on {} (Ctrl-C to stop)…",
            render::clean_line(alias)
        ),
        None => "Listening for app events on all sessions (Ctrl-C to stop)…".to_owned(),
    }
}

/// One human line for an `app_event` (05 §8.2); `None` for other kinds.
/// `2026-11-30T09:12:03Z  pixel-8  checkout_completed  {"orderId":"A-17"}`.
pub fn event_line(n: &EventNotification, out: &Output) -> Option<String> {
    let EventData::AppEvent(data) = &n.data else {
        return None;
    };
    let at = render::iso_seconds_from_unix_ms(i64::try_from(n.ts).unwrap_or(i64::MAX))
        .unwrap_or_else(|| n.ts.to_string());
    // Alias, event name and payload are app-supplied (08 §4.13).
    let who = render::clean_line(
        n.alias
            .as_deref()
            .or(n.session_id.as_deref())
            .unwrap_or("-"),
    );
    let payload = match data {
        AppEventData::Full { payload, .. } => out.inline_json(payload),
        AppEventData::Truncated {
            payload_preview,
            payload_bytes,
            ..
        } => format!(
            "{}… ({payload_bytes} bytes, truncated)",
            render::escape_controls(payload_preview)
        ),
    };
    Some(format!(
        "{at}  {who}  {}  {payload}\n",
        render::clean_line(data.name())
    ))
}

/// `events since` (05 §8.3): one envelope with `{events, cursor, dropped, remaining}`; human
/// event lines and a dim continuation note. `selector` is the one the user gave.
pub fn events_since(r: &EventsSinceResult, selector: Option<&str>, out: &Output) -> Success {
    let mut human = String::new();
    for n in &r.events {
        if let Some(line) = event_line(n, out) {
            human.push_str(&line);
        }
    }
    let next = match selector {
        Some(sel) => format!("appduct events since {sel} {}", r.cursor),
        None => format!("appduct events since {}", r.cursor),
    };
    let paint = out.stdout_paint;
    human.push_str(&paint.dim(&format!(
        "cursor {} · dropped {} · remaining {} — next: {next}",
        r.cursor, r.dropped, r.remaining
    )));
    human.push('\n');
    if r.dropped > 0 {
        human.push_str(&paint.dim(&format!(
            "{} events were evicted before they were read.",
            r.dropped
        )));
        human.push('\n');
    }
    if r.remaining > 0 {
        human.push_str(&paint.dim(&format!(
            "{} more; run the next command to continue.",
            r.remaining
        )));
        human.push('\n');
    }
    Success::new(to_value(r), human)
}

// ---------------------------------------------------------------------------------------------
// daemon
// ---------------------------------------------------------------------------------------------

/// `daemon run` once the control socket accepts connections (05 §9.1).
pub fn daemon_running(pid: u32, version: &str, state_dir: &str, socket_path: &str) -> Success {
    Success::new(
        json!({"daemon": {"pid": pid, "version": version, "stateDir": state_dir, "socketPath": socket_path}}),
        format!("Daemon running (pid {pid}, state dir {state_dir}). Press Ctrl-C to stop.\n"),
    )
}

/// `daemon start` (05 §9.2); `spawned` when this invocation started it.
pub fn daemon_start(s: &StatusResult, spawned: bool) -> Success {
    let data = json!({"daemon": {
        "pid": s.pid, "version": s.version, "wssPort": s.wss_port, "webPort": s.web_port,
        "startedAt": s.started_at, "spawned": spawned,
    }});
    let verb = if spawned {
        "Daemon started"
    } else {
        "Daemon already running"
    };
    Success::new(
        data,
        format!("{verb} (pid {}, wss port {}).\n", s.pid, s.wss_port),
    )
}

/// How `daemon stop` stopped the daemon (05 §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMethod {
    Rpc,
    Sigterm,
}

/// `daemon stop` (05 §9.3).
pub fn daemon_stop(pid: u32, method: StopMethod) -> Success {
    let method = match method {
        StopMethod::Rpc => "rpc",
        StopMethod::Sigterm => "sigterm",
    };
    Success::new(
        json!({"daemon": {"ok": true, "method": method, "pid": pid}}),
        format!("Daemon stopped (pid {pid}).\n"),
    )
}

/// `daemon status` (05 §9.4): `sessions` reduced to `sessionCount`; `warning` (version drift)
/// when present.
pub fn daemon_status(s: &StatusResult, warning: Option<&str>, now: OffsetDateTime) -> Success {
    let mut daemon = Map::new();
    daemon.insert("version".into(), json!(s.version));
    daemon.insert("controlProtocol".into(), json!(s.control_protocol));
    daemon.insert("pid".into(), json!(s.pid));
    daemon.insert("startedAt".into(), json!(s.started_at));
    daemon.insert("stateDir".into(), json!(s.state_dir));
    daemon.insert("wssPort".into(), json!(s.wss_port));
    daemon.insert("webPort".into(), json!(s.web_port));
    daemon.insert("advertisedAddress".into(), to_value(&s.advertised_address));
    daemon.insert("pinnedKeys".into(), json!(s.pinned_keys));
    daemon.insert("sessionCount".into(), json!(s.sessions.len()));
    daemon.insert("pendingLinks".into(), json!(s.pending_links));
    daemon.insert("pendingCalls".into(), json!(s.pending_calls));
    let mut data = Map::new();
    data.insert("daemon".into(), Value::Object(daemon));
    data.insert("policy".into(), to_value(&s.policy));
    data.insert("audit".into(), to_value(&s.audit));
    data.insert("eventsLog".into(), to_value(&s.events_log));
    if let Some(w) = warning {
        data.insert("warning".into(), json!(w));
    }

    let started = match render::parse_instant(&s.started_at) {
        Some(at) => format!("{} ({})", render::iso_seconds(at), render::ago(at, now)),
        None => s.started_at.clone(),
    };
    let mut daemon_rows = vec![
        Row::field("Version", s.version.as_str()),
        Row::field("PID", s.pid.to_string()),
        Row::field("Started", started),
        Row::field("State dir", s.state_dir.as_str()),
        Row::field("WSS port", s.wss_port.to_string()),
        Row::field("Web port", s.web_port.to_string()),
        Row::field(
            "Address",
            format!(
                "{} ({})",
                s.advertised_address.address, s.advertised_address.source
            ),
        ),
    ];
    for pin in &s.pinned_keys {
        daemon_rows.push(Row::field("Pin", pin.as_str()));
    }
    daemon_rows.extend([
        Row::field("Sessions", s.sessions.len().to_string()),
        Row::field("Pending links", s.pending_links.to_string()),
        Row::field("Pending calls", s.pending_calls.to_string()),
    ]);
    let mut policy_rows = vec![
        Row::field("Default", s.policy.default.as_str()),
        Row::field("Destructive", s.policy.destructive.as_str()),
    ];
    for (key, decision) in &s.policy.tools {
        policy_rows.push(Row::field("Override", format!("{key} = {decision}")));
    }
    let mut audit_rows = vec![
        Row::field("Path", s.audit.path.as_str()),
        Row::field(
            "Retention",
            plural(u64::from(s.audit.retention_days), "day", "days"),
        ),
    ];
    match (s.audit.files, s.audit.bytes) {
        (Some(files), Some(bytes)) => {
            audit_rows.push(Row::field(
                "Files",
                format!("{files} ({})", render::byte_size(bytes)),
            ));
        }
        (Some(files), None) => audit_rows.push(Row::field("Files", files.to_string())),
        (None, _) => {}
    }
    audit_rows.extend([
        Row::field("Failed writes", s.audit.failed_writes.to_string()),
        Row::field("Failed prunes", s.audit.failed_prunes.to_string()),
    ]);
    let events_rows = vec![
        Row::field("Path", s.events_log.path.as_str()),
        Row::field("Failed writes", s.events_log.failed_writes.to_string()),
    ];
    let mut human = render::sections(&[
        Section::new("Daemon", daemon_rows),
        Section::new("Policy", policy_rows),
        Section::new("Audit", audit_rows),
        Section::new("Events log", events_rows),
    ]);
    if let Some(w) = warning {
        human.push_str(&format!("Warning: {w}\n"));
    }
    Success::new(Value::Object(data), human)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputFlags;
    use appduct_protocol::control::ToolsListParams;
    use time::macros::datetime;

    fn now() -> OffsetDateTime {
        datetime!(2026-11-30 11:12:03 UTC)
    }

    fn session(alias: &str, v: Value) -> SessionSummary {
        let mut base = json!({
            "sessionId": "q3VfZ0xkR2ptTnB4", "alias": alias, "state": "active",
            "transport": "native", "device": {},
            "createdAt": "2026-11-30T10:59:00.000Z", "claimedAt": "2026-11-30T11:00:03.000Z",
            "toolCount": 5, "eventCount": 0
        });
        if let (Some(b), Value::Object(extra)) = (base.as_object_mut(), v) {
            b.extend(extra);
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn sessions_table_and_empty_message() {
        let sessions = vec![
            session(
                "pixel-8",
                json!({"device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"}}),
            ),
            session(
                "iphone-15",
                json!({"state": "suspended", "suspendReason": "app_backgrounded",
                       "claimedAt": "2026-11-30T09:12:03Z", "toolCount": 3,
                       "device": {"manufacturer": "Apple", "model": "iPhone 15", "os": "iOS 18.1"}}),
            ),
            session("bare", json!({})),
        ];
        let s = sessions_ls(&sessions, now());
        let expected = "\
ALIAS      STATE                         DEVICE                       TOOLS  AGE
pixel-8    active                        Google Pixel 8 (Android 15)  5      12m
iphone-15  suspended (app_backgrounded)  Apple iPhone 15 (iOS 18.1)   3      2h
bare       active                        -                            5      12m
";
        assert_eq!(s.human, expected);
        assert_eq!(s.data.as_array().map(Vec::len), Some(3));
        let empty = sessions_ls(&[], now());
        assert_eq!(empty.data, json!([]));
        assert_eq!(
            empty.human,
            "No sessions. Run \"appduct sessions link\" to connect an app.\n"
        );
    }

    #[test]
    fn revoke_lines() {
        let r: RevokeResult = serde_json::from_value(json!({"ok": true, "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "revoked": "session"})).unwrap();
        assert_eq!(
            sessions_revoke(&r).human,
            "Revoked pixel-8 (q3VfZ0xkR2ptTnB4).\n"
        );
        let r: RevokeResult = serde_json::from_value(
            json!({"ok": true, "sessionId": "Zk3pQ0mX8sL1vB2n", "alias": null, "revoked": "link"}),
        )
        .unwrap();
        assert_eq!(
            sessions_revoke(&r).human,
            "Discarded pending link Zk3pQ0mX8sL1vB2n.\n"
        );
        assert_eq!(sessions_revoke(&r).data["alias"], Value::Null);
    }

    fn link(transport: &str, address: &str) -> LinkCreateResult {
        serde_json::from_value(json!({
            "sessionId": "Zk3pQ0mX8sL1vB2n", "transport": transport, "deepLinkPayload": "AgR",
            "endpoint": {"address": address, "port": 8443, "family": if address.contains(':') {6} else {4}},
            "expiresAt": 1_796_037_423u64, "pin": "sha256/47DE="
        }))
        .unwrap()
    }

    #[test]
    fn link_block_native_delivered() {
        let now = datetime!(2026-11-30 09:12:03 UTC);
        let expires = now.unix_timestamp() + 300;
        let mut l = link("native", "127.0.0.1");
        l.expires_at = u64::try_from(expires).unwrap();
        let d = Delivery {
            target: "android".into(),
            device: "emulator-5554".into(),
        };
        let s = link_created(&l, "myapp:///?appduct=AgR&pin=x", Some(&d), now);
        let expected = "\
Link created
  Session:    Zk3pQ0mX8sL1vB2n
  Deep link:  myapp:///?appduct=AgR&pin=x
  Endpoint:   wss://127.0.0.1:8443
  Pin:        sha256/47DE=
  Expires:    2026-11-30T09:17:03Z (in 5m)
  Delivered:  android emulator-5554
";
        assert_eq!(s.human, expected);
        assert_eq!(s.data["delivered"], true);
        assert_eq!(s.data["device"], "emulator-5554");
        assert_eq!(s.data["pin"], "sha256/47DE=");
    }

    #[test]
    fn link_block_web_transport_and_ipv6() {
        let s = link_created(
            &link("web", "127.0.0.1"),
            "myapp:///?appduct=AgR",
            None,
            now(),
        );
        assert!(
            s.human
                .contains("  Endpoint:   ws://127.0.0.1:8443\n  Transport:  web\n")
        );
        assert!(!s.human.contains("Pin:"));
        assert!(s.data.get("pin").is_none());
        assert!(s.data.get("delivered").is_none());
        let s = link_created(&link("native", "fd00::12"), "x", None, now());
        assert!(s.human.contains("wss://[fd00::12]:8443"));
        let w = web_link_created(
            "Zk3",
            "http://x/#appduct=AgR",
            "window.__APPDUCT__.connect(\"AgR\")",
            1,
            now(),
        );
        assert!(
            w.human.starts_with(
                "Web link created\n  Session:  Zk3\n  URL:      http://x/#appduct=AgR\n"
            )
        );
        assert!(
            w.human
                .ends_with("Open the URL in the page's tab, or run the script in its console.\n")
        );
        assert_eq!(w.data["url"], "http://x/#appduct=AgR");
    }

    fn entry(v: Value) -> ToolsListEntry {
        serde_json::from_value(v).unwrap()
    }

    fn add_item() -> ToolsListEntry {
        entry(json!({
            "name": "add_item",
            "description": "Add an item to the cart.\r\nQuantities above 99 are rejected by the app.\u{7}",
            "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}}, "required": ["sku"]},
            "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]},
            "annotations": {"idempotentHint": true, "readOnlyHint": false},
            "timeout_ms": 5000,
            "group": "checkout", "policy": "allow"
        }))
    }

    #[test]
    fn describe_block_matches_the_spec_layout() {
        let s = tools_describe(&add_item());
        let expected = "\
Tool: add_item
  Signature:     add_item(sku: string, qty?: int = 1) -> { total: number }
  Description:   Add an item to the cart.
                 Quantities above 99 are rejected by the app.
  Policy:        allow
  Group:         checkout
  Annotations:   idempotentHint=true, readOnlyHint=false
  Timeout (ms):  5000
  Input schema:
    {
      \"type\": \"object\",
      \"properties\": {
        \"sku\": {
          \"type\": \"string\"
        },
        \"qty\": {
          \"type\": \"integer\",
          \"default\": 1
        }
      },
      \"required\": [
        \"sku\"
      ]
    }
  Output schema:
    {
      \"type\": \"object\",
      \"properties\": {
        \"total\": {
          \"type\": \"number\"
        }
      },
      \"required\": [
        \"total\"
      ]
    }
";
        assert_eq!(s.human, expected);
        assert_eq!(
            s.data["signature"],
            "add_item(sku: string, qty?: int = 1) -> { total: number }"
        );
        assert_eq!(s.data["group"], "checkout");
        assert_eq!(s.data["policy"], "allow");

        let bare = tools_describe(&entry(
            json!({"name": "ping", "description": "Ping.", "group": null, "policy": "deny"}),
        ));
        assert_eq!(
            bare.human,
            "Tool: ping\n  Signature:    ping()\n  Description:  Ping.\n  Policy:       deny\n  Input schema:\n    (none)\n  Output schema:\n    (none)\n"
        );
    }

    #[test]
    fn call_result_and_meta() {
        let r: ToolsCallResult = serde_json::from_value(json!({"result": {"total": 3}, "callId": "cli-1", "sessionId": "q3V", "alias": "pixel-8", "durationMs": 41})).unwrap();
        let s = tools_call("sum", &r);
        assert_eq!(
            s.human,
            "Result (sum on pixel-8, 41 ms)\n  {\n    \"total\": 3\n  }\n"
        );
        assert_eq!(s.data, json!({"total": 3}));
        assert_eq!(s.meta["call"]["callId"], "cli-1");
        assert_eq!(s.meta["call"]["durationMs"], 41);
    }

    fn tool(name: &str, group: Option<&str>, policy: &str) -> Value {
        json!({"name": name, "description": format!("Does {name}."), "group": group, "policy": policy})
    }

    fn list(
        tools: Vec<Value>,
        total: u64,
        has_more: bool,
        offset: u64,
        groups: Value,
    ) -> ToolsListResult {
        serde_json::from_value(json!({"tools": tools, "total": total, "hasMore": has_more, "offset": offset, "groups": groups})).unwrap()
    }

    fn ls_req(params: ToolsListParams) -> ToolsLs {
        ToolsLs {
            params,
            groups_only: false,
            full: false,
        }
    }

    #[test]
    fn tools_ls_grouped_layout_with_footer() {
        let result = list(
            vec![
                json!({"name": "add_item", "description": "Add an item to the cart.", "group": "checkout", "policy": "allow",
                       "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}}, "required": ["sku"]},
                       "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}}),
                json!({"name": "pay", "description": "Charge the customer for the current cart.", "group": "checkout/payment", "policy": "prompt",
                       "input_schema": {"type": "object", "properties": {"method": {"enum": ["card", "cash"]}}, "required": ["method"]},
                       "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}),
                json!({"name": "sum", "description": "Add two numbers.", "group": null, "policy": "allow",
                       "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
                       "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}}),
            ],
            30,
            true,
            0,
            json!([{"group": "checkout", "total": 8}, {"group": "checkout/payment", "total": 3},
                   {"group": "counter", "total": 2}, {"group": "diagnostics", "total": 3}, {"group": null, "total": 14}]),
        );
        let s = tools_ls(
            &ls_req(ToolsListParams::default().with_limit(Some(3))),
            &result,
            "pixel-8",
        );
        let expected = "\
Tools on pixel-8
  checkout
    add_item(sku: string, qty?: int = 1) -> { total: number }
      Add an item to the cart.
    checkout/payment
      pay(method: \"card\" | \"cash\") -> { ok: bool }  [prompt]
        Charge the customer for the current cart.
  (ungrouped)
    sum(a: number, b: number) -> { total: number }
      Add two numbers.

Showing 3 of 30 tools (offset 0). Narrow with --filter <text> or --group <name> (groups: checkout 8, counter 2, diagnostics 3), or page with --offset 3.
Run \"appduct tools describe <name>\" to see a tool's schemas.
";
        assert_eq!(s.human, expected);
        assert_eq!(s.data["limit"], 3);
        assert!(
            s.data.get("offset").is_none(),
            "only inputs the user gave are echoed"
        );
        assert!(s.data.get("filter").is_none());
    }

    #[test]
    fn tools_ls_flat_layout_without_footer() {
        let result = list(
            vec![tool("a", None, "allow"), tool("b", None, "deny")],
            2,
            false,
            0,
            json!([{"group": null, "total": 2}]),
        );
        let s = tools_ls(&ls_req(ToolsListParams::default()), &result, "p");
        assert_eq!(
            s.human,
            "Tools on p\n  a()\n    Does a.\n  b()  [deny]\n    Does b.\n\nRun \"appduct tools describe <name>\" to see a tool's schemas.\n"
        );
        // --group: flat, title names the group, no group hint in the footer.
        let result = list(
            vec![tool("a", Some("g/x"), "allow")],
            2,
            true,
            0,
            json!([{"group": "g", "total": 2}, {"group": "g/x", "total": 2}]),
        );
        let s = tools_ls(
            &ls_req(
                ToolsListParams::default()
                    .with_group(Some("g".into()))
                    .with_limit(Some(1)),
            ),
            &result,
            "p",
        );
        assert_eq!(
            s.human,
            "Tools in group g on p\n  a()\n    Does a.\n\nShowing 1 of 2 tools (offset 0). Narrow with --filter <text>, or page with --offset 1.\nRun \"appduct tools describe <name>\" to see a tool's schemas.\n"
        );
    }

    #[test]
    fn tools_ls_footer_caps_the_group_list() {
        let groups: Vec<Value> = (0..12)
            .map(|i| json!({"group": format!("g{i:02}"), "total": 1}))
            .collect();
        let result = list(
            vec![tool("a", Some("g00"), "allow")],
            12,
            false,
            11,
            Value::Array(groups),
        );
        let s = tools_ls(
            &ls_req(ToolsListParams::default().with_offset(Some(11))),
            &result,
            "p",
        );
        assert!(s.human.contains("(groups: g00 1, g01 1, g02 1, g03 1, g04 1, g05 1, g06 1, g07 1, g08 1, g09 1, … 2 more; see --groups)."), "{}", s.human);
        assert!(!s.human.contains("--offset 12"));
    }

    #[test]
    fn tools_ls_empty_messages() {
        let empty = |total, offset| list(vec![], total, false, offset, json!([]));
        let req = |group: Option<&str>, filter: Option<&str>| {
            ls_req(
                ToolsListParams::default()
                    .with_group(group.map(str::to_owned))
                    .with_filter(filter.map(str::to_owned)),
            )
        };
        assert_eq!(
            tools_ls(&req(None, None), &empty(0, 0), "pixel-8").human,
            "No tools registered on pixel-8.\n"
        );
        assert_eq!(
            tools_ls(&req(Some("checkout"), None), &empty(0, 0), "pixel-8").human,
            "No tools in group \"checkout\" on pixel-8. Run \"appduct tools ls --groups\" to list groups.\n"
        );
        assert_eq!(
            tools_ls(&req(None, Some("zz")), &empty(0, 0), "pixel-8").human,
            "No tools match \"zz\" on pixel-8.\n"
        );
        assert_eq!(
            tools_ls(&req(Some("g"), Some("zz")), &empty(0, 0), "pixel-8").human,
            "No tools match \"zz\" in group \"g\" on pixel-8.\n"
        );
        assert_eq!(
            tools_ls(&req(None, None), &empty(7, 50), "pixel-8").human,
            "No tools at offset 50; 7 matching tools in total.\n"
        );
    }

    #[test]
    fn tools_ls_groups_summary() {
        let result = list(
            vec![],
            11,
            false,
            0,
            json!([{"group": "checkout", "total": 8}, {"group": "checkout/payment", "total": 3}, {"group": "counter", "total": 2}, {"group": null, "total": 1}]),
        );
        let req = ToolsLs {
            params: ToolsListParams::default(),
            groups_only: true,
            full: false,
        };
        let s = tools_ls(&req, &result, "pixel-8");
        let expected = "\
Groups on pixel-8
  checkout             8
    checkout/payment   3
  counter              2
  (ungrouped)          1
Total: 11 tools
";
        assert_eq!(s.human, expected);
        assert_eq!(
            s.data.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["groups", "total"]
        );
    }

    #[test]
    fn tools_ls_full_renders_describe_blocks() {
        let result = list(
            vec![tool("a", None, "allow")],
            1,
            false,
            0,
            json!([{"group": null, "total": 1}]),
        );
        let req = ToolsLs {
            params: ToolsListParams::default(),
            groups_only: false,
            full: true,
        };
        let s = tools_ls(&req, &result, "p");
        assert!(
            s.human
                .starts_with("Tools on p\n\n  Tool: a\n    Signature:"),
            "{}",
            s.human
        );
    }

    fn out() -> Output {
        Output::plain(OutputFlags::default())
    }

    fn app_event(payload: Value) -> EventNotification {
        serde_json::from_value(json!({"kind": "app_event", "sessionId": "q3V", "alias": "pixel-8", "ts": 1796029923120u64, "seq": 4, "data": payload})).unwrap()
    }

    #[test]
    fn event_lines_full_and_truncated() {
        let n = app_event(
            json!({"name": "checkout_completed", "payload": {"orderId": "A-17"}, "ts": 1}),
        );
        assert_eq!(
            event_line(&n, &out()).unwrap(),
            "2026-11-30T09:12:03Z  pixel-8  checkout_completed  {\"orderId\":\"A-17\"}\n"
        );
        let n = app_event(
            json!({"name": "big", "payloadPreview": "{\"a\":\"xx", "truncated": true, "payloadBytes": 9000, "ts": 1}),
        );
        assert_eq!(
            event_line(&n, &out()).unwrap(),
            "2026-11-30T09:12:03Z  pixel-8  big  {\"a\":\"xx… (9000 bytes, truncated)\n"
        );
        assert_eq!(
            events_tail_notice(None),
            "Listening for app events on all sessions (Ctrl-C to stop)…"
        );
    }

    #[test]
    fn events_since_note() {
        let n = app_event(json!({"name": "e", "payload": null, "ts": 1}));
        let r = EventsSinceResult::new(vec![n], 42, 2, 5);
        let s = events_since(&r, Some("pixel-8"), &out());
        assert_eq!(
            s.human,
            "2026-11-30T09:12:03Z  pixel-8  e  null\ncursor 42 · dropped 2 · remaining 5 — next: appduct events since pixel-8 42\n2 events were evicted before they were read.\n5 more; run the next command to continue.\n"
        );
        assert_eq!(s.data["cursor"], 42);
        let r = EventsSinceResult::new(vec![], 0, 0, 0);
        assert_eq!(
            events_since(&r, None, &out()).human,
            "cursor 0 · dropped 0 · remaining 0 — next: appduct events since 0\n"
        );
    }

    #[test]
    fn events_ls_rendering() {
        let r: EventsListResult = serde_json::from_value(json!({"events": [
            {"name": "checkout_completed", "description": "Sent after payment.", "payload_schema": {"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}}
        ], "total": 2, "hasMore": true, "offset": 0})).unwrap();
        let s = events_ls(&r, "pixel-8", Some("checkout_completed"), Some(1), None);
        assert!(s.human.starts_with("Events on pixel-8\n  checkout_completed { orderId: string }\n    Sent after payment.\n  Payload schema:\n    {\n"), "{}", s.human);
        assert!(s.human.ends_with("\nShowing 1 of 2 events (offset 0). Narrow with --name <glob>, or page with --offset 1.\n"), "{}", s.human);
        assert_eq!(s.data["name"], "checkout_completed");
        assert!(s.data.get("offset").is_none());
        let empty: EventsListResult = serde_json::from_value(
            json!({"events": [], "total": 0, "hasMore": false, "offset": 0}),
        )
        .unwrap();
        assert_eq!(
            events_ls(&empty, "p", None, None, None).human,
            "No events declared on p.\n"
        );
        assert_eq!(
            events_ls(&empty, "p", Some("x*"), None, None).human,
            "No events match \"x*\" on p.\n"
        );
    }

    fn status() -> StatusResult {
        serde_json::from_value(json!({
            "version": "0.3.1", "controlProtocol": 1, "pid": 48211, "startedAt": "2026-11-30T09:12:03.120Z",
            "stateDir": "/home/ana/.appduct", "wssPort": 8443, "webPort": 53120,
            "advertisedAddress": {"address": "192.168.1.20", "family": 4, "source": "detected"},
            "pinnedKeys": ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="],
            "sessions": [], "pendingLinks": 0, "pendingCalls": 0,
            "policy": {"default": "allow", "destructive": "prompt", "tools": {"pixel-8/reset_counter": "deny"}},
            "audit": {"path": "/home/ana/.appduct/audit", "failedWrites": 0, "failedPrunes": 0, "retentionDays": 30, "files": 3, "bytes": 18234},
            "eventsLog": {"path": "/home/ana/.appduct/events.log", "failedWrites": 0}
        }))
        .unwrap()
    }

    #[test]
    fn daemon_status_matches_the_spec_layout() {
        let s = daemon_status(&status(), None, datetime!(2026-11-30 11:12:04 UTC));
        let expected = "\
Daemon
  Version:        0.3.1
  PID:            48211
  Started:        2026-11-30T09:12:03Z (2h ago)
  State dir:      /home/ana/.appduct
  WSS port:       8443
  Web port:       53120
  Address:        192.168.1.20 (detected)
  Pin:            sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=
  Sessions:       0
  Pending links:  0
  Pending calls:  0
Policy
  Default:        allow
  Destructive:    prompt
  Override:       pixel-8/reset_counter = deny
Audit
  Path:           /home/ana/.appduct/audit
  Retention:      30 days
  Files:          3 (17.8 KiB)
  Failed writes:  0
  Failed prunes:  0
Events log
  Path:           /home/ana/.appduct/events.log
  Failed writes:  0
";
        assert_eq!(s.human, expected);
        assert_eq!(s.data["daemon"]["sessionCount"], 0);
        assert!(s.data["daemon"].get("sessions").is_none());
        assert_eq!(s.data["audit"]["files"], 3);
        assert!(s.data.get("warning").is_none());
    }

    #[test]
    fn daemon_status_omits_unreported_fields_and_shows_warnings() {
        let mut st = status();
        st.audit.files = None;
        st.audit.bytes = None;
        let s = daemon_status(&st, Some("daemon 0.3.0 is older than appduct 0.3.1"), now());
        assert!(!s.human.contains("Files:"));
        assert!(s.data["audit"].get("files").is_none());
        assert!(
            s.human
                .ends_with("Warning: daemon 0.3.0 is older than appduct 0.3.1\n")
        );
        assert_eq!(
            s.data["warning"],
            "daemon 0.3.0 is older than appduct 0.3.1"
        );
    }

    #[test]
    fn daemon_start_stop_run() {
        let s = daemon_start(&status(), true);
        assert_eq!(s.human, "Daemon started (pid 48211, wss port 8443).\n");
        assert_eq!(s.data["daemon"]["spawned"], true);
        assert_eq!(
            daemon_start(&status(), false).human,
            "Daemon already running (pid 48211, wss port 8443).\n"
        );
        let s = daemon_stop(48211, StopMethod::Sigterm);
        assert_eq!(
            s.data,
            json!({"daemon": {"ok": true, "method": "sigterm", "pid": 48211}})
        );
        assert_eq!(s.human, "Daemon stopped (pid 48211).\n");
        let s = daemon_running(
            48211,
            "0.3.1",
            "/home/ana/.appduct",
            "/home/ana/.appduct/daemon.sock",
        );
        assert_eq!(
            s.data.to_string(),
            r#"{"daemon":{"pid":48211,"version":"0.3.1","stateDir":"/home/ana/.appduct","socketPath":"/home/ana/.appduct/daemon.sock"}}"#
        );
        assert_eq!(
            s.human,
            "Daemon running (pid 48211, state dir /home/ana/.appduct). Press Ctrl-C to stop.\n"
        );
    }

    #[test]
    fn human_limit_default() {
        assert_eq!(effective_limit(None, false), Some(50));
        assert_eq!(effective_limit(None, true), None);
        assert_eq!(effective_limit(Some(3), true), Some(3));
    }

    // 08 §4.13: app-supplied strings reach human output without control characters.

    const HOSTILE: &str = "x\u{1b}]0;t\u{7} \u{1b}[2J \u{9b}2J\u{7f}";

    /// No control character but the line breaks of the layout.
    fn assert_clean(text: &str) {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
    }

    #[test]
    fn tool_results_print_with_control_characters_escaped() {
        let r: ToolsCallResult = serde_json::from_value(json!({"result": {"text": HOSTILE}, "callId": "cli-1", "sessionId": "q3V", "alias": "pixel\u{9b}-8", "durationMs": 41})).unwrap();
        let s = tools_call("evil", &r);
        assert_clean(&s.human);
        assert!(
            s.human.starts_with("Result (evil on pixel-8, 41 ms)\n"),
            "{}",
            s.human
        );
        assert!(s.human.contains(r"\u009b2J\u007f"), "{}", s.human);
        assert_eq!(s.data, json!({"text": HOSTILE}));
    }

    #[test]
    fn describe_and_ls_clean_descriptions_groups_annotations_and_schemas() {
        let e = entry(json!({
            "name": "evil", "description": format!("{HOSTILE}\nline two"),
            "input_schema": {"type": "object", "properties": {HOSTILE: {"type": "string"}}},
            "annotations": {"title": HOSTILE},
            "group": format!("g{HOSTILE}"), "policy": "allow"
        }));
        let s = tools_describe(&e);
        assert_clean(&s.human);
        assert!(s.human.contains("x]0;t [2J 2J\n"), "{}", s.human);
        assert!(s.human.contains("title=x]0;t [2J 2J"), "{}", s.human);
        assert_eq!(s.data["signature"], json!(tool_signature(&e)));
        let result = list(
            vec![to_value(&e)],
            1,
            false,
            0,
            json!([{"group": format!("g{HOSTILE}"), "total": 1}]),
        );
        for full in [false, true] {
            let mut req = ls_req(ToolsListParams::default());
            req.full = full;
            assert_clean(&tools_ls(&req, &result, "pixel\u{1b}-8").human);
        }
        let mut req = ls_req(ToolsListParams::default());
        req.groups_only = true;
        assert_clean(&tools_ls(&req, &result, "pixel-8").human);
    }

    #[test]
    fn event_lines_and_lists_clean_alias_name_payload_and_preview() {
        let mut n =
            app_event(json!({"name": format!("e{HOSTILE}"), "payload": {"x": HOSTILE}, "ts": 1}));
        n.alias = Some(format!("pixel{HOSTILE}"));
        for o in [
            out(),
            Output::plain(OutputFlags {
                pretty: true,
                ..OutputFlags::default()
            }),
        ] {
            let line = event_line(&n, &o).unwrap();
            assert_clean(&line);
            assert!(line.contains(r"\u001b[2J \u009b2J"), "{line}");
        }
        let n = app_event(
            json!({"name": "big", "payloadPreview": format!("{{\"x\":\"{HOSTILE}"), "truncated": true, "payloadBytes": 9000, "ts": 1}),
        );
        let line = event_line(&n, &out()).unwrap();
        assert_clean(&line);
        assert!(line.contains(r"\u009b2J\u007f… (9000 bytes"), "{line}");
        let r: EventsListResult = serde_json::from_value(json!({"events": [
            {"name": "e", "description": HOSTILE, "payload_schema": {"type": "object", "properties": {HOSTILE: {"type": "string"}}}}
        ], "total": 1, "hasMore": false, "offset": 0})).unwrap();
        assert_clean(&events_ls(&r, "pixel\u{9b}-8", Some("e"), None, None).human);
        assert_clean(&events_tail_notice(Some(HOSTILE)));
    }

    #[test]
    fn sessions_table_and_revoke_clean_aliases_and_device_fields() {
        let s = session(
            "pixel\u{9b}-8",
            json!({"device": {"manufacturer": HOSTILE, "model": "Pixel\u{7}8", "os": HOSTILE}}),
        );
        let table = sessions_ls(&[s], now()).human;
        assert_clean(&table);
        assert!(table.contains("pixel-8"), "{table}");
        assert!(table.contains("Pixel8 (x]0;t [2J 2J)"), "{table}");
        let r: RevokeResult = serde_json::from_value(
            json!({"ok": true, "sessionId": "q3V", "alias": HOSTILE, "revoked": "session"}),
        )
        .unwrap();
        assert_clean(&sessions_revoke(&r).human);
    }
}
