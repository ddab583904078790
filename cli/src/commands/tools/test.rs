//! `appduct tools test [selector]` (§L7.6): runs each tool's declared test cases (device.md
//! §D18.3) through the ordinary `tools.call` path and reports pass, fail or skipped per case.

use appduct_client::client::ControlClient;
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{Caller, ToolsCallParams, ToolsListEntry};
use appduct_protocol::declarations::{Expect, RiskLevel, TestCase, check_shape};
use appduct_protocol::descriptor::{ToolDescriptor, validate_tool_descriptor};
use appduct_protocol::errors::ErrorType;
use clap::Args;
use serde_json::{Map, Value, json};

use super::call::new_call_id;
use super::{describe_session, list_all, tool_not_found};
use crate::commands::Command;
use crate::commands::args::{SelectorArgs, optional_selector};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success};
use crate::render::{self, Paint};

#[derive(Debug, Args)]
pub struct ToolsTestArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Run only this tool's cases
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Also run tools counted as destructive (riskLevel "high", destructiveHint, or no risk
    /// declared at all); skipped otherwise
    #[arg(long)]
    pub allow_destructive: bool,
}

/// `tools test` (§L7.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsTest {
    pub selector: Option<String>,
    pub tool: Option<String>,
    pub allow_destructive: bool,
}

pub fn validate(a: ToolsTestArgs) -> Result<Command, CliError> {
    let selector = optional_selector("tools test", a.selector.positionals)?;
    Ok(Command::ToolsTest(ToolsTest {
        selector,
        tool: a.tool,
        allow_destructive: a.allow_destructive,
    }))
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// Why, and for a shape mismatch the JSON Pointer into `result`.
    Fail {
        reason: String,
        path: Option<String>,
    },
    /// Not run without `--allow-destructive`.
    Skipped(SkipReason),
}

/// Why a case was skipped (§L7.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `destructiveHint: true` or a risk of `high`.
    Destructive,
    /// No `riskLevel`, no `readOnlyHint: true`, no `destructiveHint: false`: presumed
    /// destructive, as MCP presumes for unset hints.
    Undeclared,
}

impl SkipReason {
    fn of(tool: &ToolDescriptor) -> Option<Self> {
        if tool.is_destructive() || tool.effective_risk_level() == Some(RiskLevel::High) {
            Some(Self::Destructive)
        } else if tool.presumed_destructive() {
            Some(Self::Undeclared)
        } else {
            None
        }
    }

    fn wire(self) -> &'static str {
        match self {
            Self::Destructive => "destructive",
            Self::Undeclared => "undeclared_risk",
        }
    }
}

/// What a call answered, as a case compares it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `result` of `tools.call` (`None`: the app sent content without a JSON result).
    Result(Option<Value>),
    /// The error `type` and message.
    Error { error_type: String, message: String },
}

/// Judges one answer against a case's `expect` (§D18.3, §D18.4).
pub fn judge(expect: &Expect, answer: &Answer) -> Outcome {
    let fail = |reason: String| Outcome::Fail { reason, path: None };
    match (expect, answer) {
        (Expect::Error(want), Answer::Error { error_type, .. }) if want == error_type => {
            Outcome::Pass
        }
        (
            Expect::Error(want),
            Answer::Error {
                error_type,
                message,
            },
        ) => fail(format!(
            "expected error {want}, got {error_type}: {message}"
        )),
        (Expect::Error(want), Answer::Result(_)) => {
            fail(format!("expected error {want}, but the call succeeded"))
        }
        (
            Expect::Success(_),
            Answer::Error {
                error_type,
                message,
            },
        ) => fail(format!("expected success, got {error_type}: {message}")),
        (Expect::Success(None), Answer::Result(_)) => Outcome::Pass,
        (Expect::Success(Some(_)), Answer::Result(None)) => {
            fail("expected a JSON result matching the shape, got content only".into())
        }
        (Expect::Success(Some(shape)), Answer::Result(Some(result))) => {
            match check_shape(shape, result) {
                Ok(()) => Outcome::Pass,
                Err(m) => Outcome::Fail {
                    reason: format!("result does not match the shape {m}"),
                    path: Some(m.path),
                },
            }
        }
    }
}

/// One case's row of the report.
#[derive(Debug, Clone)]
struct Row {
    tool: String,
    index: usize,
    name: Option<String>,
    outcome: Outcome,
}

