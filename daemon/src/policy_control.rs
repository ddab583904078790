//! Policy and configuration at runtime (§C8.30–§C8.33): `policy.list`, `policy.set`,
//! `policy.reset` and `daemon.reload` (also what SIGHUP does to `daemon run`, §S3.6).
//!
//! A change is written to `config.json` first ([`appduct_client::config::write_policy`]:
//! atomic replace, 0600, other keys kept) and put in force only once written, so the policy
//! in force is always the one a restart would load. The shared [`PolicyEngine`] is swapped in
//! place: sessions, pending calls and subscriptions are untouched, and the next `tools.call`
//! (and `tools.list`) evaluates the new policy. A call already past its policy step keeps
//! the decision it got.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use appduct_client::config::{Config, Policy, is_valid_tool_key, write_policy};
use appduct_protocol::control::{
    Caller, EventData, PolicyChangeCause, PolicyChangeResult, PolicyChangedData, PolicyDecision,
    PolicyEffective, PolicyListResult, PolicyResetParams, PolicySetParams, ReloadResult,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Map, Value, json};

use crate::approvals::{Approvals, Verdict};
use crate::events::EventBus;
use crate::policy::{PolicyEngine, loosening};
use crate::sessions::SessionManager;

/// The `config.json` keys `daemon.reload` applies without a restart.
pub const RELOADABLE_KEYS: &[&str] = &["policy", "http", "validation", "registry"];

/// Runtime policy and reload; clones share everything.
#[derive(Debug, Clone)]
pub struct PolicyControl {
    policy: PolicyEngine,
    /// The configuration in force (start or last reload), for `restartRequired`.
    running: Arc<Mutex<Config>>,
    state_dir: PathBuf,
    /// Serialises writers of `config.json` (set, reset, reload) and holds the `policy` the file
    /// had when the daemon last read or wrote it (`None`: it did not load then).
    write: Arc<Mutex<Option<Policy>>>,
    /// Where `policy_changed` goes (§C13.1).
    bus: EventBus,
    /// Started, stopped or moved by a reload that changes `http` (§H1).
    http: Option<crate::http_api::HttpApi>,
    /// `validation.arguments` as the calls module reads it (§C10.8).
    arguments: Option<crate::arguments::ArgumentsSwitch>,
    /// Where a reload that changes `registry` applies it (§D18.5).
    sessions: Option<SessionManager>,
    /// With `consent.fallback: "operator"`: a change that loosens policy waits here for an
    /// operator (§C11.2).
    gate: Option<Arc<Approvals>>,
    /// Tests only: runs before each read of `config.json`.
    io_probe: Option<IoProbe>,
}

/// A test hook [`PolicyControl`] runs before it reads `config.json` (tests that block the file
/// I/O and check the daemon still answers).
#[derive(Clone)]
pub struct IoProbe(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for IoProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IoProbe")
    }
}

/// Who asked for a reload: a control request can be held for an operator, a signal cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadBy {
    Request,
    Signal,
}

/// `approval_refused` for a change that loosens policy while operator approvals are on.
fn held(method: &str, change: &str, approval_id: &str, expires_at: u64) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ApprovalRefused,
        format!(
            "{method} would loosen policy ({change}): an operator must approve it ({approval_id}); nothing changed yet"
        ),
    )
    .with_details(json!({
        "reason": "operator_approval_required",
        "approvalId": approval_id,
        "change": change,
        "expiresAt": expires_at,
        "hint": format!("A person runs appduct approvals approve {approval_id} in their own terminal (appduct policy set/reset and appduct daemon reload do it for you when run in one)."),
    }))
}

impl PolicyControl {
    pub fn new(
        policy: PolicyEngine,
        running: Config,
        state_dir: impl Into<PathBuf>,
        bus: EventBus,
    ) -> Self {
        let state_dir = state_dir.into();
        let file_policy = Config::load(&state_dir).ok().map(|l| l.config.policy);
        Self {
            policy,
            running: Arc::new(Mutex::new(running)),
            state_dir,
            write: Arc::new(Mutex::new(file_policy)),
            bus,
            http: None,
            arguments: None,
            sessions: None,
            gate: None,
            io_probe: None,
        }
    }

