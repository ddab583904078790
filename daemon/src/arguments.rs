//! Argument validation of `tools.call` (§C10.8): the daemon checks a call's arguments against the
//! tool's declared input schema before the call leaves it, whatever SDK the app was built with.
//!
//! - Each shared descriptor ([`crate::sessions::SharedTool`]) holds one [`InputCheck`]: its input
//!   schema compiled at the first checked call of any session that registered it, then kept for
//!   as long as a registry holds the descriptor. Calls never compile.
//! - Remote `$ref`s are never fetched: the retriever refuses every URI, so a schema that needs
//!   one does not compile. A schema that does not compile, for that or any other reason, makes
//!   every call of the tool fail closed (`details.reason: "schema_unusable"`) while checking is
//!   on; the daemon logs a warning once per descriptor.
//! - Patterns are bounded: [`PATTERN_BACKTRACK_LIMIT`] steps per match, [`PATTERN_SIZE_LIMIT`]
//!   compiled bytes each, and at most [`MAX_PATTERNS`] of [`MAX_PATTERN_BYTES`] per schema
//!   (more: unusable). Without `$schema`, a schema 2020-12 refuses is tried as draft-07.
//! - [`check_arguments_blocking`] compiles and checks on a blocking thread, at most
//!   [`MAX_CONCURRENT_CHECKS`] at once, so the runtime threads never run a check.
//! - The report is bounded: at most [`MAX_ISSUES`] issues, each message cut to
//!   [`MAX_ISSUE_MESSAGE_CHARS`] characters, each path key to [`MAX_PATH_KEY_CHARS`], and the
//!   issues together to about [`MAX_ISSUES_BYTES`] of JSON.
//!
//! [`check_arguments`] is the whole step: it takes the arguments as the pipeline holds them and
//! is called only when `validation.arguments` is `"enforce"` ([`ArgumentsSwitch`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};

use appduct_client::config::ArgumentValidation;
use appduct_protocol::descriptor::ToolDescriptor;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

/// The check slots of the daemon ([`MAX_CONCURRENT_CHECKS`]).
static CHECK_SLOTS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(MAX_CONCURRENT_CHECKS));

/// Most issues one refusal reports (`details.truncated: true` when there were more).
pub const MAX_ISSUES: usize = 20;
/// Longest issue message, in characters; a longer one is cut and ends in `…`.
pub const MAX_ISSUE_MESSAGE_CHARS: usize = 256;
/// Longest object key in an issue's `path`, in characters; a longer one is cut and ends in `…`.
pub const MAX_PATH_KEY_CHARS: usize = 128;
/// Issues stop being added once their JSON passes this many bytes.
pub const MAX_ISSUES_BYTES: usize = 16 * 1024;
/// Steps one `pattern` match may take on the backtracking engine before it gives up (and the
/// argument is refused).
pub const PATTERN_BACKTRACK_LIMIT: usize = 1_000_000;
/// Approximate bytes one compiled pattern may take (regex `size_limit`); a larger one makes the
/// schema unusable.
pub const PATTERN_SIZE_LIMIT: usize = 256 * 1024;
/// Approximate bytes of one pattern's lazy-DFA cache (regex `dfa_size_limit`).
pub const PATTERN_DFA_SIZE_LIMIT: usize = 256 * 1024;
/// Most regular expressions (`pattern` values and `patternProperties` keys) one schema may hold.
pub const MAX_PATTERNS: usize = 64;
/// Most bytes those regular expressions may take together.
pub const MAX_PATTERN_BYTES: usize = 16 * 1024;
/// Checks (compile and validate) that run at once, each on a blocking thread; more calls wait
/// their turn without holding a runtime thread.
pub const MAX_CONCURRENT_CHECKS: usize = 2;
/// Most subschemas one schema may expand to with its local `$ref`s followed (see
/// [`expansion_of`]); more makes the schema unusable, so that a few kilobytes naming a
/// definition twice per level cannot ask a check for 2^40 evaluations.
pub const MAX_SCHEMA_EXPANSION: u64 = 100_000;
/// Most work one check may be asked for: the schema's expansion times the JSON values of the
/// arguments (each subschema can be evaluated against each value). A bounded schema used as
/// `items` of a long array is otherwise a check that outlives its call's deadline and holds a
/// check slot all the while; past this, the call is refused before any check runs.
pub const MAX_CHECK_WORK: u64 = 25_000_000;
/// In that count, a string (value or key) weighs one value more per this many bytes.
pub const STRING_BYTES_PER_VALUE: usize = 16;

/// `validation.arguments` as in force (start, then each `daemon.reload`); clones share it.
#[derive(Debug, Clone)]
pub struct ArgumentsSwitch(Arc<AtomicBool>);