impl Row {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("tool".into(), json!(self.tool));
        m.insert("case".into(), json!(self.index));
        if let Some(n) = &self.name {
            m.insert("name".into(), json!(n));
        }
        let status = match &self.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail { .. } => "fail",
            Outcome::Skipped(_) => "skipped",
        };
        m.insert("status".into(), json!(status));
        match &self.outcome {
            Outcome::Fail { reason, path } => {
                m.insert("reason".into(), json!(reason));
                if let Some(p) = path {
                    m.insert("path".into(), json!(p));
                }
            }
            Outcome::Skipped(why) => {
                m.insert("reason".into(), json!(why.wire()));
            }
            Outcome::Pass => {}
        }
        Value::Object(m)
    }

    fn human(&self, paint: Paint) -> String {
        let label = match &self.name {
            Some(n) => format!("{} › {}", self.tool, n),
            None => format!("{} #{}", self.tool, self.index),
        };
        let label = render::clean_line(&label);
        match &self.outcome {
            Outcome::Pass => format!("{} {label}\n", paint.green("PASS")),
            Outcome::Fail { reason, .. } => format!(
                "{} {label}: {}\n",
                paint.red("FAIL"),
                render::clean_line(reason)
            ),
            Outcome::Skipped(SkipReason::Destructive) => {
                format!("SKIP {label} (destructive; --allow-destructive runs it)\n")
            }
            Outcome::Skipped(SkipReason::Undeclared) => format!(
                "SKIP {label} (no riskLevel or readOnlyHint, so presumed destructive; --allow-destructive runs it)\n"
            ),
        }
    }
}

/// A listed tool as the typed descriptor (`None`: the entry does not pass §D8.1, which a
/// registered tool always does).
fn descriptor_of(entry: &ToolsListEntry) -> Option<ToolDescriptor> {
    let mut map = entry.descriptor.clone();
    if let Some(g) = &entry.group {
        map.insert("group".into(), json!(g));
    }
    validate_tool_descriptor(&Value::Object(map)).ok()
}

async fn run_case(
    client: &ControlClient,
    dir: &StateDir,
    session_id: &str,
    tool: &str,
    case: &TestCase,
) -> Result<Answer, CliError> {
    let params = ToolsCallParams::new(tool.to_owned())
        .with_selector(Some(session_id.to_owned()))
        .with_args(case.arguments.clone())
        .with_caller(Some(Caller::Cli))
        .with_call_id(Some(new_call_id()?));
    match client.call_tool(params).await {
        Ok(r) => Ok(Answer::Result(r.result)),
        Err(e) => {
            let err = connect::tool_call_error(&e, dir);
            // The daemon went away: no later case can run either.
            if err.error_type == ErrorType::ConnectionError.as_str() {
                return Err(err);
            }
            Ok(Answer::Error {
                error_type: err.error_type.clone(),
                message: err.message.clone(),
            })
        }
    }
}

/// `tools test`.
pub async fn run(globals: &Globals, out: &Output, t: &ToolsTest) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let session = describe_session(&client, &dir, t.selector.as_deref()).await?;
    let all = list_all(&client, &dir, &session.session_id).await?;
    let entries: Vec<&ToolsListEntry> = match &t.tool {
        Some(name) => match all.tools.iter().find(|e| e.name() == name) {
            Some(e) => vec![e],
            None => return Err(tool_not_found(name, &session.alias, &all)),
        },
        None => all.tools.iter().collect(),
    };
    let mut rows = Vec::new();
    let mut untested = Vec::new();
    for entry in entries {
        let Some(tool) = descriptor_of(entry) else {
            continue;
        };
        let Some(cases) = tool.test_cases.as_ref().map(|c| c.cases()) else {
            untested.push(tool.name.clone());
            continue;
        };
        let skip = SkipReason::of(&tool).filter(|_| !t.allow_destructive);
        for (index, case) in cases.iter().enumerate() {
            let outcome = if let Some(why) = skip {
                Outcome::Skipped(why)
            } else {
                let answer = run_case(&client, &dir, &session.session_id, &tool.name, case).await?;
                judge(&case.expect, &answer)
            };
            rows.push(Row {
                tool: tool.name.clone(),
                index,
                name: case.name.clone(),
                outcome,
            });
        }
    }
    report(
        &session.alias,
        &session.session_id,
        &rows,
        &untested,
        out.stdout_paint,
    )
}

