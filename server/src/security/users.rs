//! Users who log in with a password: a TOML file of names and argon2id
//! password hashes (PHC strings, as any argon2 library writes them; never
//! the password itself).
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! password_hash = "$argon2id$v=19$m=19456,t=2,p=1$…"
//! ```

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    user: Vec<UserEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    password_hash: String,
}

/// The users of `--users`.
#[derive(Clone)]
pub struct Users {
    hashes: HashMap<String, String>,
    /// Checked for unknown names, so they take as long as known ones.
    decoy: String,
}

impl std::fmt::Debug for Users {
    // Names only: hashes stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.hashes.keys()).finish()
    }
}

impl Users {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the users file {}", path.display()))?;
        let file: UsersFile = toml::from_str(&text)
            .with_context(|| format!("parsing the users file {}", path.display()))?;
        let mut hashes = HashMap::new();
        for entry in file.user {
            let parsed = PasswordHash::new(&entry.password_hash).map_err(|e| {
                anyhow::anyhow!(
                    "user {}: password_hash is not a PHC string: {e}",
                    entry.name
                )
            })?;
            anyhow::ensure!(
                parsed.algorithm.as_str().starts_with("argon2"),
                "user {}: password_hash must be an argon2 hash, not {}",
                entry.name,
                parsed.algorithm
            );
            anyhow::ensure!(
                hashes
                    .insert(entry.name.clone(), entry.password_hash)
                    .is_none(),
                "user {} appears twice in {}",
                entry.name,
                path.display()
            );
        }
        Ok(Self {
            hashes,
            decoy: hash_password("decoy")?,
        })
    }

    /// Whether `password` is `name`'s.
    pub fn verify(&self, name: &str, password: &str) -> bool {
        let (hash, known) = match self.hashes.get(name) {
            Some(hash) => (hash.as_str(), true),
            None => (self.decoy.as_str(), false),
        };
        let Ok(parsed) = PasswordHash::new(hash) else {
            return false;
        };
        let matches = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        matches && known
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// An argon2id PHC string for `password`, with a fresh salt.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| anyhow::anyhow!("no system randomness for a salt"))?;
    let salt = SaltString::encode_b64(&bytes).map_err(|e| anyhow::anyhow!("a salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
}

/// Appends user `name` with `password` (hashed) to the users file at
/// `path`, creating it; refuses a name already there.
pub fn add_user(path: &Path, name: &str, password: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!name.trim().is_empty(), "the user name is empty");
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    if path.exists() {
        let users = Users::load(path)?;
        anyhow::ensure!(
            !users.hashes.contains_key(name),
            "user {name} already exists in {}",
            path.display()
        );
    }
    let entry = UsersFile {
        user: vec![UserEntry {
            name: name.to_string(),
            password_hash: hash_password(password)?,
        }],
    };
    let text = toml::to_string(&entry).context("encoding the user")?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(format!("\n{text}").as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_added_hashed_and_verified() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        add_user(&path, "alice", "wonderland").unwrap();
        add_user(&path, "bob", "builder").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("wonderland"), "no plain passwords: {text}");
        assert!(text.contains("$argon2id$"), "{text}");
        assert!(add_user(&path, "alice", "again").is_err());

        let users = Users::load(&path).unwrap();
        assert_eq!(users.len(), 2);
        assert!(users.verify("alice", "wonderland"));
        assert!(!users.verify("alice", "builder"));
        assert!(!users.verify("carol", "wonderland"));
        assert!(!users.verify("decoy", "decoy"));
    }

    #[test]
    fn plain_passwords_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        std::fs::write(
            &path,
            "[[user]]\nname = \"a\"\npassword_hash = \"secret\"\n",
        )
        .unwrap();
        assert!(Users::load(&path).is_err());
        std::fs::write(&path, "[[user]]\nname = \"a\"\npassword = \"secret\"\n").unwrap();
        let err = Users::load(&path).unwrap_err();
        assert!(format!("{err:#}").contains("password"), "{err:#}");
    }
}
