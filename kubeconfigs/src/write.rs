//! Writing kubeconfigs (the sandbox publishes its clusters this way): a builder of clusters,
//! users and contexts rendered with kube's own `Kubeconfig` type, written atomically so a
//! reader never sees half a file.

use std::io::Write;
use std::path::Path;

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

/// Clusters, users and contexts of a kubeconfig being assembled.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigBuilder {
    config: Kubeconfig,
}

impl KubeconfigBuilder {
    pub fn new() -> Self {
        KubeconfigBuilder {
            config: Kubeconfig {
                api_version: Some("v1".into()),
                kind: Some("Config".into()),
                ..Kubeconfig::default()
            },
        }
    }

    /// A cluster entry: its server URL and, for HTTPS, the PEM of the CA that signs it.
    pub fn cluster(mut self, name: &str, server: &str, ca_pem: Option<&str>) -> Self {
        let mut cluster = Cluster {
            server: Some(server.to_string()),
            ..Cluster::default()
        };
        if let Some(pem) = ca_pem {
            cluster.certificate_authority_data = Some(base64_encode(pem.as_bytes()));
        }
        self.config.clusters.push(NamedCluster {
            name: name.to_string(),
            cluster: Some(cluster),
            other: Default::default(),
        });
        self
    }

    /// A cluster entry whose CA is read from a file: a Pod's
    /// `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`.
    pub fn cluster_with_ca_file(mut self, name: &str, server: &str, ca_file: &str) -> Self {
        self.config.clusters.push(NamedCluster {
            name: name.to_string(),
            cluster: Some(Cluster {
                server: Some(server.to_string()),
                certificate_authority: Some(ca_file.to_string()),
                ..Cluster::default()
            }),
            other: Default::default(),
        });
        self
    }

    /// A user entry whose bearer token is read from a file, again as it changes: a Pod's
    /// projected ServiceAccount token, which the kubelet renews.
    pub fn token_file_user(mut self, name: &str, token_file: &str) -> Self {
        self.config.auth_infos.push(NamedAuthInfo {
            name: name.to_string(),
            auth_info: Some(AuthInfo {
                token_file: Some(token_file.to_string()),
                ..AuthInfo::default()
            }),
            other: Default::default(),
        });
        self
    }

    /// A user entry authenticating with a bearer token.
    pub fn token_user(mut self, name: &str, token: &str) -> Self {
        self.config.auth_infos.push(NamedAuthInfo {
            name: name.to_string(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..AuthInfo::default()
            }),
            other: Default::default(),
        });
        self
    }

    /// A context: a cluster, a user and an optional default namespace.
    pub fn context(
        mut self,
        name: &str,
        cluster: &str,
        user: &str,
        namespace: Option<&str>,
    ) -> Self {
        self.config.contexts.push(NamedContext {
            name: name.to_string(),
            context: Some(Context {
                cluster: cluster.to_string(),
                user: Some(user.to_string()),
                namespace: namespace.map(String::from),
                extensions: None,
                other: Default::default(),
            }),
            other: Default::default(),
        });
        self
    }

    pub fn current_context(mut self, name: &str) -> Self {
        self.config.current_context = Some(name.to_string());
        self
    }

    pub fn build(self) -> Kubeconfig {
        self.config
    }

    /// The kubeconfig as YAML.
    pub fn to_yaml(&self) -> std::io::Result<String> {
        serde_saphyr::to_string(&self.config).map_err(std::io::Error::other)
    }

    /// Writes the YAML to `path` atomically: a temporary file in the same directory, synced,
    /// then renamed over the target.
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        write_atomic(path, self.to_yaml()?.as_bytes())
    }
}

/// Replaces `path` with `contents` atomically (temporary sibling file, fsync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&directory)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kubeconfig".into());
    let temporary = directory.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (input, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input.as_bytes()), encoded);
        }
    }

    #[test]
    fn written_kubeconfig_reads_back_with_kube() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        KubeconfigBuilder::new()
            .cluster(
                "prod",
                "https://127.0.0.1:6443",
                Some("-----BEGIN CERTIFICATE-----\n"),
            )
            .token_user("sandbox", "sandbox")
            .context("prod", "prod", "sandbox", None)
            .context("staging", "prod", "sandbox", Some("staging"))
            .current_context("prod")
            .write_atomic(&path)
            .expect("written");
        let read = Kubeconfig::read_from(&path).expect("kube reads it");
        assert_eq!(read.current_context.as_deref(), Some("prod"));
        assert_eq!(read.contexts.len(), 2);
        let staging = read.contexts[1].context.as_ref().expect("context");
        assert_eq!(staging.namespace.as_deref(), Some("staging"));
        let cluster = read.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert!(cluster.certificate_authority_data.is_some());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    }
}
