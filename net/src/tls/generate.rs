//! A development certificate authority and the certificates a cluster
//! needs, made with rcgen (`squadron-server certs generate`, and tests).
//!
//! Not for production: the CA key is written next to the certificates so
//! more can be issued. Production clusters bring their own CA (cert-manager,
//! a company PKI) and only need the SANs described in `identity`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use super::identity::{Role, CLUSTER_DOMAIN};

/// The files `generate` writes, by name.
#[derive(Debug, Clone)]
pub struct DevCerts {
    pub dir: PathBuf,
}

impl DevCerts {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    /// The client-facing server certificate and key.
    pub fn server(&self) -> (PathBuf, PathBuf) {
        self.pair("server")
    }
    pub fn coordinator(&self) -> (PathBuf, PathBuf) {
        self.pair("coordinator")
    }
    pub fn worker(&self) -> (PathBuf, PathBuf) {
        self.pair("worker")
    }
    /// A client certificate, for servers that ask for one.
    pub fn client(&self) -> (PathBuf, PathBuf) {
        self.pair("client")
    }
    fn pair(&self, name: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}-key.pem")),
        )
    }
}

struct Issuer {
    cert: Certificate,
    key: KeyPair,
}

fn leaf(
    issuer: &Issuer,
    common_name: &str,
    names: &[String],
    role: Option<Role>,
) -> anyhow::Result<(Certificate, KeyPair)> {
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(role) = role {
        params
            .subject_alt_names
            .push(SanType::URI(role.uri().try_into()?));
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer.cert, &issuer.key)?;
    Ok((cert, key))
}

fn write_pair(dir: &Path, name: &str, cert: &Certificate, key: &KeyPair) -> anyhow::Result<()> {
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem())?;
    write_private(&dir.join(format!("{name}-key.pem")), &key.serialize_pem())
}

/// Writes a key readable by its owner only.
fn write_private(path: &Path, pem: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(pem.as_bytes())?;
    Ok(())
}

/// Writes a dev CA (`ca.pem`, `ca-key.pem`) and certificates signed by it
/// into `dir`: `server` (the client-facing Flight SQL port, for `hosts`),
/// `coordinator` and `worker` (cluster identities), `client` (a client
/// certificate).
pub fn generate(dir: &Path, hosts: &[String]) -> anyhow::Result<DevCerts> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Squadron development CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = Issuer {
        cert: ca.self_signed(&ca_key)?,
        key: ca_key,
    };
    std::fs::write(dir.join("ca.pem"), issuer.cert.pem())?;
    write_private(&dir.join("ca-key.pem"), &issuer.key.serialize_pem())?;

    let (cert, key) = leaf(&issuer, "squadron server", hosts, None)?;
    write_pair(dir, "server", &cert, &key)?;
    let cluster = [CLUSTER_DOMAIN.to_string()];
    for (name, role) in [("coordinator", Role::Coordinator), ("worker", Role::Worker)] {
        let (cert, key) = leaf(&issuer, &format!("squadron {name}"), &cluster, Some(role))?;
        write_pair(dir, name, &cert, &key)?;
    }
    let (cert, key) = leaf(&issuer, "squadron client", &[], None)?;
    write_pair(dir, "client", &cert, &key)?;
    Ok(DevCerts {
        dir: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::identity::{load_certs, roles_of};
    use super::*;

    #[test]
    fn cluster_certificates_carry_their_role() {
        let dir = tempfile::tempdir().unwrap();
        let certs = generate(dir.path(), &["localhost".into(), "127.0.0.1".into()]).unwrap();
        let role = |path: PathBuf| roles_of(&load_certs(&path).unwrap()[0]);
        assert_eq!(role(certs.coordinator().0), vec![Role::Coordinator]);
        assert_eq!(role(certs.worker().0), vec![Role::Worker]);
        assert!(role(certs.server().0).is_empty());
        assert!(role(certs.client().0).is_empty());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(certs.worker().1)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "keys are private");
        }
    }
}
