//! Hiding secrets in text the gateway logs or shows. It sits below `config` and `store`, which
//! both print database URLs.
//!
//! Secret values the gateway holds (a tool's or an MCP server's secret headers, an upstream's,
//! a model's API key: each an environment variable the configuration names) are replaced by a
//! placeholder naming their variable (`‹secret:BILLING_TOKEN›`) wherever they would be recorded,
//! streamed, sent to a model or logged ([`mask_secrets`]): as they are, as the token of a
//! `Bearer <value>`, and escaped inside JSON strings (once or twice). The values are read when a
//! configuration naming their variables is loaded ([`hold_secrets_of`]). The gateway's own
//! secrets (its app-token signing secret, its metrics token, the passwords in its database and
//! NATS URLs) are masked the same way, each placeholder naming its setting
//! (`‹secret:auth.metrics_token›`, [`hold_setting_secrets`]).
//!
//! A URL is parsed, not searched: the password of its user-info and the values of query
//! parameters that carry secrets (`?password=`, `?sslpassword=`, tokens, keys) are replaced by
//! `***`, whatever characters they hold (a password with `@` in it included). A URL that does
//! not parse shows its scheme only.

/// Query parameters whose value is a secret (compared without case).
const SECRET_PARAMETERS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "pass",
    "sslpassword",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "auth_token",
    "api_key",
    "apikey",
    "key",
    "sig",
    "signature",
];

fn is_secret(parameter: &str) -> bool {
    let parameter = parameter.to_ascii_lowercase();
    SECRET_PARAMETERS.contains(&parameter.as_str()) || parameter.contains("password") || parameter.contains("secret")
}

/// `postgres://user:secret@host/db?password=x` → `postgres://user:***@host/db?password=***`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        // Nothing can be told apart in it: only the scheme is safe to show.
        return match url.split_once(':') {
            Some((scheme, _))
                if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                format!("{scheme}://*** (not a valid URL)")
            }
            _ => "*** (not a valid URL)".to_string(),
        };
    };
    let mut changed = false;
    if parsed.password().is_some() {
        // Fails only for URLs that cannot have a user-info, which have no password either.
        changed |= parsed.set_password(Some("***")).is_ok();
    }
    if parsed.query_pairs().any(|(name, _)| is_secret(&name)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let value = if is_secret(&name) { "***".to_string() } else { value.into_owned() };
                (name.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    // An URL with nothing to hide is shown exactly as written.
    if changed {
        parsed.to_string()
    } else {
        url.to_string()
    }
}

/// The secrets `url` holds: its user-info's password and the values of its secret query
/// parameters, as written and decoded (what [`redact_url`] hides).
pub fn url_secrets(url: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(url) else { return Vec::new() };
    let mut secrets = Vec::new();
    if let Some(password) = parsed.password() {
        secrets.push(password.to_string());
        if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
            secrets.push(decoded.into_owned());
        }
    }
    for (name, value) in parsed.query_pairs() {
        if is_secret(&name) {
            secrets.push(value.into_owned());
        }
    }
    secrets.retain(|secret| !secret.is_empty());
    secrets.dedup();
    secrets
}

/// `text` with every `http://` or `https://` URL in it passed through [`redact_url`]: for
/// errors of HTTP clients, which name the URL they failed on.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = ["http://", "https://"].iter().filter_map(|scheme| rest.find(scheme)).min() {
        out.push_str(&rest[..start]);
        let url = &rest[start..];
        let end =
            url.find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ',')).unwrap_or(url.len());
        out.push_str(&redact_url(&url[..end]));
        rest = &url[end..];
    }
    out.push_str(rest);
    out
}

/// The environment variables whose values are secrets the gateway holds, and every form of
/// their values to look for (longest first, each with its placeholder). The forms are made when
/// a configuration naming the variables is loaded: the gateway never changes its own
/// environment, so what a request reads later is the same value.
static HELD: std::sync::RwLock<Held> =
    std::sync::RwLock::new(Held { variables: Vec::new(), settings: Vec::new(), forms: Vec::new() });

