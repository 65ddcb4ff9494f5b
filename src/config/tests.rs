//! The configuration's loading, overrides and checks, each refusal by the setting it names.

use super::*;

#[test]
fn the_builtin_config_serves_the_demo_agent_on_sqlite() {
    let config = Config::builtin().expect("default config loads");
    assert_eq!(config.listen, "127.0.0.1:8080");
    assert_eq!(config.database.url, "sqlite://agui-gateway.db");
    assert!(config.agent("demo").is_some());
    assert!(config.tenant("default").is_some());
    assert_eq!(config.limits.max_body_bytes, 4 * 1024 * 1024);
}

#[test]
fn environment_overrides_reach_nested_settings_with_their_types() {
    let config = Config::load(
        None,
        [
            ("AGUI_GATEWAY_DATABASE_URL".to_string(), "postgres://db/x".to_string()),
            ("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES".to_string(), "1024".to_string()),
            ("UNRELATED".to_string(), "1".to_string()),
        ],
    )
    .expect("loads");
    assert_eq!(config.database.url, "postgres://db/x");
    assert_eq!(config.limits.max_body_bytes, 1024);
}

#[test]
fn a_bad_override_is_refused_with_its_name() {
    let error =
        Config::load(None, [("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES".into(), "lots".into())]).expect_err("refused");
    assert!(error.to_string().contains("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES"), "{error}");
    let error = Config::load(None, [("AGUI_GATEWAY_NOPE".into(), "1".into())]).expect_err("refused");
    assert!(error.to_string().contains("no such setting"), "{error}");
}

#[test]
fn an_activity_step_the_protocol_would_refuse_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("activity.toml");
    let agent = |step: &str| format!("[[agents]]\nname = \"painter\"\nkind = \"script\"\nsteps = [ {step} ]\n");
    std::fs::write(&path, agent("{ activity = \"plan\", content = { done = 0 } }")).expect("write");
    Config::load(Some(&path), std::iter::empty()).expect("content alone loads");
    for (step, why) in [
        ("{ activity = \"plan\" }", "neither content nor patch"),
        ("{ activity = \"plan\", content = {}, patch = [] }", "both content and patch"),
        ("{ activity = \"plan\", patch = [ { op = \"replace\", path = \"done\", value = 1 } ] }", "refuses"),
        ("{ activity = \"plan\", patch = [ { op = \"add\", path = \"/done\" } ] }", "refuses"),
        ("{ activity = \"plan\", patch = [ { op = \"merge\", path = \"/done\", value = 1 } ] }", "refuses"),
    ] {
        std::fs::write(&path, agent(step)).expect("write");
        let error = Config::load(Some(&path), std::iter::empty()).expect_err(step).to_string();
        assert!(error.contains("activity step") && error.contains(why), "{step}: {error}");
    }
}

#[test]
fn the_copilotkit_path_defaults_to_the_canonical_base_and_refuses_bad_or_overlapping_ones() {
    let config = Config::builtin().expect("default config loads");
    assert_eq!(config.copilotkit_path, COPILOTKIT_PATH);
    let with = |path: &str| {
        let variable = ("AGUI_GATEWAY_COPILOTKIT_PATH".to_string(), path.to_string());
        Config::load(None, [variable])
    };
    for good in ["/api/copilotkit", "/copilotkit", "/a/b.c/d-e_f~"] {
        assert_eq!(with(good).expect(good).copilotkit_path, good);
    }
    for bad in [
        "api/copilotkit",
        "/api/copilotkit/",
        "/",
        "",
        "/api//copilotkit",
        "/api/../v1",
        "/api/{tenant}",
        "/api copilotkit",
        "/v1",
        "/v1/threads",
        "/v1/agui/agents/x",
        "/console",
        "/metrics/copilotkit",
        "/v1/copilotkit/under",
    ] {
        let error = with(bad).expect_err(bad).to_string();
        assert!(error.contains("copilotkit_path"), "{bad}: {error}");
    }
}