fn report(
    alias: &str,
    session_id: &str,
    rows: &[Row],
    untested: &[String],
    paint: Paint,
) -> Result<Success, CliError> {
    let count = |f: fn(&Outcome) -> bool| rows.iter().filter(|r| f(&r.outcome)).count();
    let passed = count(|o| *o == Outcome::Pass);
    let failed = count(|o| matches!(o, Outcome::Fail { .. }));
    let skipped = count(|o| matches!(o, Outcome::Skipped(_)));
    let data = json!({
        "alias": alias,
        "sessionId": session_id,
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "cases": rows.iter().map(Row::to_value).collect::<Vec<_>>(),
        "untested": untested,
    });
    let mut human: String = rows.iter().map(|r| r.human(paint)).collect();
    if !untested.is_empty() {
        human.push_str(&format!(
            "{} without test cases: {}\n",
            untested.len(),
            render::clean_line(&untested.join(", "))
        ));
    }
    let summary = format!(
        "{passed} passed, {failed} failed, {skipped} skipped on {}",
        render::clean_line(alias)
    );
    if failed == 0 {
        human.push_str(&summary);
        human.push_str(".\n");
        return Ok(Success::new(data, human));
    }
    let mut err = CliError::new(
        ErrorType::AssertionError,
        format!("Tool tests failed: {summary}"),
    );
    err.details = Some(data);
    err.hide_human_details = true;
    err.human_tail = Some(human);
    Err(err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn err(t: &str) -> Answer {
        Answer::Error {
            error_type: t.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn judge_compares_errors_results_and_shapes() {
        let shape =
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
        let ok = |e: &Expect, a: &Answer| judge(e, a) == Outcome::Pass;
        assert!(ok(
            &Expect::Success(None),
            &Answer::Result(Some(Value::Null))
        ));
        assert!(ok(
            &Expect::Success(Some(shape.clone())),
            &Answer::Result(Some(json!({"n": 2})))
        ));
        assert!(ok(
            &Expect::Error("tool_execution_error".into()),
            &err("tool_execution_error")
        ));
        assert_eq!(
            judge(
                &Expect::Success(Some(shape.clone())),
                &Answer::Result(Some(json!({"n": "2"})))
            ),
            Outcome::Fail {
                reason: "result does not match the shape at /n: expected integer, found a string"
                    .into(),
                path: Some("/n".into())
            }
        );
        assert!(!ok(&Expect::Success(Some(shape)), &Answer::Result(None)));
        assert!(!ok(&Expect::Success(None), &err("tool_execution_error")));
        assert!(!ok(
            &Expect::Error("tool_execution_error".into()),
            &err("tool_timeout")
        ));
        assert!(!ok(
            &Expect::Error("tool_execution_error".into()),
            &Answer::Result(None)
        ));
    }

    #[test]
    fn a_failure_is_an_assertion_error_carrying_the_report() {
        let rows = vec![
            Row {
                tool: "a".into(),
                index: 0,
                name: Some("works".into()),
                outcome: Outcome::Pass,
            },
            Row {
                tool: "b".into(),
                index: 1,
                name: None,
                outcome: Outcome::Fail {
                    reason: "r".into(),
                    path: Some("/x".into()),
                },
            },
            Row {
                tool: "c".into(),
                index: 0,
                name: None,
                outcome: Outcome::Skipped(SkipReason::Undeclared),
            },
        ];
        let e = report("pixel-8", "S", &rows, &["d".into()], Paint::PLAIN).unwrap_err();
        assert_eq!(e.exit_code(), 3);
        let d = e.details.clone().unwrap();
        assert_eq!(
            (&d["passed"], &d["failed"], &d["skipped"]),
            (&json!(1), &json!(1), &json!(1))
        );
        assert_eq!(
            d["cases"][1],
            json!({"tool": "b", "case": 1, "status": "fail", "reason": "r", "path": "/x"})
        );
        assert_eq!(d["untested"], json!(["d"]));
        assert_eq!(d["cases"][2]["reason"], "undeclared_risk");
        let tail = e.human_tail.clone().unwrap();
        assert!(
            tail.contains("PASS a › works")
                && tail.contains("FAIL b #1: r")
                && tail
                    .contains("SKIP c #0 (no riskLevel or readOnlyHint, so presumed destructive"),
            "{tail}"
        );
        let ok = report("pixel-8", "S", &rows[..1], &[], Paint::PLAIN).unwrap();
        assert_eq!(ok.data["passed"], 1);
        assert!(
            ok.human
                .ends_with("1 passed, 0 failed, 0 skipped on pixel-8.\n")
        );
    }
}
