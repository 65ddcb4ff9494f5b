//! The commands an operator types: keys, a minted token, and the audit trail.

use super::*;

/// The commands an operator types: keys, a minted token, and the audit trail.
#[tokio::test]
async fn the_cli_creates_lists_and_revokes_keys_mints_tokens_and_prints_the_audit_trail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = format!("sqlite://{}", dir.path().join("cli.db").display());
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .args(args)
            .env("AGUI_GATEWAY_DATABASE_URL", &database)
            .env("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET", SECRET)
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "{args:?}: {}{stdout}", String::from_utf8_lossy(&output.stderr));
        stdout
    };
    let key = cli(&["keys", "create", "--tenant", "default", "--name", "ci", "--agents", "demo"]);
    let key = key.trim();
    assert!(key.starts_with("agk_"), "{key}");
    let id = key.split('_').nth(1).expect("id");
    let listed = cli(&["keys", "list", "--tenant", "default"]);
    assert!(listed.contains(id) && listed.contains("active") && !listed.contains(key), "{listed}");
    cli(&["keys", "revoke", "--tenant", "default", id]);
    assert!(cli(&["keys", "list"]).contains("revoked"));
    let trail = cli(&["audit", "--tenant", "default", "--since", "1h"]);
    assert!(trail.contains("key.create") && trail.contains("key.revoke"), "{trail}");
    assert!(cli(&["audit", "--since", "2999-01-01"]).is_empty());

    let token = cli(&["token", "mint", "--tenant", "default", "--sub", "gina", "--roles", "admin,reviewer"]);
    let token = token.trim();
    let mut validation = jsonwebtoken::Validation::new(Algorithm::HS256);
    validation.set_audience(&["agui-gateway"]);
    let decoded =
        jsonwebtoken::decode::<Value>(token, &jsonwebtoken::DecodingKey::from_secret(SECRET.as_bytes()), &validation)
            .expect("the minted token verifies");
    assert_eq!(decoded.claims["sub"], "gina");
    assert_eq!(decoded.claims["tenant"], "default");
    assert_eq!(decoded.claims["roles"], json!(["admin", "reviewer"]));
}