#[test]
fn a_misspelled_setting_is_refused() {
    let dir = std::env::temp_dir().join(format!("agui-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("typo.toml");
    std::fs::write(&path, "[limits]\nmax_body_byte = 10\n").expect("write");
    let error = Config::load(Some(&path), std::iter::empty()).expect_err("refused");
    assert!(error.to_string().contains("max_body_byte"), "{error}");
}

#[test]
fn the_edge_limits_have_defaults_overrides_and_bounds() {
    let config = Config::builtin().expect("loads");
    assert_eq!(config.limits.max_connections, 4096);
    assert_eq!(config.limits.header_read_timeout_secs, 10);
    assert_eq!(config.tenant("default").and_then(|t| t.quotas.max_concurrent_turns), Some(256));
    let config = Config::load(
        None,
        [
            ("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS".to_string(), "10".to_string()),
            ("AGUI_GATEWAY_LIMITS_IDLE_TIMEOUT_SECS".to_string(), "3".to_string()),
            ("AGUI_GATEWAY_LIMITS_MAX_TOOL_SCHEMA_DEPTH".to_string(), "4".to_string()),
        ],
    )
    .expect("loads");
    assert_eq!((config.limits.max_connections, config.limits.idle_timeout_secs), (10, 3));
    assert_eq!(config.limits.max_tool_schema_depth, 4);
    for (name, value, refusal) in [
        ("AGUI_GATEWAY_LIMITS_HEADER_READ_TIMEOUT_SECS", "0", "limits.header_read_timeout_secs"),
        ("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS", "0", "limits.max_connections"),
        ("AGUI_GATEWAY_LIMITS_MAX_HEADER_BYTES", "100", "limits.max_header_bytes"),
    ] {
        let error = Config::load(None, [(name.to_string(), value.to_string())]).expect_err("refused");
        assert!(error.to_string().contains(refusal), "{error}");
    }
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("typo.toml");
    std::fs::write(&path, "[limits]\nmax_conections = 10\n").expect("write");
    let error = Config::load(Some(&path), std::iter::empty()).expect_err("refused").to_string();
    assert!(error.contains("limits.max_conections") && error.contains("'max_connections'"), "{error}");
}

#[test]
fn a_blank_secret_is_refused_at_load_naming_its_setting() {
    for (name, setting) in [
        ("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET", "auth.app_tokens.secret"),
        ("AGUI_GATEWAY_AUTH_METRICS_TOKEN", "auth.metrics_token"),
    ] {
        for blank in [" ".repeat(40), "\t \n".repeat(12)] {
            let error = Config::load(None, [(name.to_string(), blank)]).expect_err("refused").to_string();
            assert!(error.contains(setting) && error.contains("blank"), "{error}");
        }
    }
    let secret = "a real secret of well over thirty-two bytes";
    let config =
        Config::load(None, [("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET".to_string(), secret.to_string())]).expect("loads");
    assert_eq!(config.auth.app_tokens.secret, secret);
}

#[test]
fn content_url_schemes_default_to_https_and_data_and_must_be_schemes() {
    let config = Config::builtin().expect("loads");
    assert_eq!(config.limits.content_url_schemes, ["https", "data"]);
    let config =
        Config::load(None, [("AGUI_GATEWAY_LIMITS_CONTENT_URL_SCHEMES".into(), r#"["https", "http"]"#.into())])
            .expect("loads");
    assert_eq!(config.limits.content_url_schemes, ["https", "http"]);
    for bad in [r#"["https:"]"#, r#"["HTTPS"]"#, r#"[""]"#, r#"["a b"]"#] {
        let error = Config::load(None, [("AGUI_GATEWAY_LIMITS_CONTENT_URL_SCHEMES".into(), bad.into())])
            .expect_err("refused")
            .to_string();
        assert!(error.contains("limits.content_url_schemes"), "{bad}: {error}");
    }
}

#[test]
fn passwords_never_reach_debug_output() {
    let config =
        Config::load(None, [("AGUI_GATEWAY_DATABASE_URL".into(), "postgres://u:hunter2@h/db".into())]).expect("loads");
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn the_gateways_own_secrets_are_named_by_their_settings() {
    let config = Config::load(
        None,
        [
            ("AGUI_GATEWAY_AUTH_METRICS_TOKEN".to_string(), "metrics-token-123".to_string()),
            ("AGUI_GATEWAY_DATABASE_URL".to_string(), "postgres://gw:db-pass-456@db/gw".to_string()),
            ("AGUI_GATEWAY_BUS_NATS_URL".to_string(), "nats://bus:nats-pass-789@nats:4222".to_string()),
        ],
    )
    .expect("loads");
    let secrets = config.own_secrets();
    for (setting, value) in [
        ("auth.metrics_token", "metrics-token-123"),
        ("database.url", "db-pass-456"),
        ("bus.nats_url", "nats-pass-789"),
    ] {
        assert!(secrets.contains(&(setting.to_string(), value.to_string())), "{setting}: {secrets:?}");
    }
    assert!(!secrets.iter().any(|(setting, _)| setting == "auth.app_tokens.secret"), "an empty secret is none");
}