impl ArgumentsSwitch {
    pub fn new(mode: ArgumentValidation) -> Self {
        Self(Arc::new(AtomicBool::new(
            mode == ArgumentValidation::Enforce,
        )))
    }

    /// Puts `mode` in force for calls that have not passed the validation step yet.
    pub fn set(&self, mode: ArgumentValidation) {
        self.0
            .store(mode == ArgumentValidation::Enforce, Ordering::Relaxed);
    }

    /// Whether calls are checked (`"enforce"`).
    pub fn enforcing(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The compiled input schema of one shared descriptor: compiled once, at the first checked call.
#[derive(Default)]
pub struct InputCheck {
    compiled: OnceLock<Compiled>,
}

impl fmt::Debug for InputCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.compiled.get() {
            None => "not compiled",
            Some(Compiled::Usable(..)) => "compiled",
            Some(Compiled::Unusable(_)) => "unusable",
        };
        f.debug_struct("InputCheck").field("state", &state).finish()
    }
}

enum Compiled {
    /// The validator, and what the schema expands to ([`expansion_of`]).
    Usable(Box<jsonschema::Validator>, Expansion),
    /// Why the schema cannot be used (compile error, a remote `$ref`).
    Unusable(String),
}

impl InputCheck {
    /// Whether the schema was compiled already (tests: compiled once, never per call).
    pub fn is_compiled(&self) -> bool {
        self.compiled.get().is_some()
    }

    fn get(&self, tool: &ToolDescriptor, schema_text: &str) -> &Compiled {
        self.compiled.get_or_init(|| {
            let compiled = compile(schema_text);
            if let Compiled::Unusable(why) = &compiled {
                tracing::warn!(
                    tool = %tool.name,
                    "the input schema of tool {:?} cannot be used to check arguments ({why}); its calls are refused while validation.arguments is \"enforce\"",
                    tool.name
                );
            }
            compiled
        })
    }
}

/// Refuses every external resource: the daemon never reads the network or files for a schema.
struct NoRetrieval;

impl jsonschema::Retrieve for NoRetrieval {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("the daemon does not fetch referenced schemas ({uri})").into())
    }
}

fn compile(schema_text: &str) -> Compiled {
    let schema: Value = match serde_json::from_str(schema_text) {
        Ok(schema) => schema,
        Err(e) => return Compiled::Unusable(format!("not JSON: {e}")),
    };
    let (count, bytes) = patterns_in(&schema);
    if count > MAX_PATTERNS || bytes > MAX_PATTERN_BYTES {
        return Compiled::Unusable(format!(
            "the schema holds {count} regular expressions of {bytes} bytes together; the daemon \
             checks at most {MAX_PATTERNS} of at most {MAX_PATTERN_BYTES} bytes"
        ));
    }
    let expansion = match expansion_of(&schema) {
        Ok(expansion) => expansion,
        Err(why) => return Compiled::Unusable(why),
    };
    // Drafts by `$schema` (2020-12 without one); `format` is an annotation only, as for the
    // SDKs' own validators; patterns on the backtracking engine with its step and size limits.
    let build = |draft: Option<jsonschema::Draft>| {
        let mut options = jsonschema::options()
            .with_retriever(NoRetrieval)
            .should_validate_formats(false)
            .with_pattern_options(
                jsonschema::PatternOptions::fancy_regex()
                    .backtrack_limit(PATTERN_BACKTRACK_LIMIT)
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .dfa_size_limit(PATTERN_DFA_SIZE_LIMIT),
            );
        if let Some(draft) = draft {
            options = options.with_draft(draft);
        }
        options.build(&schema)
    };
    match build(None) {
        Ok(validator) => Compiled::Usable(Box::new(validator), expansion),
        // Without `$schema`, a schema written for draft-07 (`items: [..]`, a boolean
        // `exclusiveMinimum`) is read as draft-07 when 2020-12 refuses it.
        Err(e) => match schema.get("$schema") {
            None if let Ok(validator) = build(Some(jsonschema::Draft::Draft7)) => {
                Compiled::Usable(Box::new(validator), expansion)
            }
            _ => Compiled::Unusable(cut(&e.to_string(), MAX_ISSUE_MESSAGE_CHARS)),
        },
    }
}

