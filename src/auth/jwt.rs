//! JSON Web Tokens: verifying a token against pinned keys, and signing the gateway's own app
//! tokens. Every key is pinned to one algorithm: a token whose header names another is refused
//! before any signature check, so `none` (not even parsed), HS/RS confusion (an HS256 token
//! "signed" with an RSA public key) and algorithm downgrades fail the same way.

use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{json, Map, Value};

use super::error::{AuthError, KeyError};
use crate::caller::Scopes;
use crate::config::AppTokensConfig;

/// A verification key and the one algorithm it accepts.
#[derive(Clone)]
pub struct VerifyKey {
    pub kid: Option<String>,
    pub algorithm: Algorithm,
    pub key: DecodingKey,
}

/// What a verified token must say besides its signature.
pub struct Rules<'a> {
    pub issuer: &'a str,
    pub audience: &'a [String],
    pub leeway_secs: u64,
    /// The time `exp` and `nbf` are judged at: the gateway's clock, not the library's reading
    /// of the machine's (a test moves it by hand).
    pub now_secs: u64,
}

/// Reads the unverified `iss` of a token, only to pick the verifier that will check it.
pub fn peek_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("iss")?.as_str().map(str::to_string)
}

/// Verifies `token` with the keys that fit its header (by `kid` when it names one) and returns
/// its claims. Checks the pinned algorithm, the signature, `exp`, `nbf`, `iss`, `aud` and `sub`.
pub fn verify(token: &str, keys: &[VerifyKey], rules: &Rules<'_>) -> Result<Map<String, Value>, AuthError> {
    let header: Header =
        jsonwebtoken::decode_header(token).map_err(|_| AuthError::InvalidToken("the token is malformed"))?;
    if names_critical_extensions(token) {
        return Err(AuthError::InvalidToken("the token's header names extensions it must be understood by (crit)"));
    }
    let candidates: Vec<&VerifyKey> = keys
        .iter()
        .filter(|k| header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
        .filter(|k| k.algorithm == header.alg)
        .collect();
    if candidates.is_empty() {
        return Err(AuthError::InvalidToken("no key of this issuer accepts the token's algorithm and key id"));
    }
    let mut last = AuthError::InvalidToken("the token's signature does not verify");
    for key in candidates {
        let mut validation = Validation::new(key.algorithm);
        // `exp` and `nbf` are checked below by the gateway's clock (`within_lifetime`).
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.set_issuer(&[rules.issuer]);
        validation.set_audience(rules.audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
            Ok(data) => {
                let sub = data.claims.get("sub").and_then(Value::as_str).unwrap_or("");
                if sub.is_empty() {
                    return Err(AuthError::InvalidToken("the token names no subject (sub)"));
                }
                within_lifetime(&data.claims, rules)?;
                return Ok(data.claims);
            }
            Err(error) => {
                last = match error.kind() {
                    ErrorKind::ExpiredSignature => return Err(AuthError::Expired),
                    ErrorKind::ImmatureSignature => return Err(AuthError::NotYetValid),
                    ErrorKind::InvalidIssuer => AuthError::InvalidToken("the token's issuer is not accepted"),
                    ErrorKind::InvalidAudience => {
                        AuthError::InvalidToken("the token is not meant for this gateway (aud)")
                    }
                    ErrorKind::MissingRequiredClaim(_) => {
                        AuthError::InvalidToken("the token lacks a required claim (exp, iss, aud, sub)")
                    }
                    _ => AuthError::InvalidToken("the token's signature does not verify"),
                };
                // A signature that verified with this key but failed a claim check fails for good.
                if !matches!(error.kind(), ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm) {
                    return Err(last);
                }
            }
        }
    }
    Err(last)
}

/// The token's `exp` (required) and `nbf` (when given) against `rules.now_secs`, each with the
/// leeway, in the same words `jsonwebtoken` would have used: expired once `exp + leeway` has
/// passed, not yet valid while `nbf - leeway` is ahead.
fn within_lifetime(claims: &Map<String, Value>, rules: &Rules<'_>) -> Result<(), AuthError> {
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or(AuthError::InvalidToken("the token lacks a required claim (exp, iss, aud, sub)"))?;
    if exp.saturating_add(rules.leeway_secs) < rules.now_secs {
        return Err(AuthError::Expired);
    }
    match claims.get("nbf") {
        None => Ok(()),
        Some(nbf) => match nbf.as_u64() {
            Some(nbf) if nbf > rules.now_secs.saturating_add(rules.leeway_secs) => Err(AuthError::NotYetValid),
            Some(_) => Ok(()),
            None => Err(AuthError::InvalidToken("the token's nbf is not a number of seconds")),
        },
    }
}

/// Whether the token's header has `crit`: the extensions it lists must be understood by
/// whoever accepts the token (RFC 7515 §4.1.11), and the gateway understands none, so such a
/// token is refused whatever it lists (an empty or malformed `crit` is itself invalid).
fn names_critical_extensions(token: &str) -> bool {
    let header = token.split('.').next().unwrap_or("");
    let Ok(bytes) = URL_SAFE_NO_PAD.decode(header.trim_end_matches('=')) else { return true };
    match serde_json::from_slice::<Map<String, Value>>(&bytes) {
        Ok(members) => members.contains_key("crit"),
        Err(_) => true,
    }
}

/// Strings of a claim that is an array of strings or one space-separated string.
pub fn string_list(claims: &Map<String, Value>, name: &str) -> Vec<String> {
    match claims.get(name) {
        Some(Value::String(text)) => text.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

/// The scopes a token states: `scope` (OAuth, space-separated), `scp` or `scopes`.
pub fn token_scopes(claims: &Map<String, Value>) -> Vec<String> {
    let mut scopes = string_list(claims, "scope");
    scopes.extend(string_list(claims, "scp"));
    scopes.extend(string_list(claims, "scopes"));
    scopes
}

/// Reads a PEM public key for `algorithm`.
pub fn decoding_key_from_pem(path: &str, algorithm: Algorithm) -> Result<DecodingKey, KeyError> {
    let pem = std::fs::read(path).map_err(|source| KeyError::Read { path: path.to_string(), source })?;
    let parsed = match algorithm {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => DecodingKey::from_rsa_pem(&pem),
        Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
        Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
        _ => return Err(KeyError::Invalid(format!("{path}: {algorithm:?} takes no public key"))),
    };
    parsed.map_err(|source| KeyError::Parse { what: path.to_string(), source })
}

fn encoding_key_from_pem(path: &str, algorithm: Algorithm) -> Result<EncodingKey, KeyError> {
    let pem = std::fs::read(path).map_err(|source| KeyError::Read { path: path.to_string(), source })?;
    let parsed = match algorithm {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem),
        _ => return Err(KeyError::Invalid(format!("{path}: app tokens are HS256, EdDSA or RS256"))),
    };
    parsed.map_err(|source| KeyError::Parse { what: path.to_string(), source })
}

/// The verification keys of a JWKS document: each key pinned to its `alg` (or the one its type
/// implies), kept only when `allowed` names that algorithm. Symmetric (`oct`) and encryption
/// keys, and keys this library cannot use, are skipped.
pub fn keys_from_jwks(document: &str, allowed: &[Algorithm]) -> Result<Vec<VerifyKey>, KeyError> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let document: Document =
        serde_json::from_str(document).map_err(|e| KeyError::Invalid(format!("not a JWKS document: {e}")))?;
    let mut keys = Vec::new();
    for value in document.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else { continue };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let implied = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Some(Algorithm::ES256),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => Some(Algorithm::ES384),
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Some(Algorithm::EdDSA),
            _ => None,
        };
        let algorithm = match jwk.common.key_algorithm {
            Some(stated) => Algorithm::from_str(&stated.to_string()).ok(),
            None => implied,
        };
        let Some(algorithm) = algorithm.filter(|a| allowed.contains(a)) else { continue };
        // An `oct` key never verifies anything here: HMAC keys are secrets, not published.
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
        keys.push(VerifyKey { kid: jwk.common.key_id.clone(), algorithm, key });
    }
    Ok(keys)
}

