//! `appduct tools ls [selector]` (§L7.1).

use appduct_protocol::control::is_valid_group;
use appduct_protocol::control::{
    PolicyDecision, ToolsList, ToolsListEntry, ToolsListParams, ToolsListResult,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits::MAX_TOOLS_FILTER_LEN;
use appduct_protocol::signature::summarize_description;
use clap::Args;
use serde_json::{Map, Value, json};

use super::{describe_block, describe_session, human_signature};
use crate::commands::args::{
    SelectorArgs, effective_limit, non_negative_int, opt, optional_selector, positive_int,
};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::{self, plural, to_value};

/// At most this many top-level groups are named in the `tools ls` footer (§L7.1).
const FOOTER_GROUPS: usize = 10;

#[derive(Debug, Args)]
pub struct ToolsLsArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Only tools in this group (1 or 2 "/"-separated segments)
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Show the group summary only
    #[arg(long, conflicts_with_all = ["group", "filter", "limit", "offset", "full"])]
    pub groups: bool,
    /// Case-insensitive substring of name or description (at most 256 characters)
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// At most this many tools (human default 50)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<String>,
    /// Skip this many tools
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub offset: Option<String>,
    /// Show a describe block per tool
    #[arg(long)]
    pub full: bool,
}

/// `tools ls` (§L7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsLs {
    /// What the user gave; `limit` stays `None` when not given (the human default of 50 is
    /// applied by the renderer, JSON has no default).
    pub params: ToolsListParams,
    /// `--groups`: the group summary only.
    pub groups_only: bool,
    pub full: bool,
}

pub fn validate(a: ToolsLsArgs) -> Result<ToolsLs, CliError> {
    let selector = optional_selector("tools ls", a.selector.positionals)?;
    let group = match a.group {
        Some(g) if g.is_empty() => return Err(CliError::usage("--group requires a value")),
        Some(g) if !is_valid_group(&g) => {
            return Err(CliError::usage(format!(
                "--group must be 1 or 2 \"/\"-separated segments of [a-zA-Z0-9_-]{{1,64}} (got \"{g}\")"
            )));
        }
        other => other,
    };
    if let Some(f) = &a.filter
        && f.chars().count() > MAX_TOOLS_FILTER_LEN
    {
        return Err(CliError::usage(format!(
            "--filter must be at most {MAX_TOOLS_FILTER_LEN} characters"
        )));
    }
    Ok(ToolsLs {
        params: ToolsListParams::default()
            .with_selector(selector)
            .with_group(group)
            .with_filter(a.filter)
            .with_limit(opt(a.limit, |v| positive_int("--limit", v))?)
            .with_offset(opt(a.offset, |v| non_negative_int("--offset", v))?),
        groups_only: a.groups,
        full: a.full,
    })
}

/// `tools ls`.
pub async fn run(globals: &Globals, out: &Output, req: &ToolsLs) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let selector = req.params.selector.as_deref();
    let session = match describe_session(&client, &dir, selector).await {
        Err(e) if req.groups_only && e.kind() == ErrorType::UnknownSession => {
            let word = selector.unwrap_or_default();
            return Err(CliError::usage(format!(
                "\"{word}\" is not a session; --groups takes no value"
            ))
            .with_hint(format!(
                "To list the tools of a group, run \"appduct tools ls --group {word}\"."
            )));
        }
        other => other?,
    };
    let mut params = req.params.clone();
    params.selector = Some(session.session_id.clone());
    params.limit = if req.groups_only {
        Some(1)
    } else {
        effective_limit(req.params.limit, out.flags.json)
    };
    // Without `--limit` (`--json`) every tool is wanted: page through the reply bound.
    let result = if req.groups_only || params.limit.is_some() {
        client.call::<ToolsList>(params).await
    } else {
        client.list_all_tools(params).await
    };
    let result = result.map_err(|e| connect::client_error(&e, &dir))?;
    Ok(tools_ls(req, &result, &session.alias))
}

/// `tools ls` (§L7.1), for a `tools.list` made with `req.params` (and the human default
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