/// How many subschemas a check of `schema` may visit for one place of the arguments: each
/// object counts one plus its members, a `$ref`/`$dynamicRef`/`$recursiveRef` to a place of the
/// same document counts as what it names (memoized), and a reference back into the chain being
/// counted (recursion, which the arguments' own depth bounds) counts one. Data keywords
/// (`const`, `enum`, `default`, `examples`) count nothing. Refused past
/// [`MAX_SCHEMA_EXPANSION`], and when a reference cannot be bounded: one the document does not
/// resolve while it embeds `$id`s (whose bases this count does not follow).
fn expansion_of(schema: &Value) -> Result<Expansion, String> {
    use std::collections::HashMap;
    // Anchors (plain, dynamic and recursive) by name, and whether any subschema has an `$id`.
    let mut anchors: HashMap<&str, Vec<&Value>> = HashMap::new();
    let mut recursive: Vec<&Value> = vec![schema];
    let mut embedded_ids = false;
    let mut stack = vec![(schema, true)];
    while let Some((value, root)) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, member) in map {
                    match (key.as_str(), member) {
                        ("$anchor" | "$dynamicAnchor", Value::String(name)) => {
                            anchors.entry(name).or_default().push(value);
                        }
                        ("$recursiveAnchor", Value::Bool(true)) => recursive.push(value),
                        ("$id" | "id", Value::String(_)) if !root => embedded_ids = true,
                        ("const" | "enum" | "default" | "examples", _) => continue,
                        _ => {}
                    }
                    stack.push((member, false));
                }
            }
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, false))),
            _ => {}
        }
    }
    struct Count<'a> {
        root: &'a Value,
        anchors: HashMap<&'a str, Vec<&'a Value>>,
        recursive: Vec<&'a Value>,
        embedded_ids: bool,
        done: HashMap<*const Value, (u64, u64)>,
        open: std::collections::HashSet<*const Value>,
    }
    impl<'a> Count<'a> {
        fn targets(&self, key: &str, reference: &str) -> Result<Vec<&'a Value>, String> {
            if key == "$recursiveRef" {
                return Ok(self.recursive.clone());
            }
            let unbounded = || {
                Err(format!(
                    "the reference {reference:?} cannot be bounded: the daemon follows only \
                     references it resolves within the schema itself"
                ))
            };
            // The part before `#`: empty, or the root's own `$id` (which resolves locally).
            let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
            let root_id = self.root.get("$id").or_else(|| self.root.get("id"));
            let local = base.is_empty()
                || root_id
                    .and_then(Value::as_str)
                    .is_some_and(|id| id.split_once('#').map_or(id, |(id, _)| id) == base);
            if !local {
                // Remote documents never compile; embedded ones (and relative bases) are not
                // followed by this count.
                return if self.embedded_ids || root_id.is_some() {
                    unbounded()
                } else {
                    Ok(Vec::new())
                };
            }
            let fragment = appduct_protocol::text::percent_decode(fragment).ok_or_else(|| {
                format!("the reference {reference:?} is not percent-encoded UTF-8")
            })?;
            let found = if fragment.is_empty() || fragment.starts_with('/') {
                self.root.pointer(&fragment).map(|target| vec![target])
            } else {
                self.anchors.get(fragment.as_str()).cloned()
            };
            // A reference the schema does not resolve here is one the compiler resolves some
            // other way (or refuses): never counted as nothing.
            found.map_or_else(unbounded, Ok)
        }

        /// `(subschemas, recursions)`: what a place of the arguments can meet under `value`,
        /// and how many ways it re-enters a schema already being counted (each reference back
        /// into the chain, and those of every subschema reached again, counted again).
        fn of(&mut self, value: &'a Value) -> Result<(u64, u64), String> {
            let id: *const Value = value;
            if let Some(n) = self.done.get(&id) {
                return Ok(*n);
            }
            if !self.open.insert(id) {
                return Ok((1, 1));
            }
            let mut total: u64 = 1;
            let mut recursions: u64 = 0;
            let mut add = |(n, r): (u64, u64)| {
                total = total.saturating_add(n);
                recursions = recursions.saturating_add(r);
                total > MAX_SCHEMA_EXPANSION
            };
            match value {
                Value::Object(map) => {
                    for (key, member) in map {
                        let n = match (key.as_str(), member) {
                            ("const" | "enum" | "default" | "examples", _) => (0, 0),
                            // Definitions count as subschemas, but are applied to the
                            // arguments only where referenced: their re-entries count there.
                            ("$defs" | "definitions", _) => (self.of(member)?.0, 0),
                            ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(r)) => {
                                let mut n = (0u64, 0u64);
                                for target in self.targets(key, r)? {
                                    let (t, tr) = self.of(target)?;
                                    n = (n.0.saturating_add(t), n.1.saturating_add(tr));
                                }
                                n
                            }
                            _ => self.of(member)?,
                        };
                        if add(n) {
                            break;
                        }
                    }
                }
                Value::Array(items) => {
                    for item in items {
                        let n = self.of(item)?;
                        if add(n) {
                            break;
                        }
                    }
                }
                _ => total = 0,
            }
            self.open.remove(&id);
            self.done.insert(id, (total, recursions));
            Ok((total, recursions))
        }
    }
    let mut count = Count {
        root: schema,
        anchors,
        recursive,
        embedded_ids,
        done: HashMap::new(),
        open: std::collections::HashSet::new(),
    };
    let (total, recursions) = count.of(schema)?;
    if total > MAX_SCHEMA_EXPANSION {
        return Err(format!(
            "the schema expands to more than {MAX_SCHEMA_EXPANSION} subschemas with its \
             references followed; the daemon checks at most that many"
        ));
    }
    Ok(Expansion {
        subschemas: total,
        recursions,
    })
}

