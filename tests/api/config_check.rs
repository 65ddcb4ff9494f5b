//! `agui-gateway check-config` refuses a typo in any table, naming the key's path and the
//! nearest valid key, where it used to answer "config ok" and run with the setting off.

use std::process::Command;

/// Runs `check-config` on `text`; returns whether it passed and what it printed.
fn check_config(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .expect("check-config runs");
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), printed)
}

const TENANT: &str = "[[tenants]]\nname = \"default\"\n";

#[test]
fn check_config_refuses_a_typo_that_would_switch_a_policy_off() {
    let cases = [
        (
            "[[agents]]\nname = \"ok\"\nkind = \"script\"\nsteps = [{ say = \"hi\" }]\n\n\
             [[agents]]\nname = \"other\"\nkind = \"script\"\nsteps = [{ say = \"hi\" }]\n\n\
             [[agents]]\nname = \"mailer\"\nkind = \"script\"\n\
             steps = [{ say = \"x\" }, { tool = \"send\", result = \"sent\", aproval = \"always\" }]\n",
            "agents[2].steps[1].aproval",
            "did you mean 'approval'?",
        ),
        (
            "[[agents]]\nname = \"llm\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             tools = [{ name = \"send\", url = \"http://127.0.0.1:9/send\", aproval = \"always\" }]\n",
            "agents[0].tools[0].aproval",
            "did you mean 'approval'?",
        ),
        (
            "[[agents]]\nname = \"a\"\nkind = \"script\"\nstepz = [{ say = \"hi\" }]\n",
            "agents[0].stepz",
            "did you mean 'steps'?",
        ),
        (
            "[[agents]]\nname = \"a\"\nkind = \"script\"\nsteps = [{ say = \"hi\" }]\nmcp_servers = [\"x\"]\n",
            "agents[0].mcp_servers",
            "this table takes name, title, description",
        ),
    ];
    for (agents, path, hint) in cases {
        let (passed, printed) = check_config(&format!("{TENANT}{agents}"));
        assert!(!passed, "refused: {agents}\n{printed}");
        assert!(!printed.contains("config ok"), "{printed}");
        assert!(printed.contains(&format!("unknown key {path}")) && printed.contains(hint), "{agents}\n{printed}");
    }
}

#[test]
fn check_config_passes_a_valid_config() {
    let (passed, printed) = check_config(&format!(
        "{TENANT}[[agents]]\nname = \"mailer\"\nkind = \"script\"\n\
         steps = [{{ tool = \"send\", result = \"sent\", approval = \"always\", four_eyes = true }}]\n"
    ));
    assert!(passed && printed.contains("config ok"), "{printed}");
}

#[test]
fn check_config_refuses_a_copilotkit_path_that_is_not_a_base_of_its_own() {
    for (path, says) in [
        ("api/copilotkit", "must start with \"/\""),
        ("/api/copilotkit/", "must start with \"/\" and not end with one"),
        ("/v1/threads", "overlaps the gateway's own routes under /v1/threads"),
        ("/v1", "overlaps the gateway's own routes"),
    ] {
        let (passed, printed) = check_config(&format!("copilotkit_path = \"{path}\"\n{TENANT}"));
        assert!(!passed, "{path}: {printed}");
        assert!(printed.contains("copilotkit_path") && printed.contains(says), "{path}: {printed}");
    }
    let (passed, printed) = check_config(&format!("copilotkit_path = \"/api/copilotkit\"\n{TENANT}"));
    assert!(passed && printed.contains("config ok"), "{printed}");
}

/// Runs `agui-gateway <args>` with `variable` set to bytes that are not UTF-8; returns whether
/// it passed and what it printed.
fn with_non_utf8_variable(variable: &str, args: &[&str]) -> (bool, String) {
    use std::os::unix::ffi::OsStrExt;
    let output = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(args)
        .env(variable, std::ffi::OsStr::from_bytes(b"\xff\xfe"))
        .output()
        .expect("the gateway runs");
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), printed)
}

/// An environment variable that is not UTF-8 used to make every command panic at start: one
/// of someone else's is ignored, one of ours is refused with its name.
#[test]
fn a_variable_that_is_not_utf8_is_ignored_unless_it_is_ours_then_named() {
    let (passed, printed) = with_non_utf8_variable("SOMEONE_ELSES", &["check-config"]);
    assert!(passed && printed.contains("config ok"), "{printed}");
    assert!(!printed.contains("panicked"), "{printed}");
    for command in [&["check-config"][..], &["serve", "--listen", "127.0.0.1:0"][..]] {
        let (passed, printed) = with_non_utf8_variable("AGUI_GATEWAY_DATABASE_URL", command);
        assert!(!passed, "{command:?} refused: {printed}");
        assert!(!printed.contains("panicked"), "{command:?}: {printed}");
        assert!(
            printed.contains("AGUI_GATEWAY_DATABASE_URL") && printed.contains("not valid UTF-8"),
            "{command:?} names the variable: {printed}"
        );
    }
}

/// A setting of a table the configuration does not hold yet is reached by its index and keys
/// (`tenants[0].quotas` is absent from the defaults).
#[test]
fn a_nested_setting_is_reached_by_index_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["check-config"])
        .env("AGUI_GATEWAY_TENANTS_0_QUOTAS_MAX_CONCURRENT_TURNS", "2")
        .output()
        .expect("check-config runs");
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && printed.contains("config ok"), "{printed}");
}
