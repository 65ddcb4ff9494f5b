//! Test support for TLS: a private certificate authority made in the test (rcgen), the
//! certificates it signs (servers', clients'), written as PEM files the gateway or PostgreSQL
//! reads, and a TLS-terminating front that serves any plain test server (a scripted model, a
//! tool, a JWKS, an upstream AG-UI server) over HTTPS, optionally asking for a client
//! certificate.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A private CA, its files in a directory of its own (deleted with it).
pub struct TestCa {
    certificate: rcgen::Certificate,
    key: KeyPair,
    dir: tempfile::TempDir,
}

/// A certificate the CA signed: PEM text and the files holding it.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let certificate = params.self_signed(&key).expect("CA certificate");
        let dir = tempfile::tempdir().expect("CA dir");
        std::fs::write(dir.path().join("ca.pem"), certificate.pem()).expect("write CA");
        TestCa { certificate, key, dir }
    }

    /// The CA's certificate as a PEM file (what `SSL_CERT_FILE`, `tls.extra_ca_file` or
    /// `sslrootcert` name).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `names` (DNS names or IP addresses), written as
    /// `<file_stem>.crt` / `<file_stem>.key`.
    pub fn server(&self, file_stem: &str, names: &[&str]) -> Issued {
        self.issue(file_stem, names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (for mutual TLS) naming `name`.
    pub fn client(&self, file_stem: &str, name: &str) -> Issued {
        self.issue(file_stem, &[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, file_stem: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("test"));
        params.subject_alt_names = names
            .iter()
            .map(|name| match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*name).try_into().expect("DNS name")),
            })
            .collect();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![usage];
        let certificate = params.signed_by(&key, &self.certificate, &self.key).expect("signed certificate");
        let cert_file = self.dir.path().join(format!("{file_stem}.crt"));
        let key_file = self.dir.path().join(format!("{file_stem}.key"));
        std::fs::write(&cert_file, certificate.pem()).expect("write certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        #[cfg(unix)]
        {
            // PostgreSQL refuses a key file others may read.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("key mode");
        }
        Issued { cert_pem: certificate.pem(), key_pem: key.serialize_pem(), cert_file, key_file }
    }
}

/// A rustls server configuration serving `served`; with `client_ca`, a client certificate
/// signed by it is required.
pub fn server_config(served: &Issued, client_ca: Option<&TestCa>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(served.cert_pem.as_bytes()).collect::<Result<_, _>>().expect("chain");
    let key = PrivateKeyDer::from_pem_slice(served.key_pem.as_bytes()).expect("key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.certificate.der().clone()).expect("client CA");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS front on a random loopback port: each connection's TLS is ended here and its bytes
/// go to `backend` in plain text. Handshakes that fail are counted with their error.
pub struct TlsFront {
    pub address: SocketAddr,
    pub failed_handshakes: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(backend: SocketAddr, config: Arc<rustls::ServerConfig>) -> TlsFront {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
            .await
            .expect("bind TLS front");
        let address = listener.local_addr().expect("address");
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let failed_handshakes: Arc<Mutex<Vec<String>>> = Arc::default();
        let failures = failed_handshakes.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let failures = failures.clone();
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(error) => {
                            failures.lock().unwrap_or_else(|p| p.into_inner()).push(error.to_string());
                            return;
                        }
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront { address, failed_handshakes, task }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The address of a `http://host:port/…` URL.
pub fn address_of(url: &str) -> SocketAddr {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let authority = rest.split('/').next().expect("authority");
    authority.parse().unwrap_or_else(|_| panic!("{authority} is not host:port"))
}

/// A builder for a test's HTTP client. reqwest is built with rustls and no crypto provider of
/// its own (the gateway hands each of its clients a whole rustls configuration); a test's
/// client takes ring, made the process's default here.
pub fn http_client() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// `GET url` with a test's client: what `reqwest::get` does, with ring in place.
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    http_client().build()?.get(url).send().await
}