/// What [`expansion_of`] found: the subschemas one place of the arguments can meet (recursion
/// counted once), and how many ways the schema re-enters itself. With two or more, a check may
/// branch at every level of the arguments' nesting (`allOf` of two references to the schema
/// it is in asks for 2^depth evaluations), which the subschema count alone cannot see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expansion {
    pub subschemas: u64,
    pub recursions: u64,
}

/// How many regular expressions `schema` holds (`pattern` strings, `patternProperties` keys) and
/// their bytes together. Counts every such place, in subschemas and unknown keywords alike.
fn patterns_in(schema: &Value) -> (usize, usize) {
    let (mut count, mut bytes) = (0, 0);
    let mut stack = vec![schema];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("pattern", Value::String(p)) => {
                            count += 1;
                            bytes += p.len();
                        }
                        ("patternProperties", Value::Object(props)) => {
                            count += props.len();
                            bytes += props.keys().map(String::len).sum::<usize>();
                        }
                        _ => {}
                    }
                    stack.push(value);
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    (count, bytes)
}

/// [`check_arguments`] on a blocking thread, once one of the [`MAX_CONCURRENT_CHECKS`] slots is
/// free: compiling a schema or matching its patterns never holds a runtime thread, and a caller
/// waiting for a slot (or for another caller's compile) waits asynchronously. Gives `args` back.
pub async fn check_arguments_blocking(
    tool: Arc<crate::sessions::SharedTool>,
    args: Value,
) -> (Value, Result<(), ErrorObject>) {
    if tool
        .input_schema
        .as_ref()
        .is_none_or(|schema| accepts_every_object(schema.as_str()))
    {
        return (args, Ok(()));
    }
    // The slots are never closed, so this always waits for a permit.
    let Ok(slot) = CHECK_SLOTS.acquire().await else {
        return (
            args,
            Err(ErrorObject::internal("the argument check slots are closed")),
        );
    };
    let args = Arc::new(args);
    let checked = Arc::clone(&args);
    // The slot goes with the check, not with this future: a caller that stops waiting (its
    // deadline, §C10.8) frees no slot while its check still runs, so no more than
    // MAX_CONCURRENT_CHECKS checks ever run, however many callers give up.
    let result = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        check_arguments(&tool, tool.input_check(), &checked)
    })
    .await
    .unwrap_or_else(|e| {
        Err(ErrorObject::internal(format!(
            "the argument check failed: {e}"
        )))
    });
    // The blocking task has ended, so `args` is the only handle left.
    let args = Arc::try_unwrap(args).unwrap_or_else(|shared| (*shared).clone());
    (args, result)
}

/// Whether an input schema (its compact text) accepts every object, so that a check can only
/// pass: `{}` and `{"type":"object"}`, what tools without parameters declare. `args` is
/// always an object (§C8.9), so these skip the blocking thread, its slot and the compile
/// (issue #24: three allocations and a thread hop per call of such a tool).
fn accepts_every_object(schema: &str) -> bool {
    matches!(schema, "{}" | r#"{"type":"object"}"#)
}

/// Takes every check slot until the permit is dropped, so that checked calls wait (tests of
/// the wait's deadline, §C10.8). `None` only if the slots were closed, which they never are.
#[doc(hidden)]
pub async fn hold_all_check_slots() -> Option<tokio::sync::SemaphorePermit<'static>> {
    CHECK_SLOTS
        .acquire_many(MAX_CONCURRENT_CHECKS as u32)
        .await
        .ok()
}