struct Held {
    variables: Vec<String>,
    /// The gateway's own secrets: (the setting that holds it, its value).
    settings: Vec<(String, String)>,
    forms: Vec<(String, String)>,
}

/// A value shorter than this is not searched for: masking every `abc` in a stream would garble
/// it and hide nothing worth hiding.
const SHORTEST_SECRET: usize = 6;

/// Makes the values of these environment variables secrets to mask from now on (each time the
/// gateway starts with a configuration naming them).
pub fn hold_secrets_of(variables: impl IntoIterator<Item = String>) {
    let mut held = HELD.write().unwrap_or_else(|p| p.into_inner());
    for variable in variables {
        if !variable.is_empty() && !held.variables.contains(&variable) {
            held.variables.push(variable);
        }
    }
    held.forms = secret_forms(&held);
}

/// Makes the gateway's own secrets — pairs of the setting that holds one and its value
/// (`auth.metrics_token`, a database URL's password) — secrets to mask from now on, each shown
/// as the placeholder naming its setting.
pub fn hold_setting_secrets(settings: impl IntoIterator<Item = (String, String)>) {
    let mut held = HELD.write().unwrap_or_else(|p| p.into_inner());
    for (setting, value) in settings {
        if !value.is_empty() && !held.settings.contains(&(setting.clone(), value.clone())) {
            held.settings.push((setting, value));
        }
    }
    held.forms = secret_forms(&held);
}

/// The placeholder that stands for the secret of `variable`.
pub fn secret_placeholder(variable: &str) -> String {
    format!("\u{2039}secret:{variable}\u{203a}")
}

/// Every form of the held secrets to look for (the variables' values and the settings'),
/// longest first, with its placeholder.
fn secret_forms(held: &Held) -> Vec<(String, String)> {
    let variables =
        held.variables.iter().filter_map(|variable| Some((variable.as_str(), std::env::var(variable).ok()?)));
    let settings = held.settings.iter().map(|(setting, value)| (setting.as_str(), value.clone()));
    let mut forms: Vec<(String, String)> = Vec::new();
    for (name, value) in variables.chain(settings) {
        let placeholder = secret_placeholder(name);
        let bare = value.strip_prefix("Bearer ").unwrap_or(&value).to_string();
        for plain in [value.clone(), bare] {
            if plain.chars().count() < SHORTEST_SECRET {
                continue;
            }
            let once = json_escaped(&plain);
            let twice = json_escaped(&once);
            for form in [plain, once, twice] {
                if !forms.iter().any(|(known, _)| *known == form) {
                    forms.push((form, placeholder.clone()));
                }
            }
        }
    }
    forms.sort_by_key(|(form, _)| std::cmp::Reverse(form.len()));
    forms
}

fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default().to_string()
}

/// `text` with every held secret replaced by its placeholder; borrowed when it holds none.
pub fn mask_secrets(text: &str) -> std::borrow::Cow<'_, str> {
    let held = HELD.read().unwrap_or_else(|p| p.into_inner());
    let mut masked = std::borrow::Cow::Borrowed(text);
    for (form, placeholder) in &held.forms {
        if masked.contains(form.as_str()) {
            masked = std::borrow::Cow::Owned(masked.replace(form.as_str(), placeholder));
        }
    }
    masked
}

/// `text` with every held secret replaced by its placeholder, reusing `text` when it holds none.
pub fn mask_secrets_owned(text: String) -> String {
    match mask_secrets(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(masked) => masked,
    }
}

/// A writer whose every write has the held secrets masked (the gateway's log lines).
pub struct MaskingWriter<W>(pub W);

