//! Bearer tokens: JWTs the server mints after a password login (HS256,
//! with `sub`, `iat`, `exp`), and JWTs from an external issuer (HS256 with
//! a shared secret, or RS256/ES256 with its public key; issuer and
//! audience checked when configured). The user is the `sub` claim.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// The `iss` of tokens this server mints.
const ISSUER: &str = "squadron";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: u64,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Mints and checks the server's own tokens.
pub struct TokenIssuer {
    encoding: EncodingKey,
    decoding: DecodingKey,
    ttl: Duration,
}

impl TokenIssuer {
    /// With `secret` (32 random bytes when the server has no configured one:
    /// tokens then end with the process, and clients log in again).
    pub fn new(secret: &[u8], ttl: Duration) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            ttl,
        }
    }

    pub fn random(ttl: Duration) -> anyhow::Result<Self> {
        let mut secret = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| anyhow::anyhow!("no system randomness for the token secret"))?;
        Ok(Self::new(&secret, ttl))
    }

    pub fn mint(&self, user: &str) -> anyhow::Result<String> {
        let iat = now();
        let claims = Claims {
            sub: user.to_string(),
            iat,
            exp: iat + self.ttl.as_secs().max(1),
            iss: Some(ISSUER.to_string()),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .context("signing a token")
    }

    /// The user of a token this server minted.
    pub fn verify(&self, token: &str) -> Result<String, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub", "iss"]);
        jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).map(|t| t.claims.sub)
    }
}

/// Tokens from an external identity provider.
pub struct ExternalIssuer {
    key: DecodingKey,
    validation: Validation,
}

impl ExternalIssuer {
    /// An issuer sharing an HS256 secret (the file's bytes, trailing
    /// newline dropped).
    pub fn hs256(secret_file: &Path) -> anyhow::Result<Self> {
        let secret = super::secret::read_secret(secret_file)?;
        Ok(Self {
            key: DecodingKey::from_secret(&secret),
            validation: Validation::new(Algorithm::HS256),
        })
    }

    /// An issuer signing with RS256 or ES256, by its PEM public key.
    pub fn public_key(pem_file: &Path) -> anyhow::Result<Self> {
        let pem =
            std::fs::read(pem_file).with_context(|| format!("reading {}", pem_file.display()))?;
        if let Ok(key) = DecodingKey::from_rsa_pem(&pem) {
            return Ok(Self {
                key,
                validation: Validation::new(Algorithm::RS256),
            });
        }
        let key = DecodingKey::from_ec_pem(&pem).with_context(|| {
            format!(
                "{} is neither an RSA nor an EC public key",
                pem_file.display()
            )
        })?;
        Ok(Self {
            key,
            validation: Validation::new(Algorithm::ES256),
        })
    }

    pub fn with_issuer(mut self, issuer: Option<&str>) -> Self {
        if let Some(issuer) = issuer {
            self.validation.set_issuer(&[issuer]);
        }
        self
    }

    pub fn with_audience(mut self, audience: Option<&str>) -> Self {
        match audience {
            Some(audience) => self.validation.set_audience(&[audience]),
            None => self.validation.validate_aud = false,
        }
        self
    }

    pub fn verify(&self, token: &str) -> Result<String, jsonwebtoken::errors::Error> {
        let mut validation = self.validation.clone();
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        jsonwebtoken::decode::<Claims>(token, &self.key, &validation).map(|t| t.claims.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_verify_and_others_do_not() {
        let issuer = TokenIssuer::random(Duration::from_secs(60)).unwrap();
        let token = issuer.mint("alice").unwrap();
        assert_eq!(issuer.verify(&token).unwrap(), "alice");
        let other = TokenIssuer::random(Duration::from_secs(60)).unwrap();
        assert!(other.verify(&token).is_err(), "another key's token");
        let mut altered = token.clone().into_bytes();
        let i = altered.len() / 2;
        altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
        assert!(issuer.verify(&String::from_utf8(altered).unwrap()).is_err());
        assert!(issuer.verify("not a token").is_err());
    }

    #[test]
    fn expired_tokens_are_refused() {
        let issuer = TokenIssuer::new(&[7; 32], Duration::from_secs(1));
        let claims = Claims {
            sub: "alice".into(),
            iat: now() - 120,
            exp: now() - 60,
            iss: Some(ISSUER.into()),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &issuer.encoding)
            .unwrap();
        let err = issuer.verify(&token).unwrap_err();
        assert!(matches!(
            err.kind(),
            jsonwebtoken::errors::ErrorKind::ExpiredSignature
        ));
    }

    #[test]
    fn external_es256_tokens_with_issuer_and_audience() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let public = dir.path().join("issuer.pem");
        std::fs::write(&public, key.public_key_pem()).unwrap();
        let issuer = ExternalIssuer::public_key(&public)
            .unwrap()
            .with_issuer(Some("idp"))
            .with_audience(Some("squadron"));
        let signing = EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap();
        let sign = |iss: &str, aud: &str, exp: u64| {
            let claims = serde_json::json!({"sub": "dave", "iss": iss, "aud": aud, "iat": now(), "exp": exp});
            jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &signing).unwrap()
        };
        assert_eq!(
            issuer.verify(&sign("idp", "squadron", now() + 60)).unwrap(),
            "dave"
        );
        assert!(issuer
            .verify(&sign("other", "squadron", now() + 60))
            .is_err());
        assert!(issuer
            .verify(&sign("idp", "elsewhere", now() + 60))
            .is_err());
        assert!(issuer.verify(&sign("idp", "squadron", now() - 60)).is_err());
        // An HS256 token is not accepted by an ES256 issuer.
        let hs = TokenIssuer::new(&[1; 32], Duration::from_secs(60))
            .mint("dave")
            .unwrap();
        assert!(issuer.verify(&hs).is_err());
    }
}