/// Step 5a of §C10.1: `args` (the call's arguments object) against `tool`'s input schema. A tool
/// without one accepts any arguments (the app decides). The error is the call's
/// `tool_input_validation_error` (§C10.8).
pub fn check_arguments(
    tool: &ToolDescriptor,
    check: &InputCheck,
    args: &Value,
) -> Result<(), ErrorObject> {
    let Some(schema) = &tool.input_schema else {
        return Ok(());
    };
    if accepts_every_object(schema.as_str()) {
        return Ok(());
    }
    let validator = match check.get(tool, schema.as_str()) {
        Compiled::Usable(validator, expansion) => {
            if let Some(why) = over_check_budget(*expansion, args) {
                return Err(too_costly(tool, &why));
            }
            validator
        }
        Compiled::Unusable(why) => return Err(unusable(tool, why)),
    };
    let mut errors = validator.iter_errors(args);
    let Some(first) = errors.next() else {
        return Ok(());
    };
    let mut issues = Vec::new();
    let mut bytes = 0;
    let mut truncated = false;
    for error in std::iter::once(first).chain(errors) {
        if issues.len() == MAX_ISSUES || bytes > MAX_ISSUES_BYTES {
            truncated = true;
            break;
        }
        let issue = issue(&error, args);
        bytes += issue.to_string().len();
        issues.push(issue);
    }
    let first_message = issues
        .first()
        .and_then(|i| i["message"].as_str())
        .unwrap_or("invalid arguments")
        .to_owned();
    let mut details = Map::new();
    details.insert("issues".into(), Value::Array(issues));
    if truncated {
        details.insert("truncated".into(), Value::Bool(true));
    }
    details.insert("checkedBy".into(), json!("daemon"));
    Err(ErrorObject::application(
        ErrorType::ToolInputValidationError,
        format!(
            "Invalid arguments for tool {:?}: {first_message}",
            tool.name
        ),
    )
    .with_details(Value::Object(details)))
}

/// Why checking `args` against a schema of this `expansion` would pass [`MAX_CHECK_WORK`], or
/// `None`. Two estimates: subschemas × the arguments' weight (their JSON values, strings and
/// keys one more per [`STRING_BYTES_PER_VALUE`] bytes), and for a schema that re-enters itself
/// two or more ways, subschemas × recursions^(the arguments' depth), the evaluations a check
/// that branches at every level asks for. Counting stops as soon as the budget is passed, and
/// small schemas are not counted at all.
fn over_check_budget(expansion: Expansion, args: &Value) -> Option<String> {
    let Expansion {
        subschemas,
        recursions,
    } = expansion;
    if recursions >= 2 {
        let depth = u32::try_from(appduct_protocol::text::json_depth(args)).unwrap_or(u32::MAX);
        let work = subschemas.saturating_mul(recursions.saturating_pow(depth));
        if work > MAX_CHECK_WORK {
            return Some(format!(
                "the input schema expands to {subschemas} subschemas and re-enters itself \
                 {recursions} ways, so arguments nested {depth} deep can ask for \
                 {subschemas} × {recursions}^{depth} evaluations; the daemon checks at most \
                 {MAX_CHECK_WORK} a call"
            ));
        }
    }
    let most_values = MAX_CHECK_WORK / subschemas.max(1);
    // No arguments object a call can carry has a million values (§C8.9 caps its size).
    if most_values >= 1_000_000 {
        return None;
    }
    let mut values = 0u64;
    let mut stack = vec![args];
    while let Some(value) = stack.pop() {
        values += 1;
        match value {
            Value::Object(map) => {
                for (key, member) in map {
                    values += string_weight(key);
                    stack.push(member);
                }
            }
            Value::Array(items) => stack.extend(items),
            Value::String(text) => values += string_weight(text),
            _ => {}
        }
        if values > most_values {
            return Some(format!(
                "the input schema expands to {subschemas} subschemas and the arguments weigh \
                 more than {most_values} JSON values (a string counts one more per \
                 {STRING_BYTES_PER_VALUE} bytes); the daemon checks at most {MAX_CHECK_WORK} \
                 subschema-value pairs a call"
            ));
        }
    }
    None
}

/// What a string (a value or an object key) weighs beyond its one value: one more per
/// [`STRING_BYTES_PER_VALUE`] bytes, because a `pattern` or `format` scans it whole (the s10
/// attack's F8: a 250 KB string against 4,096 patterns is 2 values but a minute of scanning).
fn string_weight(text: &str) -> u64 {
    (text.len() / STRING_BYTES_PER_VALUE) as u64
}

fn too_costly(tool: &ToolDescriptor, why: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ToolInputValidationError,
        format!(
            "The daemon will not check these arguments of tool {:?}: {why}",
            tool.name
        ),
    )
    .with_details(json!({
        "reason": "check_too_costly",
        "issues": [{"message": cut(why, MAX_ISSUE_MESSAGE_CHARS)}],
        "checkedBy": "daemon",
        "hint": "Send fewer values, or ask the app's developer for a smaller schema; the person who runs the daemon can set validation.arguments to \"off\" (control.md §C10.8).",
    }))
}