impl<W: std::io::Write> std::io::Write for MaskingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.0.write_all(mask_secrets(text).as_bytes())?,
            Err(_) => self.0.write_all(bytes)?,
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_masked_wherever_it_stands() {
        assert_eq!(redact_url("postgres://u:hunter2@h/db"), "postgres://u:***@h/db");
        // An `@` in the password: the last one ends the user-info.
        let shown = redact_url("postgres://postgres:ss@RAW@host/db");
        assert_eq!(shown, "postgres://postgres:***@host/db");
        let shown = redact_url("postgres://u@h:5432/db?sslmode=require&password=hunter2&application_name=gw");
        assert_eq!(shown, "postgres://u@h:5432/db?sslmode=require&password=***&application_name=gw");
        let shown = redact_url("postgres://u:one@h/db?PassWord=two&sslpassword=three");
        assert!(!shown.contains("one") && !shown.contains("two") && !shown.contains("three"), "{shown}");
        let shown = redact_url("https://model.example/v1?api_key=sk-123");
        assert!(!shown.contains("sk-123"), "{shown}");
    }

    #[test]
    fn urls_inside_a_message_are_masked() {
        let message = "error sending request for url (https://mcp.example/mcp?token=abc123): connection refused";
        let shown = redact_urls_in(message);
        assert_eq!(shown, "error sending request for url (https://mcp.example/mcp?token=***): connection refused");
        assert_eq!(redact_urls_in("no url here"), "no url here");
    }

    #[test]
    fn a_url_without_secrets_is_shown_as_written() {
        for url in ["sqlite://agui-gateway.db", "sqlite::memory:", "postgres://gateway@db/gateway?sslmode=verify-full"]
        {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn a_url_that_does_not_parse_shows_its_scheme_only() {
        let shown = redact_url("postgres://u:pa/ss@h:notaport/db");
        assert_eq!(shown, "postgres://*** (not a valid URL)");
        assert_eq!(redact_url("hunter2"), "*** (not a valid URL)");
    }

    #[test]
    fn held_secrets_are_masked_as_they_are_as_bearer_tokens_and_inside_json() {
        std::env::set_var("AGUI_REDACT_TEST_TOKEN", "Bearer s3cr\"et-value");
        std::env::set_var("AGUI_REDACT_TEST_SHORT", "abc");
        hold_secrets_of(["AGUI_REDACT_TEST_TOKEN".to_string(), "AGUI_REDACT_TEST_SHORT".to_string()]);
        let placeholder = secret_placeholder("AGUI_REDACT_TEST_TOKEN");
        assert_eq!(mask_secrets("auth: Bearer s3cr\"et-value"), format!("auth: {placeholder}"));
        assert_eq!(mask_secrets("token=s3cr\"et-value;"), format!("token={placeholder};"));
        let json = serde_json::json!({ "headers": { "authorization": "Bearer s3cr\"et-value" } }).to_string();
        assert!(!mask_secrets(&json).contains("et-value"), "{}", mask_secrets(&json));
        let nested = serde_json::to_string(&json).expect("json");
        assert!(!mask_secrets(&nested).contains("et-value"), "{}", mask_secrets(&nested));
        assert_eq!(mask_secrets("abc is too short to hide"), "abc is too short to hide");
    }

    #[test]
    fn the_gateways_own_secrets_are_masked_naming_their_setting() {
        hold_setting_secrets([("auth.metrics_token".to_string(), "metrics-7f3a9c-token".to_string())]);
        let placeholder = secret_placeholder("auth.metrics_token");
        assert_eq!(mask_secrets("scrape with metrics-7f3a9c-token"), format!("scrape with {placeholder}"));
        assert_eq!(mask_secrets("Bearer metrics-7f3a9c-token"), format!("Bearer {placeholder}"));
    }

    #[test]
    fn a_urls_secrets_are_its_password_as_written_and_decoded_and_its_secret_parameters() {
        let secrets = url_secrets("postgres://u:p%40ss-word1@h/db?sslpassword=keypass123&sslmode=require");
        assert_eq!(secrets, ["p%40ss-word1", "p@ss-word1", "keypass123"]);
        assert!(url_secrets("postgres://gateway@db/gateway").is_empty());
        assert!(url_secrets("sqlite://agui-gateway.db").is_empty());
    }
}
