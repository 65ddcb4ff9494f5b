//! Hiding secrets in text the gateway logs or shows. It sits below `config` and `store`, which
//! both print database URLs.
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
}