fn unusable(tool: &ToolDescriptor, why: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ToolInputValidationError,
        format!(
            "The daemon cannot check arguments against the input schema of tool {:?}: {why}",
            tool.name
        ),
    )
    .with_details(json!({
        "reason": "schema_unusable",
        "issues": [{"message": cut(why, MAX_ISSUE_MESSAGE_CHARS), "keyword": "$schema"}],
        "checkedBy": "daemon",
        "hint": "The app's input schema must compile without fetching anything (no remote $ref) and within the daemon's pattern limits (control.md §C10.8). Fix the schema, or ask the person who runs the daemon to set validation.arguments to \"off\".",
    }))
}

/// One issue as the SDKs report them (`{message, path?}`, path omitted at the root), plus the
/// JSON Schema `keyword` that failed.
fn issue(error: &jsonschema::ValidationError<'_>, args: &Value) -> Value {
    let mut issue = Map::new();
    issue.insert(
        "message".into(),
        Value::String(cut(&error.to_string(), MAX_ISSUE_MESSAGE_CHARS)),
    );
    let path = path_segments(error.instance_path().as_str(), args);
    if !path.is_empty() {
        issue.insert("path".into(), Value::Array(path));
    }
    issue.insert(
        "keyword".into(),
        Value::String(cut(error.kind().keyword(), MAX_PATH_KEY_CHARS)),
    );
    Value::Object(issue)
}

/// The segments of JSON pointer `pointer` into `args`: an index into an array as a number, a key
/// of an object as a string (so a key `"0"` stays a string).
fn path_segments(pointer: &str, args: &Value) -> Vec<Value> {
    let mut at = Some(args);
    let mut segments = Vec::new();
    for raw in pointer.split('/').skip(1) {
        let key = raw.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) if let Ok(index) = key.parse::<usize>() => {
                at = items.get(index);
                segments.push(json!(index));
            }
            Some(Value::Object(map)) => {
                at = map.get(&key);
                segments.push(Value::String(cut(&key, MAX_PATH_KEY_CHARS)));
            }
            _ => {
                at = None;
                segments.push(Value::String(cut(&key, MAX_PATH_KEY_CHARS)));
            }
        }
    }
    segments
}

