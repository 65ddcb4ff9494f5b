//! TLS for the runs: a private CA made when the tool starts (rcgen, ring), one server
//! certificate it issues for `127.0.0.1` and `localhost` that every TLS gateway of the run
//! serves, and the rustls client configurations that trust only that CA.
//!
//! Made at run time so there are no key files to ship or expire. Client session resumption is
//! off: every new connection is a full handshake, which is what the `handshake` scenario
//! measures and the worst case a stream pays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use rustls::client::Resumption;
use rustls::pki_types::CertificateDer;

use crate::error::{Context, Error, Result};

/// The run's CA and server certificate, as PEM, plus the client configurations trusting it.
pub struct Material {
    chain_pem: String,
    key_pem: String,
    /// ALPN `http/1.1` only.
    pub h1: Arc<rustls::ClientConfig>,
    /// ALPN `h2` only.
    pub h2: Arc<rustls::ClientConfig>,
}

fn rcgen_error(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |error| Error::msg(format!("{what}: {error}"))
}

/// The names [`Material::write_server_files`] gives the certificate chain and key.
pub const SERVER_CERT_FILE: &str = "server.crt";
pub const SERVER_KEY_FILE: &str = "server.key";

impl Material {
    pub fn new() -> Result<Material> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error("CA parameters"))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "agui-bench CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(rcgen_error("CA key"))?;
        let ca = ca_params.self_signed(&ca_key).map_err(rcgen_error("CA certificate"))?;

        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let mut params = CertificateParams::new(names).map_err(rcgen_error("server certificate parameters"))?;
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(rcgen_error("server key"))?;
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(rcgen_error("server certificate"))?;

        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(ca.der().to_vec())).context("trusting the run's CA")?;
        let roots = Arc::new(roots);
        let config = |alpn: &[u8]| -> Result<Arc<rustls::ClientConfig>> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .context("TLS protocol versions")?
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            config.resumption = Resumption::disabled();
            Ok(Arc::new(config))
        };
        Ok(Material {
            chain_pem: format!("{}{}", cert.pem(), ca.pem()),
            key_pem: key.serialize_pem(),
            h1: config(b"http/1.1")?,
            h2: config(b"h2")?,
        })
    }

    /// Writes the full chain and the key into `dir`; returns (cert_file, key_file).
    pub fn write_server_files(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let cert = dir.join(SERVER_CERT_FILE);
        let key = dir.join(SERVER_KEY_FILE);
        std::fs::write(&cert, &self.chain_pem).with_context(|| format!("writing {}", cert.display()))?;
        std::fs::write(&key, &self.key_pem).with_context(|| format!("writing {}", key.display()))?;
        Ok((cert, key))
    }

    /// The full chain and the key, as PEM.
    #[cfg(test)]
    pub fn server_pem(&self) -> (&str, &str) {
        (&self.chain_pem, &self.key_pem)
    }
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Material(the run's CA and server certificate)")
    }
}