/// The gateway's own tokens: one pinned verification key and, where configured, the signing key.
pub struct AppTokens {
    verify: Option<VerifyKey>,
    sign: Option<EncodingKey>,
    algorithm: Algorithm,
    pub issuer: String,
    pub audience: Vec<String>,
    pub exchange_ttl_secs: u64,
    pub mint_ttl_secs: u64,
}

/// The claims of an app token to sign.
pub struct AppClaims<'a> {
    pub tenant: &'a str,
    pub sub: &'a str,
    pub roles: &'a [String],
    pub scopes: &'a Scopes,
    pub clearance: &'a [String],
    /// `app:<id>` for a token issued by the token exchange.
    pub via: Option<&'a str>,
    /// The app key that exchanged it: the token dies with the key.
    pub app_key: Option<&'a str>,
    pub expires_at: u64,
}

impl AppTokens {
    pub fn from_config(config: &AppTokensConfig) -> Result<AppTokens, KeyError> {
        let algorithm = Algorithm::from_str(&config.algorithm)
            .map_err(|_| KeyError::Invalid(format!("unknown algorithm {}", config.algorithm)))?;
        let (verify, sign) = match algorithm {
            Algorithm::HS256 if config.secret.is_empty() => (None, None),
            Algorithm::HS256 => {
                let secret = config.secret.as_bytes();
                (Some(DecodingKey::from_secret(secret)), Some(EncodingKey::from_secret(secret)))
            }
            _ => {
                let verify = (!config.public_key_file.is_empty())
                    .then(|| decoding_key_from_pem(&config.public_key_file, algorithm))
                    .transpose()?;
                let sign = (!config.private_key_file.is_empty())
                    .then(|| encoding_key_from_pem(&config.private_key_file, algorithm))
                    .transpose()?;
                (verify, sign)
            }
        };
        Ok(AppTokens {
            verify: verify.map(|key| VerifyKey { kid: None, algorithm, key }),
            sign,
            algorithm,
            issuer: config.issuer.clone(),
            audience: vec![config.audience.clone()],
            exchange_ttl_secs: config.exchange_ttl_secs,
            mint_ttl_secs: config.mint_ttl_secs,
        })
    }