    /// Runs `probe` before each read of `config.json` (tests only).
    pub fn with_io_probe(mut self, probe: Option<IoProbe>) -> Self {
        self.io_probe = probe;
        self
    }

    fn probe_io(&self) {
        if let Some(probe) = &self.io_probe {
            (probe.0)();
        }
    }

    /// Runs `f` on the blocking pool: `policy.set`, `policy.reset` and `daemon.reload` read and
    /// write `config.json`, which must not stall a runtime thread (a slow or hung filesystem
    /// would stall every connection on it). The request's read stamp goes with it (a held
    /// change is stamped when its line was read, SECURITY.md §4.18).
    pub async fn off_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce(&PolicyControl) -> Result<T, ErrorObject> + Send + 'static,
    ) -> Result<T, ErrorObject> {
        let this = self.clone();
        let read_at = crate::control_server::request_read_at();
        tokio::task::spawn_blocking(move || {
            crate::control_server::with_request_read_at(read_at, || f(&this))
        })
        .await
        .unwrap_or_else(|e| Err(ErrorObject::internal(e.to_string())))
    }

    /// A reload that changes `validation` switches argument validation for the next calls.
    pub fn with_arguments(mut self, arguments: crate::arguments::ArgumentsSwitch) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// Holds loosening changes for an operator when `approvals` has the operator fallback
    /// (§C11.2).
    pub fn with_operator_gate(mut self, approvals: Arc<Approvals>) -> Self {
        if approvals.operator_fallback() {
            self.gate = Some(approvals);
        }
        self
    }

    /// Holds `after` (replacing `before`) for an operator: approving applies it if the policy
    /// in force and in `config.json` is still `before`; it expires after
    /// `consent.approvalTimeoutMs`.
    fn hold(
        &self,
        gate: &Arc<Approvals>,
        method: &str,
        change: &str,
        before: Policy,
        after: Policy,
        announce: (PolicyChangeCause, Option<String>, Option<PolicyDecision>),
    ) -> ErrorObject {
        let this = self.clone();
        let apply: crate::approvals::PolicyApply = Box::new(move || {
            let mut file_policy = this.write.lock().unwrap_or_else(PoisonError::into_inner);
            if this.policy.policy() != before {
                return Err(ErrorObject::application(
                    ErrorType::InvalidRequest,
                    "The policy changed after this change was asked for; nothing was applied",
                )
                .with_details(json!({"reason": "policy_changed"})));
            }
            this.commit(
                &mut file_policy,
                after,
                announce.0,
                announce.1.as_deref(),
                announce.2,
            )
            .map(|_| ())
        });
        let wait = gate.approval_timeout();
        match gate.park_policy(method, change, Caller::Cli, apply, wait) {
            Ok((approval_id, expires_at)) => {
                let expire = Arc::clone(gate);
                let id = approval_id.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    expire.settle(&id, Verdict::Expired);
                });
                held(method, change, &approval_id, expires_at)
            }
            Err(e) => e,
        }
    }

    /// Lets `daemon.reload` apply the `registry` key to this engine (§D18.5).
    pub fn with_sessions(mut self, sessions: SessionManager) -> Self {
        self.sessions = Some(sessions);
        self
    }

    /// Lets `daemon.reload` apply the `http` key to this HTTP API (§H1).
    pub fn with_http(mut self, http: crate::http_api::HttpApi) -> Self {
        self.http = Some(http);
        self
    }

    /// Emits `policy_changed` with the policy now in force.
    fn announce(
        &self,
        cause: PolicyChangeCause,
        target: Option<&str>,
        decision: Option<PolicyDecision>,
    ) {
        let data = PolicyChangedData::new(cause, self.policy.summary())
            .with_target(target.map(str::to_owned))
            .with_decision(decision);
        self.bus.emit(None, None, EventData::PolicyChanged(data));
    }

    pub fn engine(&self) -> &PolicyEngine {
        &self.policy
    }

    fn config_path(&self) -> String {
        self.policy.config_path().display().to_string()
    }

    /// `policy.list`: the policy, and the deciding rule of every tool of every live session.
    pub fn list(&self, sessions: &SessionManager) -> PolicyListResult {
        let policy = self.policy.policy();
        let mut effective = Vec::new();
        let mut live = sessions.list();
        live.sort_by(|a, b| a.alias.cmp(&b.alias));
        for s in live {
            let Some(tools) = sessions.tools_of(&s.session_id) else {
                continue;
            };
            for tool in tools {
                let e = crate::policy::evaluate_policy(
                    &policy,
                    &s.alias,
                    &tool.name,
                    tool.is_destructive(),
                );
                effective.push(PolicyEffective::new(
                    &s.session_id,
                    &s.alias,
                    &tool.name,
                    e.decision,
                    e.source.to_string(),
                ));
            }
        }
        PolicyListResult::new(self.policy.summary(), self.config_path(), effective)
    }

    /// `policy.set`: `target` is `default`, `destructive` or a `policy.tools` key.
    pub fn set(&self, p: &PolicySetParams) -> Result<PolicyChangeResult, ErrorObject> {
        check_target(&p.target)?;
        let announce = (
            PolicyChangeCause::Set,
            Some(p.target.as_str()),
            Some(p.decision),
        );
        self.change(announce, |policy| match p.target.as_str() {
            "default" => policy.default = p.decision,
            "destructive" => policy.destructive = p.decision,
            key => {
                policy.tools.insert(key.to_owned(), p.decision);
            }
        })
    }

    /// `policy.reset`: `default` / `destructive` back to `allow`, a `policy.tools` key
    /// removed, or (no target) the whole policy back to the built-in defaults.
    pub fn reset(&self, p: &PolicyResetParams) -> Result<PolicyChangeResult, ErrorObject> {
        if let Some(target) = &p.target {
            check_target(target)?;
        }
        let defaults = Policy::default();
        let announce = (PolicyChangeCause::Reset, p.target.as_deref(), None);
        self.change(announce, |policy| match p.target.as_deref() {
            None => *policy = defaults.clone(),
            Some("default") => policy.default = defaults.default,
            Some("destructive") => policy.destructive = defaults.destructive,
            Some(key) => {
                policy.tools.remove(key);
            }
        })
    }

    fn change(
        &self,
        (cause, target, decision): (PolicyChangeCause, Option<&str>, Option<PolicyDecision>),
        edit: impl FnOnce(&mut Policy),
    ) -> Result<PolicyChangeResult, ErrorObject> {
        let mut file_policy = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        self.file_unchanged(file_policy.as_ref())?;
        let before = self.policy.policy();
        let mut after = before.clone();
        edit(&mut after);
        if after != before
            && let Some(gate) = &self.gate
            && let Some(change) = loosening(&before, &after)
        {
            drop(file_policy);
            let method = match cause {
                PolicyChangeCause::Reset => "policy.reset",
                _ => "policy.set",
            };
            return Err(self.hold(
                gate,
                method,
                &change,
                before,
                after,
                (cause, target.map(str::to_owned), decision),
            ));
        }
        self.commit(&mut file_policy, after, cause, target, decision)
    }

    /// Writes `after` to `config.json` and puts it in force, unless it is the policy in force.
    fn commit(
        &self,
        file_policy: &mut Option<Policy>,
        after: Policy,
        cause: PolicyChangeCause,
        target: Option<&str>,
        decision: Option<PolicyDecision>,
    ) -> Result<PolicyChangeResult, ErrorObject> {
        let changed = after != self.policy.policy();
        if changed {
            self.file_unchanged(file_policy.as_ref())?;
            write_policy(&self.state_dir, &after).map_err(|e| {
                ErrorObject::internal(format!(
                    "cannot write {}: {e}; the policy was not changed",
                    self.config_path()
                ))
            })?;
            *file_policy = Some(after.clone());
            self.policy.replace(after.clone());
            self.running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .policy = after;
            tracing::info!("policy changed at runtime");
            self.announce(cause, target, decision);
        }
        Ok(PolicyChangeResult::new(
            changed,
            self.policy.summary(),
            self.config_path(),
        ))
    }

    /// Refuses a change while `config.json` holds a `policy` other than the one the daemon last
    /// read or wrote there (a hand edit not yet reloaded), or no longer loads: writing the
    /// running policy over it would silently erase that edit (§C8.31).
    fn file_unchanged(&self, last: Option<&Policy>) -> Result<(), ErrorObject> {
        let refuse = |why: String| {
            ErrorObject::application(
                ErrorType::InvalidRequest,
                format!("{why}; the policy was not changed"),
            )
            .with_details(json!({
                "reason": "config_changed",
                "configPath": self.config_path(),
                "hint": "Run appduct daemon reload first (it applies the file), then try again.",
            }))
        };
        self.probe_io();
        match Config::load(&self.state_dir) {
            Ok(loaded) if Some(&loaded.config.policy) == last => Ok(()),
            Ok(_) => Err(refuse(format!(
                "The policy in {} was edited since the daemon last read it (not reloaded)",
                self.config_path()
            ))),
            Err(e) => Err(refuse(format!("{e}"))),
        }
    }

    /// `daemon.reload` (and SIGHUP): re-reads `config.json`; a file that does not load leaves
    /// everything in force and fails with the loader's message. With the operator gate, a file
    /// whose policy loosens the one in force is held for an operator when asked by request,
    /// and refused (nothing applied, the reason logged) when asked by a signal (§C11.2).
    pub fn reload(&self, by: ReloadBy) -> Result<ReloadResult, ErrorObject> {
        let mut file_policy = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let new = self.load_for_reload()?;
        let before = self.policy.policy();
        if let Some(gate) = &self.gate
            && let Some(change) = loosening(&before, &new.policy)
        {
            if by == ReloadBy::Signal {
                tracing::warn!(%change, "SIGHUP: config.json loosens policy ({change}); not applied: run appduct daemon reload in a terminal, where an operator approves it");
                return Err(ErrorObject::application(
                    ErrorType::ApprovalRefused,
                    format!("config.json loosens policy ({change}); a signal cannot be approved, so nothing was applied: run appduct daemon reload in a terminal"),
                )
                .with_details(json!({"reason": "operator_approval_required", "change": change})));
            }
            drop(file_policy);
            let this = self.clone();
            let approved = new.policy;
            let apply_reload: crate::approvals::PolicyApply = Box::new(move || {
                // Under the write lock, loads the file once and applies exactly that load, only
                // if its policy is the one the operator approved (§C11.2): a file swapped after
                // the approval was asked for is refused, never applied unchecked.
                let mut file_policy = this.write.lock().unwrap_or_else(PoisonError::into_inner);
                let new = this.load_for_reload()?;
                if new.policy != approved {
                    return Err(ErrorObject::application(
                        ErrorType::InvalidRequest,
                        "config.json changed after this reload was asked for; nothing was applied",
                    )
                    .with_details(json!({"reason": "config_changed"})));
                }
                this.apply_config(&mut file_policy, new).map(|_| ())
            });
            let wait = gate.approval_timeout();
            return Err(
                match gate.park_policy("daemon.reload", &change, Caller::Cli, apply_reload, wait) {
                    Ok((approval_id, expires_at)) => {
                        let expire = Arc::clone(gate);
                        let id = approval_id.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            expire.settle(&id, Verdict::Expired);
                        });
                        held("daemon.reload", &change, &approval_id, expires_at)
                    }
                    Err(e) => e,
                },
            );
        }
        self.apply_config(&mut file_policy, new)
    }

    /// Loads `config.json` for a reload: a file that is missing or does not load is an error
    /// that leaves everything in force.
    fn load_for_reload(&self) -> Result<Config, ErrorObject> {
        self.probe_io();
        // A deleted file would load as the built-in defaults (all `allow`): keep what runs.
        if let Err(e) = std::fs::symlink_metadata(self.policy.config_path())
            && e.kind() == std::io::ErrorKind::NotFound
        {
            let mut details = Map::new();
            details.insert("configPath".into(), Value::String(self.config_path()));
            return Err(ErrorObject::invalid_params(
                format!(
                    "{} is missing; the running configuration stays in force",
                    self.config_path()
                ),
                details,
            ));
        }
        let loaded = Config::load(&self.state_dir).map_err(|e| {
            let mut details = Map::new();
            details.insert("configPath".into(), Value::String(self.config_path()));
            ErrorObject::invalid_params(
                format!("{e}; the running configuration stays in force"),
                details,
            )
        })?;
        for warning in &loaded.warnings {
            tracing::warn!("{warning}");
        }
        Ok(loaded.config)
    }

    /// Puts `new` (a `config.json` already loaded and checked) in force; the caller holds the
    /// `write` lock, so nothing else writes or applies the file meanwhile.
    fn apply_config(
        &self,
        file_policy: &mut Option<Policy>,
        new: Config,
    ) -> Result<ReloadResult, ErrorObject> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let mut applied = Vec::new();
        // First, as it can fail: a port that cannot be bound changes nothing (§H1).
        if let Some(http) = &self.http
            && new.http != running.http
        {
            http.apply(new.http.as_ref()).map_err(|e| {
                let port = new.http.as_ref().map_or(0, |h| h.port);
                ErrorObject::internal(format!(
                    "cannot start the HTTP API on 127.0.0.1:{port}: {e}; the running configuration stays in force"
                ))
            })?;
            running.http = new.http.clone();
            applied.push("http".to_owned());
        }
        if new.validation != running.validation {
            if let Some(arguments) = &self.arguments {
                arguments.set(new.validation.arguments);
            }
            running.validation = new.validation;
            applied.push("validation".to_owned());
        }
        // §D18.5: later registry frames are checked against the new list; tools already
        // registered stay.
        if let Some(sessions) = &self.sessions
            && new.registry_require != running.registry_require
        {
            sessions.set_registry_require(new.registry_require.clone());
            running.registry_require = new.registry_require.clone();
            applied.push("registry".to_owned());
        }
        *file_policy = Some(new.policy.clone());
        if new.policy != running.policy {
            self.policy.replace(new.policy.clone());
            running.policy = new.policy.clone();
            applied.push("policy".to_owned());
            self.announce(PolicyChangeCause::Reload, None, None);
        }
        let restart_required = restart_required(&running, &new);
        tracing::info!(?applied, ?restart_required, "configuration reloaded");
        Ok(ReloadResult::new(
            applied,
            restart_required,
            self.policy.summary(),
            self.config_path(),
        ))
    }
}

