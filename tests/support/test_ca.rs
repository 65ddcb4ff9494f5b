//! Test support: a private certificate authority made in the test (rcgen, ring), server
//! certificates it issues for given names, and their PEM files in a temp dir.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};

/// A CA trusted by nobody but the test that made it.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A server certificate (leaf) and its private key.
pub struct ServerCert {
    /// The leaf then the CA: a full chain, as `tls.cert_file` takes it.
    pub chain_pem: String,
    pub key_pem: String,
    /// The leaf as DER, what a client sees as the peer certificate.
    pub der: Vec<u8>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "agui-gateway test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa { cert, key }
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses) with this `serial`.
    pub fn issue(&self, names: &[&str], serial: u64) -> ServerCert {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server params");
        params.distinguished_name.push(DnType::CommonName, names.first().cloned().unwrap_or_default());
        params.serial_number = Some(SerialNumber::from(serial));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("server certificate");
        ServerCert {
            chain_pem: format!("{}{}", cert.pem(), self.cert.pem()),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    /// Writes the CA certificate to `dir/ca.pem`.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, self.cert_pem()).expect("write CA");
        path
    }
}

impl ServerCert {
    /// Writes `dir/server.pem` (chain) and `dir/server.key`; returns both paths.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let cert = dir.join("server.pem");
        let key = dir.join("server.key");
        std::fs::write(&cert, &self.chain_pem).expect("write certificate");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}