    pub fn verifies(&self) -> bool {
        self.verify.is_some()
    }

    pub fn signs(&self) -> bool {
        self.sign.is_some()
    }

    /// Verifies an app token, its lifetime judged at `now_secs`.
    pub fn verify(&self, token: &str, leeway_secs: u64, now_secs: u64) -> Result<Map<String, Value>, AuthError> {
        let keys: Vec<VerifyKey> = self.verify.iter().cloned().collect();
        verify(token, &keys, &Rules { issuer: &self.issuer, audience: &self.audience, leeway_secs, now_secs })
    }

    /// Signs an app token; `None` when this gateway has no signing key.
    pub fn sign(&self, claims: &AppClaims<'_>, now: u64) -> Option<Result<String, jsonwebtoken::errors::Error>> {
        let key = self.sign.as_ref()?;
        let mut body = json!({
            "iss": self.issuer,
            "aud": self.audience[0],
            "sub": claims.sub,
            "tenant": claims.tenant,
            "iat": now,
            "nbf": now,
            "exp": claims.expires_at,
            "roles": claims.roles,
            "scope": claims.scopes.to_string(),
            "clearance": claims.clearance,
        });
        if let Some(via) = claims.via {
            body["via"] = json!(via);
        }
        if let Some(app_key) = claims.app_key {
            body["akid"] = json!(app_key);
        }
        Some(jsonwebtoken::encode(&Header::new(self.algorithm), &body, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs_tokens() -> AppTokens {
        AppTokens::from_config(&AppTokensConfig {
            algorithm: "HS256".into(),
            secret: "a-test-secret-of-at-least-32-bytes!!".into(),
            private_key_file: String::new(),
            public_key_file: String::new(),
            issuer: "agui-gateway".into(),
            audience: "agui-gateway".into(),
            exchange_ttl_secs: 60,
            mint_ttl_secs: 60,
        })
        .expect("keys")
    }

    fn claims<'a>(scopes: &'a Scopes, expires_at: u64) -> AppClaims<'a> {
        AppClaims {
            tenant: "acme",
            sub: "alice",
            roles: &[],
            scopes,
            clearance: &[],
            via: None,
            app_key: None,
            expires_at,
        }
    }

    #[test]
    fn a_tokens_lifetime_is_judged_at_the_time_given_not_the_machines() {
        let tokens = hs_tokens();
        let scopes = Scopes::all();
        // Minted in 2001: the machine's clock would call it long expired.
        let then = 1_000_000_000;
        let token = tokens.sign(&claims(&scopes, then + 60), then).expect("signs").expect("encodes");
        assert!(tokens.verify(&token, 0, then + 60).is_ok(), "valid through its exp");
        assert!(matches!(tokens.verify(&token, 0, then + 61), Err(AuthError::Expired)));
        assert!(tokens.verify(&token, 5, then + 65).is_ok(), "the leeway stretches it");
        assert!(matches!(tokens.verify(&token, 0, then - 1), Err(AuthError::NotYetValid)), "before its nbf");
    }

    #[test]
    fn a_signed_token_verifies_and_a_changed_one_does_not() {
        let tokens = hs_tokens();
        let now = jsonwebtoken::get_current_timestamp();
        let scopes = Scopes::all();
        let token = tokens.sign(&claims(&scopes, now + 60), now).expect("signs").expect("encodes");
        let verified = tokens.verify(&token, 0, now).expect("verifies");
        assert_eq!(verified["sub"], "alice");
        assert_eq!(peek_issuer(&token).as_deref(), Some("agui-gateway"));
        let mut tampered = token.clone();
        tampered.pop();
        tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
        assert!(tokens.verify(&tampered, 0, now).is_err());
    }

    #[test]
    fn an_alg_none_token_is_refused() {
        let tokens = hs_tokens();
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(br#"{"iss":"agui-gateway","aud":"agui-gateway","sub":"x","exp":9999999999}"#);
        let error =
            tokens.verify(&format!("{header}.{body}."), 0, jsonwebtoken::get_current_timestamp()).expect_err("refused");
        assert!(matches!(error, AuthError::InvalidToken(_)), "{error:?}");
    }
}
