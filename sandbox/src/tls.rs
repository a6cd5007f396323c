//! HTTPS for sandbox clusters: a certificate authority generated per sandbox (rcgen), one
//! server certificate for `127.0.0.1`/`localhost` signed by it, served with rustls on the
//! ring provider (installed explicitly, never taken from a process default).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Result;

/// The sandbox's CA (its PEM goes into kubeconfigs) and the server configuration it signs.
#[derive(Clone)]
pub struct Tls {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// A certificate authority: its self-signed certificate and the issuer that signs with it. The
/// real backend signs kube-apiserver's serving certificate with the same CA as the proxy's, so
/// one CA in the kubeconfig trusts both.
pub struct Authority {
    certificate: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct IssuedPem {
    pub certificate: String,
    pub key: String,
}

impl Authority {
    pub fn generate() -> Result<Authority> {
        let (certificate, issuer) = certificate_authority()?;
        Ok(Authority {
            certificate,
            issuer,
        })
    }

    pub fn pem(&self) -> String {
        self.certificate.pem()
    }

    /// The CA certificate as DER, for a client's root store.
    pub fn der(&self) -> CertificateDer<'static> {
        self.certificate.der().clone().into_owned()
    }

    /// A serving certificate for `names` (DNS names or IP addresses), PEM.
    pub fn issue(&self, names: &[&str], common_name: &str) -> Result<IssuedPem> {
        let (certificate, key) = self.issue_der(names, common_name)?;
        Ok(IssuedPem {
            certificate: certificate.pem(),
            key: key.serialize_pem(),
        })
    }

    fn issue_der(&self, names: &[&str], common_name: &str) -> Result<(Certificate, KeyPair)> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok((certificate, key))
    }

    /// A rustls server configuration for `127.0.0.1`/`localhost`, serving the chain
    /// certificate, then CA.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        let (server_cert, server_key) =
            self.issue_der(&["localhost", "127.0.0.1"], "comb sandbox API server")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![server_cert.der().clone(), self.certificate.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                chain.into_iter().map(CertificateDer::into_owned).collect(),
                key,
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A CA of its own: a self-signed certificate and the issuer that signs with it.
fn certificate_authority() -> Result<(Certificate, Issuer<'static, KeyPair>)> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "comb sandbox CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    Ok((ca_cert, Issuer::new(ca_params, ca_key)))
}

/// The PEM of a freshly generated CA, for clusters that serve no TLS but still publish a CA
/// bundle in every namespace, as every real cluster does.
pub fn ca_pem() -> Result<String> {
    Ok(certificate_authority()?.0.pem())
}

impl Tls {
    pub fn generate() -> Result<Tls> {
        let authority = Authority::generate()?;
        Ok(Tls {
            ca_pem: authority.pem(),
            server_config: authority.server_config()?,
        })
    }
}
