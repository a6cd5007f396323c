//! The webhook's serving certificate: from a directory (`tls.crt`, `tls.key`, as cert-manager
//! writes them), else a CA and a certificate generated at start for the listen address and the
//! Service's DNS names, served as the chain certificate, then CA. rustls on the ring provider,
//! installed explicitly, never taken from a process default.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::{Error, Result};

/// `--webhook-service NAME.NAMESPACE`: the Service in front of the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceName {
    pub name: String,
    pub namespace: String,
}

impl ServiceName {
    /// `NAME.NAMESPACE.svc` and `NAME.NAMESPACE.svc.<cluster_domain>`: what the API server
    /// asks for when it calls the Service.
    pub fn dns_names(&self, cluster_domain: &str) -> [String; 2] {
        let svc = format!("{}.{}.svc", self.name, self.namespace);
        let full = format!("{svc}.{cluster_domain}");
        [svc, full]
    }
}

impl std::str::FromStr for ServiceName {
    type Err = Error;

    fn from_str(text: &str) -> Result<ServiceName> {
        match text.split_once('.') {
            Some((name, namespace))
                if !name.is_empty() && !namespace.is_empty() && !namespace.contains('.') =>
            {
                Ok(ServiceName {
                    name: name.to_string(),
                    namespace: namespace.to_string(),
                })
            }
            _ => Err(Error::Value(format!(
                "{text} is not NAME.NAMESPACE of a Service"
            ))),
        }
    }
}

/// A server configuration, and the CA that signed its certificate when comb generated it.
pub struct ServingTls {
    pub server_config: Arc<rustls::ServerConfig>,
    /// PEM of the generated CA, for a caBundle; `None` for certificates read from a directory.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

fn tls_error(what: &str, error: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::webhook_from(what, error)
}

impl ServingTls {
    /// `tls.crt` (the chain, leaf first) and `tls.key` of `dir`.
    pub fn from_dir(dir: &Path) -> Result<ServingTls> {
        let cert_path = dir.join("tls.crt");
        let key_path = dir.join("tls.key");
        let chain = CertificateDer::pem_file_iter(&cert_path)
            .and_then(|certificates| certificates.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|error| {
                tls_error(&format!("{} cannot be read", cert_path.display()), error)
            })?;
        if chain.is_empty() {
            return Err(Error::webhook(format!(
                "{} holds no certificate",
                cert_path.display()
            )));
        }
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|error| tls_error(&format!("{} cannot be read", key_path.display()), error))?;
        Ok(ServingTls {
            server_config: server_config(chain, key)?,
            ca_pem: None,
        })
    }

    /// A fresh CA and a certificate it signs for `names` (DNS names or IP addresses).
    pub fn generate(names: &[String]) -> Result<ServingTls> {
        let failed =
            |error: rcgen::Error| tls_error("generating the webhook's certificates failed", error);
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "comb webhook CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(failed)?;
        let ca = ca_params.self_signed(&ca_key).map_err(failed)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::new(names.to_vec()).map_err(failed)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "comb admission webhook");
        let key = KeyPair::generate().map_err(failed)?;
        let certificate = params.signed_by(&key, &issuer).map_err(failed)?;
        let chain = vec![certificate.der().clone(), ca.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok(ServingTls {
            server_config: server_config(chain, key)?,
            ca_pem: Some(ca.pem()),
        })
    }
}

/// The names a generated certificate is for: the listen address (`127.0.0.1` and `localhost`
/// when it listens on every address), then the Service's DNS names.
pub fn certificate_names(
    address: SocketAddr,
    service: Option<&ServiceName>,
    cluster_domain: &str,
) -> Vec<String> {
    let mut names = Vec::new();
    if address.ip().is_unspecified() || address.ip().is_loopback() {
        names.push("localhost".to_string());
        names.push("127.0.0.1".to_string());
    }
    if !address.ip().is_unspecified() && !names.contains(&address.ip().to_string()) {
        names.push(address.ip().to_string());
    }
    if let Some(service) = service {
        names.extend(service.dns_names(cluster_domain));
    }
    names
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| tls_error("the TLS configuration does not hold", error))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| tls_error("the webhook's certificate and key do not fit", error))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_and_names() {
        let service: ServiceName = "comb-webhook.comb-system".parse().unwrap();
        assert_eq!(
            certificate_names(
                "0.0.0.0:8443".parse().unwrap(),
                Some(&service),
                "cluster.local"
            ),
            [
                "localhost",
                "127.0.0.1",
                "comb-webhook.comb-system.svc",
                "comb-webhook.comb-system.svc.cluster.local"
            ]
        );
        assert_eq!(
            certificate_names("10.1.2.3:8443".parse().unwrap(), None, "cluster.local"),
            ["10.1.2.3"]
        );
        for bad in ["comb", ".ns", "name.", "a.b.c"] {
            assert!(bad.parse::<ServiceName>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_directory_is_read_as_cert_manager_writes_it() {
        let generated = ServingTls::generate(&["localhost".to_string()]).unwrap();
        assert!(
            generated
                .ca_pem
                .as_deref()
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = ServingTls::from_dir(dir.path()).unwrap_err().to_string();
        assert!(missing.contains("tls.crt cannot be read"), "{missing}");

        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        let read = ServingTls::from_dir(dir.path()).unwrap();
        assert!(read.ca_pem.is_none());
    }
}
