//! TLS settings, as plain data: the certificate the gateway serves on `listen`, and the trust
//! and identity it uses for the connections it makes (models, HTTP tools, upstream AG-UI
//! servers, identity providers' JWKS).
//!
//! Every path is a PEM file; an empty string means "not set".

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificate chain (leaf first) served on `listen`; with `key_file`, the gateway serves
    /// HTTPS instead of plain HTTP.
    pub cert_file: String,
    /// Private key of `cert_file`.
    pub key_file: String,
    /// Extra trusted CA certificates (a PEM bundle) for outbound connections, added to the
    /// platform's roots and `SSL_CERT_FILE`.
    pub extra_ca_file: String,
    /// Client certificate chain presented to upstreams and tools that require mutual TLS.
    pub client_cert_file: String,
    /// Private key of `client_cert_file`.
    pub client_key_file: String,
}