/// `text` cut to `max` characters, ending in `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        // Longer than `max`: keep `max - 1` characters and the ellipsis.
        Some(_) => {
            let end = text
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(text.len(), |(i, _)| i);
            format!("{}…", &text[..end])
        }
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_long_text() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
        assert_eq!(cut("éééé", 3), "éé…");
        assert_eq!(cut("", 3), "");
        assert_eq!(cut("ab", 3), "ab");
    }

    /// Issue #24: a schema that accepts every object is not compiled and takes no check slot
    /// (the call passes even with every slot held); any other schema still is checked.
    #[tokio::test]
    async fn a_schema_accepting_every_object_skips_the_check() {
        let held = CHECK_SLOTS
            .acquire_many(MAX_CONCURRENT_CHECKS as u32)
            .await
            .unwrap();
        for schema in [json!({}), json!({"type": "object"})] {
            let tool: ToolDescriptor = serde_json::from_value(
                json!({"name": "t", "description": "d", "input_schema": schema}),
            )
            .unwrap();
            let tool = Arc::new(crate::sessions::SharedTool::new(tool));
            let args = json!({"a": [1, {"b": null}]});
            let (back, checked) = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                check_arguments_blocking(Arc::clone(&tool), args.clone()),
            )
            .await
            .expect("no slot needed");
            assert_eq!(back, args);
            assert!(checked.is_ok());
            assert!(check_arguments(&tool, tool.input_check(), &args).is_ok());
            assert!(!tool.input_check().is_compiled());
        }
        drop(held);
        // Not every object: `{"type":"object","required":["a"]}` is checked and refuses `{}`.
        let tool: ToolDescriptor = serde_json::from_value(json!({"name": "t", "description": "d",
            "input_schema": {"type": "object", "required": ["a"]}}))
        .unwrap();
        let tool = Arc::new(crate::sessions::SharedTool::new(tool));
        let (_, checked) = check_arguments_blocking(Arc::clone(&tool), json!({})).await;
        assert!(checked.is_err());
        assert!(tool.input_check().is_compiled());
    }

    #[tokio::test]
    async fn a_caller_waiting_for_a_check_slot_does_not_hold_the_runtime_thread() {
        let tool: ToolDescriptor = serde_json::from_value(json!({
            "name": "t", "description": "d",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}}
        }))
        .unwrap();
        let tool = Arc::new(crate::sessions::SharedTool::new(tool));
        // Every slot taken: the check waits, and this (single-threaded) runtime runs on.
        let held = CHECK_SLOTS
            .acquire_many(MAX_CONCURRENT_CHECKS as u32)
            .await
            .unwrap();
        let check = tokio::spawn(check_arguments_blocking(
            Arc::clone(&tool),
            json!({"a": "x"}),
        ));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!check.is_finished());
        assert!(!tool.input_check().is_compiled());
        drop(held);
        let (args, checked) = check.await.unwrap();
        assert_eq!(args, json!({"a": "x"}));
        assert!(checked.is_err());
        assert!(tool.input_check().is_compiled());
    }

    /// `levels` definitions, each naming the next twice: 2^levels subschemas in a few KB.
    fn doubling(levels: usize, key: &str) -> Value {
        let mut defs = Map::new();
        for i in 0..levels {
            let next = json!({key: format!("#/$defs/l{}", i + 1)});
            defs.insert(format!("l{i}"), json!({"allOf": [next.clone(), next]}));
        }
        defs.insert(format!("l{levels}"), json!({"type": "object"}));
        json!({"$defs": defs, "$ref": "#/$defs/l0"})
    }

    /// A bounded schema (2^12 subschemas) as `items` of a long array: refused before any check
    /// runs (the s10 attack's F6: such a check outlived its call and held a check slot), while
    /// the same schema with a short array, or a small schema with the long array, is checked.
    #[test]
    fn a_check_past_the_work_budget_is_refused_before_it_runs() {
        let mut nested = doubling(12, "$ref");
        let defs = nested["$defs"].take();
        let schema = json!({"type": "object", "$defs": defs,
            "properties": {"xs": {"type": "array", "items": {"$ref": "#/$defs/l0"}}}});
        let tool: ToolDescriptor = serde_json::from_value(
            json!({"name": "t", "description": "d", "input_schema": schema}),
        )
        .unwrap();
        let tool = crate::sessions::SharedTool::new(tool);
        let long = json!({"xs": vec![json!({}); 20_000]});
        let err = check_arguments(&tool, tool.input_check(), &long).unwrap_err();
        let text = serde_json::to_string(&err).unwrap();
        assert!(text.contains("check_too_costly"), "{text}");
        assert!(text.contains("tool_input_validation_error"), "{text}");
        let short = json!({"xs": vec![json!({}); 10]});
        assert!(check_arguments(&tool, tool.input_check(), &short).is_ok());
        // A small schema with the long array is checked (and refuses a wrong item).
        let small: ToolDescriptor = serde_json::from_value(json!({"name": "s", "description": "d",
            "input_schema": {"type": "object",
                "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}}))
        .unwrap();
        let small = crate::sessions::SharedTool::new(small);
        let err = check_arguments(&small, small.input_check(), &long).unwrap_err();
        let text = serde_json::to_string(&err).unwrap();
        assert!(!text.contains("check_too_costly"), "{text}");
        let ints = json!({"xs": vec![json!(1); 20_000]});
        assert!(check_arguments(&small, small.input_check(), &ints).is_ok());
        // One long string is few values but much scanning: it weighs by its bytes (F8), as a
        // long key does; a short one passes.
        let long_text = json!({"s": "a".repeat(250_000)});
        let err = check_arguments(&tool, tool.input_check(), &long_text).unwrap_err();
        assert!(
            serde_json::to_string(&err)
                .unwrap()
                .contains("check_too_costly")
        );
        let long_key = json!({"a".repeat(250_000): 1});
        let err = check_arguments(&tool, tool.input_check(), &long_key).unwrap_err();
        assert!(
            serde_json::to_string(&err)
                .unwrap()
                .contains("check_too_costly")
        );
        assert!(check_arguments(&tool, tool.input_check(), &json!({"s": "abc"})).is_ok());
    }

    /// A schema that re-enters itself twice per level of the arguments (the s10 attack's F8a:
    /// 130 bytes nested 29 deep held both check slots for 82 s, 40 deep would take a day) is
    /// refused before the check when the arguments are deep, and checked when they are not; a
    /// tree that recurses once per child is checked however deep.
    #[test]
    fn branching_recursion_is_refused_for_deep_arguments_before_the_check() {
        let schema = json!({"type": "object",
            "$defs": {"a": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}}},
            "properties": {"v": {"$ref": "#/$defs/a"}}});
        assert_eq!(expansion_of(&schema).unwrap().recursions, 2);
        let tool: ToolDescriptor = serde_json::from_value(
            json!({"name": "t", "description": "d", "input_schema": schema}),
        )
        .unwrap();
        let tool = crate::sessions::SharedTool::new(tool);
        let nested = |depth: usize| {
            let mut v = json!([]);
            for _ in 1..depth {
                v = json!([v]);
            }
            json!({"v": v})
        };
        let err = check_arguments(&tool, tool.input_check(), &nested(40)).unwrap_err();
        let text = serde_json::to_string(&err).unwrap();
        assert!(text.contains("check_too_costly"), "{text}");
        assert!(text.contains("re-enters itself 2 ways"), "{text}");
        assert!(check_arguments(&tool, tool.input_check(), &nested(8)).is_ok());
        let list = json!({"type": "object",
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
            "properties": {"head": {"$ref": "#/$defs/node"}}});
        assert_eq!(expansion_of(&list).unwrap().recursions, 1);
        let list: ToolDescriptor =
            serde_json::from_value(json!({"name": "l", "description": "d", "input_schema": list}))
                .unwrap();
        let list = crate::sessions::SharedTool::new(list);
        let mut node = json!({});
        for _ in 0..50 {
            node = json!({"next": node});
        }
        assert!(check_arguments(&list, list.input_check(), &json!({"head": node})).is_ok());
    }

    #[test]
    fn a_schema_that_doubles_per_level_is_unusable_and_a_shared_definition_is_not() {
        for key in ["$ref", "$dynamicRef"] {
            let laughs = doubling(40, key);
            assert!(laughs.to_string().len() < 4096);
            let Err(why) = expansion_of(&laughs) else {
                panic!("{key}: a 2^40 expansion was accepted");
            };
            assert!(why.contains("expands to more than"), "{why}");
            assert!(matches!(
                compile(&laughs.to_string()),
                Compiled::Unusable(_)
            ));
        }
        // Ten levels: about 2^10 × 4 subschemas, well within the bound, and usable.
        assert!(expansion_of(&doubling(10, "$ref")).is_ok());
        assert!(matches!(
            compile(&doubling(10, "$ref").to_string()),
            Compiled::Usable(..)
        ));
        // Anchors are followed as well.
        let mut anchored = Map::new();
        for i in 0..40 {
            let next = json!({"$ref": format!("#a{}", i + 1)});
            anchored.insert(
                format!("l{i}"),
                json!({"$anchor": format!("a{i}"), "allOf": [next.clone(), next]}),
            );
        }
        anchored.insert("l40".into(), json!({"$anchor": "a40"}));
        assert!(expansion_of(&json!({"$defs": anchored, "$ref": "#a0"})).is_err());
        // Recursion counts once: a tree of nodes is fine.
        let tree = json!({"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}, "left": {"$ref": "#"}, "right": {"$ref": "#"}}});
        assert!(expansion_of(&tree).unwrap().subschemas < 20);
        assert_eq!(expansion_of(&tree).unwrap().recursions, 3);
        assert!(matches!(compile(&tree.to_string()), Compiled::Usable(..)));
        // Data keywords count nothing; a reference the schema does not resolve is refused.
        assert_eq!(
            expansion_of(&json!({"const": {"a": {"b": 1}}, "enum": [[1, 2]]})).unwrap(),
            Expansion {
                subschemas: 1,
                recursions: 0
            }
        );
        assert!(expansion_of(&json!({"$ref": "#/nowhere"})).is_err());
        // Percent-encoded pointers and the root's own `$id` resolve as the compiler does.
        let mut encoded = doubling(40, "$ref");
        encoded["$ref"] = json!("#/%24defs/l%30");
        assert!(expansion_of(&encoded).is_err());
        let mut based = doubling(40, "$ref");
        based["$id"] = json!("https://example.com/s");
        based["$ref"] = json!("https://example.com/s#/$defs/l0");
        assert!(expansion_of(&based).is_err());
        let mut relative = doubling(2, "$ref");
        relative["$id"] = json!("https://example.com/s");
        relative["$ref"] = json!("s#/$defs/l0");
        assert!(
            expansion_of(&relative)
                .unwrap_err()
                .contains("cannot be bounded")
        );
        // With an embedded `$id`, a reference the count cannot resolve is not guessed at.
        let embedded = json!({"$defs": {"x": {"$id": "https://example.com/x", "type": "string"}}, "$ref": "https://example.com/x"});
        assert!(
            expansion_of(&embedded)
                .unwrap_err()
                .contains("cannot be bounded")
        );
    }

    #[test]
    fn patterns_are_counted_wherever_they_are() {
        let schema = json!({"pattern": "ab", "properties": {"pattern": {"pattern": "c"}},
            "items": [{"patternProperties": {"x": {}, "yz": {"pattern": "d"}}}]});
        assert_eq!(patterns_in(&schema), (5, 7));
    }

    #[test]
    fn paths_follow_the_value_shape() {
        let args = json!({"items": [{"0": {"a/b": 1}}]});
        assert_eq!(
            path_segments("/items/0/0/a~1b", &args),
            vec![json!("items"), json!(0), json!("0"), json!("a/b")]
        );
        assert!(path_segments("", &args).is_empty());
    }
}
