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
        let (ca_cert, issuer) = certificate_authority()?;

        let mut server_params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "comb sandbox API server");
        let server_key = KeyPair::generate()?;
        let server_cert = server_params.signed_by(&server_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![server_cert.der().clone(), ca_cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                chain.into_iter().map(CertificateDer::into_owned).collect(),
                key,
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            ca_pem: ca_cert.pem(),
            server_config: Arc::new(config),
        })
    }
}
