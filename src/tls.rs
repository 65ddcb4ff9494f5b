//! Outbound TLS: the one rustls client configuration every connection the gateway makes over
//! HTTPS uses (models, HTTP tools, upstream AG-UI servers, identity providers' JWKS), and the
//! words for a failed handshake.
//!
//! Trusted roots are the platform's store, plus the PEM bundle named by `SSL_CERT_FILE` (as
//! with OpenSSL on Linux, where that variable replaces the default bundle file but the system
//! certificate directory still counts), plus `tls.extra_ca_file`. The certificate and the host
//! name are always verified; nothing here turns verification off. A client certificate
//! (`tls.client_cert_file` / `tls.client_key_file`) is presented to servers that ask for one.
//!
//! The configuration is built once at start: a file that cannot be read, holds no PEM
//! certificate or a key that does not match its certificate is a start-up error naming the
//! setting. The crypto provider is `ring`, the one the rest of the gateway already builds.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;

/// The conventional variable naming a PEM bundle of trusted CA certificates.
pub const CERT_FILE_VARIABLE: &str = "SSL_CERT_FILE";

/// Why the outbound TLS configuration could not be built. Each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{setting}: cannot read '{path}': {source}")]
    Read { setting: &'static str, path: String, source: std::io::Error },
    #[error("{setting}: '{path}' holds no PEM certificate")]
    NoCertificate { setting: &'static str, path: String },
    #[error("{setting}: '{path}' is not a valid PEM certificate bundle ({detail})")]
    BadCertificate { setting: &'static str, path: String, detail: String },
    #[error("tls.client_key_file: '{path}' holds no PEM private key ({detail})")]
    BadKey { path: String, detail: String },
    #[error("tls.client_cert_file and tls.client_key_file go together: set both or neither")]
    HalfClientIdentity,
    #[error("tls.client_key_file does not match tls.client_cert_file ({0})")]
    KeyMismatch(String),
    #[error("the outbound TLS configuration could not be built ({0})")]
    Build(String),
}

/// Builds the client configuration from the `[tls]` settings and `SSL_CERT_FILE` (read now).
pub fn client_config(settings: &TlsConfig) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    let cert_file = std::env::var(CERT_FILE_VARIABLE).ok().filter(|v| !v.is_empty());
    client_config_with(settings, cert_file.as_deref())
}

/// As [`client_config`], with the `SSL_CERT_FILE` value given rather than read.
pub fn client_config_with(
    settings: &TlsConfig,
    ssl_cert_file: Option<&str>,
) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(platform_roots());
    if added == 0 {
        tracing::warn!(
            "no trusted root certificate found on this platform; only SSL_CERT_FILE and tls.extra_ca_file count"
        );
    }
    if let Some(path) = ssl_cert_file {
        add_bundle(&mut roots, CERT_FILE_VARIABLE, path)?;
    }
    if !settings.extra_ca_file.is_empty() {
        add_bundle(&mut roots, "tls.extra_ca_file", &settings.extra_ca_file)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Build(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (settings.client_cert_file.is_empty(), settings.client_key_file.is_empty()) {
        (true, true) => builder.with_no_client_auth(),
        (false, false) => {
            let chain = read_certificates("tls.client_cert_file", &settings.client_cert_file)?;
            let key = read_key(&settings.client_key_file)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| TlsSetupError::KeyMismatch(e.to_string()))?
        }
        _ => return Err(TlsSetupError::HalfClientIdentity),
    };
    // The gateway's HTTP client speaks HTTP/1.1 only; say so rather than leave it to the server.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The platform's trusted roots. `SSL_CERT_FILE` and `SSL_CERT_DIR` would make
/// `rustls-native-certs` read only them; on Linux and the BSDs the system directories are read
/// as well then, so the variable adds trust rather than removing the platform's.
fn platform_roots() -> Vec<CertificateDer<'static>> {
    let overridden =
        ["SSL_CERT_FILE", "SSL_CERT_DIR"].iter().any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    let mut found = rustls_native_certs::load_native_certs();
    #[cfg(all(unix, not(target_os = "macos")))]
    if overridden {
        for dir in openssl_probe::candidate_cert_dirs() {
            let system = rustls_native_certs::load_certs_from_paths(None, Some(dir));
            found.certs.extend(system.certs);
        }
    }
    #[cfg(not(all(unix, not(target_os = "macos"))))]
    let _ = overridden;
    for error in &found.errors {
        tracing::debug!(%error, "a platform certificate could not be read");
    }
    found.certs
}

fn add_bundle(roots: &mut rustls::RootCertStore, setting: &'static str, path: &str) -> Result<(), TlsSetupError> {
    for certificate in read_certificates(setting, path)? {
        roots.add(certificate).map_err(|e| TlsSetupError::BadCertificate {
            setting,
            path: path.to_string(),
            detail: e.to_string(),
        })?;
    }
    Ok(())
}

fn read_file(setting: &'static str, path: &str) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(Path::new(path)).map_err(|source| TlsSetupError::Read { setting, path: path.to_string(), source })
}

/// Every certificate of a PEM file; at least one.
fn read_certificates(setting: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = read_file(setting, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadCertificate { setting, path: path.to_string(), detail: e.to_string() })?;
    if certificates.is_empty() {
        return Err(TlsSetupError::NoCertificate { setting, path: path.to_string() });
    }
    Ok(certificates)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let bytes = read_file("tls.client_key_file", path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| TlsSetupError::BadKey { path: path.to_string(), detail: e.to_string() })
}

/// What went wrong in a TLS handshake, in words for an operator, when `error` (or anything in
/// its source chain) is a TLS failure; `None` for any other error. `host` is the host the
/// connection was for. The words name the problem and the rustls reason, never a secret.
pub fn describe_failure(error: &(dyn std::error::Error + 'static), host: &str) -> Option<String> {
    describe_failure_trusting(error, host, "the platform's, SSL_CERT_FILE, tls.extra_ca_file")
}

/// As [`describe_failure`], for a connection whose trusted roots are `trusted` (named in the
/// words for an unknown issuer), e.g. the database's `sslrootcert`.
pub fn describe_failure_trusting(
    error: &(dyn std::error::Error + 'static),
    host: &str,
    trusted: &str,
) -> Option<String> {
    let tls = find_rustls_error(error)?;
    Some(describe_rustls(tls, host, trusted))
}

/// The rustls error behind `error`. A rustls error reaches the HTTP client wrapped in an
/// `io::Error`, whose `source()` skips the wrapped error itself, so each `io::Error` on the
/// chain is opened by hand.
fn find_rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current: Option<&'a (dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(found) = find_rustls_error(inner) {
                    return Some(found);
                }
            }
        }
        current = error.source();
    }
    None
}

