//! The checks a loaded configuration must pass before the gateway uses it: each refusal names
//! the setting, so a bad file or variable stops the start with a line that says what to fix.

use std::collections::HashSet;

use super::agents::ScriptStep;
use super::settings::{AgentKindConfig, Config, ConfigError, COPILOTKIT_PATH, GATEWAY_ROUTE_PREFIXES};

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        validate_copilotkit_path(&self.copilotkit_path)
            .map_err(|why| ConfigError::Invalid(format!("copilotkit_path: {why}")))?;
        if !(self.database.url.starts_with("sqlite:") || self.database.url.starts_with("postgres")) {
            return invalid("database.url must start with sqlite: or postgres://".into());
        }
        if !matches!(self.bus.kind.as_str(), "postgres" | "nats") {
            return invalid(format!("bus.kind must be \"postgres\" or \"nats\", not \"{}\"", self.bus.kind));
        }
        if self.bus.kind == "nats" && !self.bus.nats_url.starts_with("nats://") {
            return invalid("bus.nats_url must start with nats:// when bus.kind = \"nats\"".into());
        }
        if self.tls.cert_file.is_empty() != self.tls.key_file.is_empty() {
            let (set, unset) = if self.tls.cert_file.is_empty() {
                ("tls.key_file", "tls.cert_file")
            } else {
                ("tls.cert_file", "tls.key_file")
            };
            return invalid(format!(
                "{set} is set but {unset} is not: serving HTTPS takes both (or neither, for plain HTTP)"
            ));
        }
        if self.event_log.batch_max_events == 0
            || self.event_log.writers == 0
            || self.event_log.pipeline_depth == 0
            || self.event_log.partition_turns == 0
        {
            return invalid(
                "event_log.batch_max_events, event_log.writers, event_log.pipeline_depth and \
                 event_log.partition_turns must be at least 1"
                    .into(),
            );
        }
        if self.limits.keepalive_secs == 0 || self.limits.stream_max_secs == 0 {
            return invalid("limits.keepalive_secs and limits.stream_max_secs must be at least 1".into());
        }
        if self.limits.max_streams_per_caller == 0 || self.limits.max_streams_per_thread == 0 {
            return invalid(
                "limits.max_streams_per_caller and limits.max_streams_per_thread must be at least 1".into(),
            );
        }
        let limits = &self.limits;
        let edge = [
            ("max_connections", limits.max_connections as u64),
            ("header_read_timeout_secs", limits.header_read_timeout_secs),
            ("idle_timeout_secs", limits.idle_timeout_secs),
            ("h2_keepalive_interval_secs", limits.h2_keepalive_interval_secs),
            ("h2_keepalive_timeout_secs", limits.h2_keepalive_timeout_secs),
            ("body_read_timeout_secs", limits.body_read_timeout_secs),
            ("max_json_values", limits.max_json_values as u64),
            ("max_tool_schema_bytes", limits.max_tool_schema_bytes as u64),
            ("max_tool_schema_depth", limits.max_tool_schema_depth as u64),
            ("max_content_part_bytes", limits.max_content_part_bytes as u64),
            ("max_content_bytes", limits.max_content_bytes as u64),
        ];
        if let Some((name, _)) = edge.iter().find(|(_, value)| *value == 0) {
            return invalid(format!("limits.{name} must be at least 1"));
        }
        if limits.max_connections > 1_000_000 {
            return invalid("limits.max_connections must be at most 1000000".into());
        }
        if let Some(scheme) = limits.content_url_schemes.iter().find(|scheme| {
            crate::protocol::input::url_scheme(&format!("{scheme}:")).as_deref() != Some(scheme.as_str())
        }) {
            return invalid(format!(
                "limits.content_url_schemes: '{scheme}' is no URL scheme (lower-case, as \"https\" or \"data\")"
            ));
        }
        // hyper's smallest read buffer: a smaller one would not hold a plain request line.
        if limits.max_header_bytes < 8192 {
            return invalid("limits.max_header_bytes must be at least 8192".into());
        }
        let turns = &self.turns;
        if turns.heartbeat_ms == 0 || turns.sweep_ms == 0 || turns.lease_ms <= turns.heartbeat_ms * 2 {
            return invalid(
                "turns: heartbeat_ms and sweep_ms must be at least 1, lease_ms over twice heartbeat_ms".into(),
            );
        }
        if self.retention.batch == 0 || self.retention.interval_secs == 0 {
            return invalid("retention.batch and retention.interval_secs must be at least 1".into());
        }
        self.validate_auth()?;
        let mut names = HashSet::new();
        for tenant in &self.tenants {
            if !crate::ids::is_valid_name(&tenant.name) || !names.insert(&tenant.name) {
                return invalid(format!("tenant '{}' is duplicated or not a valid name", tenant.name));
            }
            for origin in &tenant.cors_origins {
                let scheme_ok = origin.starts_with("https://") || origin.starts_with("http://");
                if !scheme_ok || origin.ends_with('/') || origin.contains('*') {
                    return invalid(format!(
                        "tenant '{}': cors_origins entry '{origin}' must be an exact origin such as https://app.example",
                        tenant.name
                    ));
                }
            }
        }
        let mut names = HashSet::new();
        for agent in &self.agents {
            if !crate::ids::is_valid_name(&agent.name) || !names.insert(&agent.name) {
                return invalid(format!("agent '{}' is duplicated or not a valid name", agent.name));
            }
            for tenant in &agent.tenants {
                if self.tenant(tenant).is_none() {
                    return invalid(format!("agent '{}' names unknown tenant '{tenant}'", agent.name));
                }
            }
            for (key, schema) in &agent.editable_state {
                if key == "board" {
                    return invalid(format!("agent '{}': the board is not editable state", agent.name));
                }
                if let Err(why) = jsonschema::validator_for(schema) {
                    return invalid(format!(
                        "agent '{}': editable_state.{key} is not a valid JSON Schema: {why}",
                        agent.name
                    ));
                }
            }
            if let Some(card) = &agent.card {
                if let Err(why) = jsonschema::validator_for(card) {
                    return invalid(format!("agent '{}': its card is not a valid JSON Schema: {why}", agent.name));
                }
            }
            match &agent.kind {
                AgentKindConfig::Script(script) => {
                    if script.chunk_chars == 0 {
                        return invalid(format!("agent '{}': chunk_chars must be at least 1", agent.name));
                    }
                    if script.steps.is_empty() {
                        return invalid(format!("agent '{}' has no steps", agent.name));
                    }
                    for step in &script.steps {
                        if let ScriptStep::Delegate { delegate, .. } = step {
                            if !self.agents.iter().any(|a| a.name == *delegate) {
                                return invalid(format!(
                                    "agent '{}' delegates to '{delegate}', which is no agent",
                                    agent.name
                                ));
                            }
                        }
                        if let ScriptStep::Activity { activity, content, patch } = step {
                            if let Err(why) = activity_step(activity, content.is_some(), patch.as_deref()) {
                                return invalid(format!("agent '{}': its activity step {why}", agent.name));
                            }
                        }
                    }
                }
                AgentKindConfig::Openai(openai) => {
                    if let Err(why) = openai.validate() {
                        return invalid(format!("agent '{}': {why}", agent.name));
                    }
                    if let Some(unknown) = openai.delegates.iter().find(|d| !self.agents.iter().any(|a| a.name == **d))
                    {
                        return invalid(format!("agent '{}' delegates to '{unknown}', which is no agent", agent.name));
                    }
                }
                AgentKindConfig::Agui(agui) => {
                    if let Err(why) = agui.validate() {
                        return invalid(format!("agent '{}': {why}", agent.name));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A script's `activity` step: a type, and either content or a patch the official client takes
/// (it refuses a bad pointer or an op without its `value`, and so would end the run).
fn activity_step(
    activity: &str,
    has_content: bool,
    patch: Option<&[crate::protocol::events::PatchOp]>,
) -> Result<(), String> {
    if activity.is_empty() {
        return Err("names no activity type".into());
    }
    let Some(patch) = patch else {
        return if has_content { Ok(()) } else { Err(format!("'{activity}' has neither content nor patch")) };
    };
    if has_content {
        return Err(format!("'{activity}' has both content and patch"));
    }
    let pointer = |p: &str| p.is_empty() || p.starts_with('/');
    for op in patch {
        let known = ["add", "remove", "replace", "move", "copy", "test"].contains(&op.op.as_str());
        let needs_value = ["add", "replace", "test"].contains(&op.op.as_str());
        let needs_from = ["move", "copy"].contains(&op.op.as_str());
        if !known
            || !pointer(&op.path)
            || (needs_value && op.value.is_none())
            || (needs_from && !op.from.as_deref().is_some_and(pointer))
        {
            return Err(format!("'{activity}' has a patch operation the protocol refuses: {} at '{}'", op.op, op.path));
        }
    }
    Ok(())
}

/// A base path for the CopilotKit runtime's routes: absolute, no trailing `/`, plain segments
/// (compared byte for byte with request paths, so nothing to percent-decode), and clear of the
/// gateway's other routes. Another base may not overlap the canonical one either: its old
/// path answers 404 once it is moved.
fn validate_copilotkit_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(format!("'{path}' must start with \"/\" and not end with one (e.g. \"/api/copilotkit\")"));
    }
    let plain = |segment: &str| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    };
    if !path[1..].split('/').all(plain) {
        return Err(format!("'{path}' must be segments of letters, digits, '-', '.', '_' or '~'"));
    }
    // One path under (or equal to) another, segment by segment.
    let within = |inner: &str, outer: &str| {
        inner == outer || inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'))
    };
    let own = GATEWAY_ROUTE_PREFIXES.iter().copied();
    let canonical = Some(COPILOTKIT_PATH).filter(|canonical| *canonical != path);
    match own.chain(canonical).find(|route| within(path, route) || within(route, path)) {
        Some(route) => Err(format!("'{path}' overlaps the gateway's own routes under {route}")),
        None => Ok(()),
    }
}

impl Config {
    /// The `[auth]` section checked against the rest of the configuration (its tenants).
    fn validate_auth(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let auth = &self.auth;
        if !matches!(auth.local_dev.as_str(), "auto" | "on" | "off") {
            return invalid(format!("auth.local_dev must be auto, on or off, not '{}'", auth.local_dev));
        }
        if auth.revocation_check_ms == 0 || auth.failure_report_secs == 0 {
            return invalid("auth.revocation_check_ms and auth.failure_report_secs must be at least 1".into());
        }
        // A secret of only whitespace is no secret (and 40 spaces pass a length check): most
        // likely a template's placeholder or a variable that expanded to nothing but spaces.
        for (setting, secret) in
            [("auth.app_tokens.secret", &auth.app_tokens.secret), ("auth.metrics_token", &auth.metrics_token)]
        {
            if !secret.is_empty() && secret.trim().is_empty() {
                return invalid(format!("{setting} is blank (only whitespace): give a real secret, or leave it empty"));
            }
        }
        let app = &auth.app_tokens;
        match app.algorithm.as_str() {
            "HS256" => {
                if !app.secret.is_empty() && app.secret.len() < 32 {
                    return invalid("auth.app_tokens.secret must be at least 32 bytes".into());
                }
            }
            "EdDSA" | "RS256" => {
                if !app.secret.is_empty() {
                    return invalid(format!("auth.app_tokens.secret is for HS256; {} takes key files", app.algorithm));
                }
            }
            other => return invalid(format!("auth.app_tokens.algorithm must be HS256, EdDSA or RS256, not '{other}'")),
        }
        if app.issuer.is_empty() || app.audience.is_empty() || app.exchange_ttl_secs == 0 || app.mint_ttl_secs == 0 {
            return invalid("auth.app_tokens: issuer, audience and the ttls must be set".into());
        }
        let mut names = HashSet::new();
        let mut issuers = HashSet::from([app.issuer.as_str()]);
        for provider in &auth.identity_providers {
            let name = &provider.name;
            if !crate::ids::is_valid_name(name) || !names.insert(name) {
                return invalid(format!("identity provider '{name}' is duplicated or not a valid name"));
            }
            if provider.issuer.is_empty() || !issuers.insert(provider.issuer.as_str()) {
                return invalid(format!(
                    "identity provider '{name}': issuer must be set and differ from every other issuer (app tokens' too)"
                ));
            }
            if provider.audience.is_empty() {
                return invalid(format!("identity provider '{name}': audience must name at least one audience"));
            }
            let sources = [&provider.jwks_url, &provider.jwks_file, &provider.public_key_file];
            if sources.iter().filter(|s| !s.is_empty()).count() != 1 {
                return invalid(format!(
                    "identity provider '{name}': give exactly one of jwks_url, jwks_file, public_key_file"
                ));
            }
            let url = provider.jwks_url.as_str();
            if !url.is_empty() && !url.starts_with("https://") {
                if !url.starts_with("http://") {
                    return invalid(format!("identity provider '{name}': jwks_url must be an https:// URL"));
                }
                if !provider.allow_insecure_http {
                    return invalid(format!(
                        "identity provider '{name}': jwks_url must be an https:// URL; a plain http:// one lets anyone \
                         on the path hand the gateway a signing key (set allow_insecure_http = true to accept that \
                         risk, see docs/config.md)"
                    ));
                }
            }
            for algorithm in &provider.algorithms {
                if !matches!(algorithm.as_str(), "RS256" | "RS384" | "RS512" | "PS256" | "ES256" | "ES384" | "EdDSA") {
                    return invalid(format!(
                        "identity provider '{name}': algorithm '{algorithm}' is not accepted (asymmetric ones only)"
                    ));
                }
            }
            if !provider.public_key_file.is_empty() && provider.algorithms.len() != 1 {
                return invalid(format!(
                    "identity provider '{name}': a public_key_file needs algorithms = [its one algorithm]"
                ));
            }
            if provider.refresh_secs == 0 {
                return invalid(format!("identity provider '{name}': refresh_secs must be at least 1"));
            }
            if provider.tenants.is_empty() && self.tenants.len() > 1 {
                return invalid(format!(
                    "identity provider '{name}': with more than one tenant configured, name the tenants it speaks \
                     for (tenants = [\"…\"]), so that it cannot assert another tenant's people"
                ));
            }
            if let Some(unknown) = provider.tenants.iter().find(|t| self.tenant(t).is_none()) {
                return invalid(format!("identity provider '{name}' names unknown tenant '{unknown}'"));
            }
        }
        Ok(())
    }
}