/// The keys of `config.json` (§S2.2) that differ between `old` and `new` and need a restart.
pub fn restart_required(old: &Config, new: &Config) -> Vec<String> {
    let mut keys = Vec::new();
    let mut differs = |key: &str, changed: bool| {
        if changed {
            keys.push(key.to_owned());
        }
    };
    differs("wssPort", old.wss_port != new.wss_port);
    differs("keyPath", old.key_path != new.key_path);
    differs("graceSeconds", old.grace_seconds != new.grace_seconds);
    differs(
        "linkTtlSeconds",
        old.link_ttl_seconds != new.link_ttl_seconds,
    );
    differs(
        "keepaliveIntervalSeconds",
        old.keepalive_interval_seconds != new.keepalive_interval_seconds,
    );
    differs(
        "eventBufferSize",
        old.event_buffer_size != new.event_buffer_size,
    );
    differs(
        "auditRetentionDays",
        old.audit_retention_days != new.audit_retention_days,
    );
    differs(
        "daemonLogMaxBytes",
        old.daemon_log_max_bytes != new.daemon_log_max_bytes,
    );
    differs(
        "eventsLogMaxBytes",
        old.events_log_max_bytes != new.events_log_max_bytes,
    );
    differs("advertisedIp", old.advertised_ip != new.advertised_ip);
    differs("webOrigins", old.web_origins != new.web_origins);
    differs("consent", old.consent != new.consent);
    differs("results", old.results != new.results);
    keys
}

fn check_target(target: &str) -> Result<(), ErrorObject> {
    if target == "default" || target == "destructive" || is_valid_tool_key(target) {
        return Ok(());
    }
    let mut details = Map::new();
    details.insert("target".into(), Value::String(target.to_owned()));
    Err(ErrorObject::invalid_params(
        "target must be \"default\", \"destructive\" or \"<alias>/<tool>\" (alias: lowercase \
         letters, digits and hyphens; tool: 1 to 64 of A-Z a-z 0-9 _ -; either part may use * \
         as a glob)",
        details,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_client::config::ConsentFallback;

    #[test]
    fn a_changed_consent_needs_a_restart() {
        let old = Config::defaults(std::path::Path::new("/tmp/appduct-test"));
        let mut new = old.clone();
        assert!(restart_required(&old, &new).is_empty());
        new.consent.fallback = ConsentFallback::Operator;
        assert_eq!(restart_required(&old, &new), vec!["consent".to_owned()]);
    }
}