fn describe_rustls(error: &rustls::Error, host: &str, trusted: &str) -> String {
    use rustls::{AlertDescription, CertificateError, Error};
    match error {
        Error::InvalidCertificate(problem) => {
            let reason = certificate_reason(problem);
            match problem {
                CertificateError::UnknownIssuer => format!(
                    "certificate not trusted ({reason}) for host {host}: its issuer is not among the trusted roots \
                     ({trusted})"
                ),
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    format!("certificate not valid for host {host} ({reason})")
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    format!("certificate expired ({reason}) for host {host}")
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    format!("certificate not valid yet ({reason}) for host {host}")
                }
                CertificateError::Revoked => format!("certificate revoked ({reason}) for host {host}"),
                _ => format!("certificate refused ({reason}) for host {host}"),
            }
        }
        Error::AlertReceived(alert) => {
            let hint = match alert {
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::HandshakeFailure => {
                    " (the server may require a client certificate it trusts: tls.client_cert_file)"
                }
                _ => "",
            };
            format!("the TLS handshake with host {host} was refused by the server ({alert:?}){hint}")
        }
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } | Error::InappropriateHandshakeMessage { .. } => {
            format!("TLS handshake with host {host} failed ({error}): is it serving TLS on that port?")
        }
        other => format!("TLS handshake with host {host} failed ({other})"),
    }
}

/// The short name of a certificate problem (`UnknownIssuer`, `NotValidForName`, …), with what
/// the certificate names when rustls says it.
fn certificate_reason(problem: &rustls::CertificateError) -> String {
    use rustls::CertificateError;
    match problem {
        CertificateError::NotValidForNameContext { presented, .. } => {
            if presented.is_empty() {
                "NotValidForName; it names no host".to_string()
            } else {
                // rustls renders each as `DnsName("host")`; the name alone reads better.
                let names: Vec<&str> =
                    presented.iter().map(|name| name.split('"').nth(1).unwrap_or(name.as_str())).collect();
                format!("NotValidForName; it names {}", names.join(", "))
            }
        }
        CertificateError::ExpiredContext { .. } => "Expired".to_string(),
        CertificateError::NotValidYetContext { .. } => "NotValidYet".to_string(),
        other => {
            // The variant's name, without any fields it carries.
            let full = format!("{other:?}");
            full.split(['(', ' ', '{']).next().unwrap_or(&full).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TlsConfig {
        TlsConfig::default()
    }

    #[test]
    fn the_platform_roots_alone_build_a_configuration() {
        assert!(client_config_with(&settings(), None).is_ok());
    }

    #[test]
    fn a_missing_file_names_its_setting() {
        let error = client_config_with(&TlsConfig { extra_ca_file: "/nonexistent/ca.pem".into(), ..settings() }, None)
            .expect_err("missing file");
        assert!(error.to_string().starts_with("tls.extra_ca_file: cannot read '/nonexistent/ca.pem'"), "{error}");
        let error = client_config_with(&settings(), Some("/nonexistent/bundle.pem")).expect_err("missing file");
        assert!(error.to_string().starts_with("SSL_CERT_FILE: cannot read"), "{error}");
    }

    #[test]
    fn a_file_without_pem_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let error = client_config_with(&TlsConfig { extra_ca_file: path.display().to_string(), ..settings() }, None)
            .expect_err("no PEM");
        assert!(error.to_string().contains("holds no PEM certificate"), "{error}");
    }

    #[test]
    fn half_a_client_identity_is_refused() {
        let error =
            client_config_with(&TlsConfig { client_cert_file: "/x.pem".into(), ..settings() }, None).expect_err("half");
        assert!(matches!(error, TlsSetupError::HalfClientIdentity), "{error}");
    }

    #[test]
    fn a_wrapped_rustls_error_is_found_and_named() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let described = describe_failure(&io, "model.test").expect("found");
        assert!(described.starts_with("certificate not trusted (UnknownIssuer) for host model.test"), "{described}");
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(describe_failure(&plain, "model.test"), None);
    }
}
