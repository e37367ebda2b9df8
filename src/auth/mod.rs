//! Bearer JWT authentication. `sub` is the owner; threads belong to their
//! owner. The accepted algorithm is fixed by configuration, so a token's own
//! header cannot pick `none` or switch HS256/RS256.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;
use secrecy::ExposeSecret;
use serde::Serialize;

use crate::config::AuthSettings;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Claims {
    pub sub: String,
    pub exp: u64,
    /// Optional (RFC 7519 §4.1.6); toolgate's own tokens carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    pub aud: Audience,
    pub iss: String,
    /// Space-separated scopes, e.g. `toolgate:approve`. Read from a
    /// space-separated string (RFC 8693 §4.2) or, as some identity
    /// providers send it, a list of strings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// The `aud` claim: one audience, or several (RFC 7519 §4.1.3; identity
/// providers send either). The token must name the configured one.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

impl From<&str> for Audience {
    fn from(audience: &str) -> Self {
        Audience::One(audience.to_string())
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error("missing bearer token: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("the Authorization header must use the Bearer scheme")]
    NotBearer,
    #[error("the token has expired")]
    Expired,
    #[error("the token is invalid: {0}")]
    Invalid(String),
}

/// Where the signing key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `auth.hs256_secret`.
    Secret,
    /// `auth.public_key_pem` (and `auth.private_key_pem`).
    KeyFiles,
    DataDirExisting,
    DataDirGenerated,
}

pub struct Keys {
    algorithm: Algorithm,
    encoding: Option<EncodingKey>,
    decoding: DecodingKey,
    audience: String,
    issuer: String,
    leeway: u64,
    pub source: KeySource,
    /// Tokens whose signature and claims were checked, by their exact text:
    /// a client sends the same token with every request, and checking it
    /// again (base64, HMAC or RSA, JSON) is most of what authentication
    /// costs. Only successes are kept; expiry is checked again on every use.
    verified: Mutex<HashMap<Box<str>, Claims>>,
}

/// How many verified tokens [`Keys`] remembers; when full it forgets them
/// all and starts again (a token is then verified once more).
const VERIFIED_TOKENS: usize = 1024;

const KEY_FILE: &str = "signing.key";

impl Keys {
    /// Keys from configuration, or the data directory's key file (created on
    /// first start with 256 random bits, readable by the owner only).
    pub fn load(settings: &AuthSettings, data_dir: &Path) -> anyhow::Result<Keys> {
        let base = |algorithm, encoding, decoding, source| Keys {
            algorithm,
            encoding,
            decoding,
            audience: settings.audience.clone(),
            issuer: settings.issuer.clone(),
            leeway: settings.leeway_secs,
            source,
            verified: Mutex::default(),
        };
        let named_algorithm = settings.algorithm.as_deref();
        if let Some(secret) = &settings.hs256_secret {
            // One key verifies tokens: a secret left beside key files would
            // silently take their place.
            let files: Vec<&str> = [
                ("auth.public_key_pem", settings.public_key_pem.is_some()),
                ("auth.private_key_pem", settings.private_key_pem.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name))
            .collect();
            anyhow::ensure!(
                files.is_empty(),
                "auth.hs256_secret and {} are both set: tokens are verified with one key, \
                 so set the shared secret (HS256) or the key files (RS256, EdDSA), not both",
                files.join(" and ")
            );
            if let Some(alg) = named_algorithm {
                anyhow::ensure!(
                    alg == "HS256",
                    "auth.algorithm is {alg:?}, but auth.hs256_secret is set: a shared secret \
                     signs HS256 tokens (set auth.algorithm to \"HS256\", or remove it)"
                );
            }
            let secret = secret.expose_secret().as_bytes();
            anyhow::ensure!(
                secret.len() >= 32,
                "auth.hs256_secret must be at least 32 bytes"
            );
            return Ok(base(
                Algorithm::HS256,
                Some(EncodingKey::from_secret(secret)),
                DecodingKey::from_secret(secret),
                KeySource::Secret,
            ));
        }
        if let Some(public) = &settings.public_key_pem {
            let (algorithm, name) = match named_algorithm.unwrap_or("RS256") {
                "RS256" => (Algorithm::RS256, "an RSA"),
                "EdDSA" => (Algorithm::EdDSA, "an Ed25519"),
                other => anyhow::bail!(
                    "auth.algorithm must be RS256 or EdDSA with a public key, not {other:?}"
                ),
            };
            let decoding =
                key_file(
                    "public_key_pem",
                    public,
                    name,
                    "public",
                    algorithm,
                    |pem| match algorithm {
                        Algorithm::RS256 => DecodingKey::from_rsa_pem(pem),
                        _ => DecodingKey::from_ed_pem(pem),
                    },
                )?;
            let encoding = match &settings.private_key_pem {
                Some(path) => Some(key_file(
                    "private_key_pem",
                    path,
                    name,
                    "private",
                    algorithm,
                    |pem| match algorithm {
                        Algorithm::RS256 => EncodingKey::from_rsa_pem(pem),
                        _ => EncodingKey::from_ed_pem(pem),
                    },
                )?),
                None => None,
            };
            let keys = base(algorithm, encoding, decoding, KeySource::KeyFiles);
            keys.check_pair()?;
            return Ok(keys);
        }
        anyhow::ensure!(
            settings.private_key_pem.is_none(),
            "auth.private_key_pem is set without auth.public_key_pem: tokens are verified \
             with the public key (set both)"
        );
        if let Some(alg) = named_algorithm {
            anyhow::ensure!(
                alg == "HS256",
                "auth.algorithm is {alg:?}, but auth.public_key_pem is not set: {alg} tokens \
                 are verified with a public key (set auth.public_key_pem, or remove \
                 auth.algorithm to sign with the data directory's HS256 key)"
            );
        }
        let path = data_dir.join(KEY_FILE);
        let (secret, source) = if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read the signing key {}", path.display()))?;
            let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(text.trim())
                .ok()
                .filter(|secret| secret.len() >= 32);
            let secret = secret.ok_or_else(|| {
                anyhow::anyhow!(
                    "{} is not a signing key toolgate wrote (unpadded base64url of at least \
                     32 bytes): restore it, or remove it to have a new one made (tokens \
                     signed with the old key are then refused)",
                    path.display()
                )
            })?;
            warn_if_others_can_read(&path);
            (secret, KeySource::DataDirExisting)
        } else {
            crate::private_dir(data_dir)?;
            let mut secret = vec![0u8; 32];
            rand::rng().fill_bytes(&mut secret);
            write_private(
                &path,
                &base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&secret),
            )
            .with_context(|| format!("cannot write the signing key {}", path.display()))?;
            (secret, KeySource::DataDirGenerated)
        };
        Ok(base(
            Algorithm::HS256,
            Some(EncodingKey::from_secret(&secret)),
            DecodingKey::from_secret(&secret),
            source,
        ))
    }

    /// A private key configured beside the public one must sign tokens the
    /// public key verifies: otherwise `toolgate token` prints tokens every
    /// server refuses.
    fn check_pair(&self) -> anyhow::Result<()> {
        if self.encoding.is_none() {
            return Ok(());
        }
        let token = self.mint("toolgate-key-check", 60)?;
        self.check(&token).map(|_| ()).map_err(|e| {
            anyhow::anyhow!(
                "auth.private_key_pem does not match auth.public_key_pem: a token it signs \
                 is refused ({e})"
            )
        })
    }

    /// What verifies tokens, for the start-up log.
    pub fn describe(&self, data_dir: &Path) -> String {
        let alg = self.algorithm;
        match self.source {
            KeySource::Secret => format!("{alg:?} with auth.hs256_secret"),
            KeySource::KeyFiles => format!("{alg:?} with auth.public_key_pem"),
            KeySource::DataDirExisting | KeySource::DataDirGenerated => {
                format!("{alg:?} with {}", data_dir.join(KEY_FILE).display())
            }
        }
    }

    /// The keys a server with these settings and data directory verifies
    /// with, for minting tokens outside it (`toolgate token`). Unlike
    /// [`Keys::load`] it never creates a key file: a token signed with a new
    /// key that no server holds would be refused by every one of them.
    pub fn load_existing(settings: &AuthSettings, data_dir: &Path) -> anyhow::Result<Keys> {
        let path = data_dir.join(KEY_FILE);
        anyhow::ensure!(
            settings.hs256_secret.is_some() || settings.public_key_pem.is_some() || path.exists(),
            "no signing key: {} does not exist and none is configured. Pass the server's \
             --data-dir, or create the key there with `toolgate migrate` (or by starting \
             the server once)",
            path.display()
        );
        Keys::load(settings, data_dir)
    }

    /// Sign a token for `sub` valid for `ttl_secs`.
    pub fn mint(&self, sub: &str, ttl_secs: u64) -> anyhow::Result<String> {
        self.mint_scoped(sub, ttl_secs, None)
    }

    /// Sign a token carrying `scope` (space-separated scopes).
    pub fn mint_scoped(
        &self,
        sub: &str,
        ttl_secs: u64,
        scope: Option<&str>,
    ) -> anyhow::Result<String> {
        let encoding = self.encoding.as_ref().ok_or_else(|| {
            anyhow::anyhow!("no private key configured: set auth.private_key_pem to mint tokens")
        })?;
        anyhow::ensure!(
            valid_subject(sub),
            "the subject must be 1-128 printable characters"
        );
        let now = unix_now();
        // A JSON number every reader takes as an exact integer.
        const LAST_EXP: u64 = (1 << 53) - 1;
        let exp = now
            .checked_add(ttl_secs)
            .filter(|exp| *exp <= LAST_EXP)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "a lifetime of {ttl_secs} s is too long: a token must expire by {LAST_EXP} \
                     (seconds since 1970)"
                )
            })?;
        let claims = Claims {
            sub: sub.to_string(),
            iat: Some(now),
            exp,
            aud: Audience::One(self.audience.clone()),
            iss: self.issuer.clone(),
            scope: scope.map(str::to_string),
        };
        Ok(jsonwebtoken::encode(
            &Header::new(self.algorithm),
            &claims,
            encoding,
        )?)
    }

    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let known = self.verified_tokens().get(token).cloned();
        if let Some(claims) = known {
            // The same test as the full check's: expired once `exp` and
            // the leeway are reached.
            if claims.exp.saturating_add(self.leeway) <= unix_now() {
                self.verified_tokens().remove(token);
                return Err(AuthError::Expired);
            }
            return Ok(claims);
        }
        let claims = self.check(token)?;
        let mut verified = self.verified_tokens();
        if verified.len() >= VERIFIED_TOKENS {
            verified.clear();
        }
        verified.insert(token.into(), claims.clone());
        Ok(claims)
    }

    fn verified_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Claims>> {
        // A panic while the lock was held leaves a map that is still whole.
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Verify a token's signature and claims from scratch.
    fn check(&self, token: &str) -> Result<Claims, AuthError> {
        if has_critical_extensions(token) {
            // RFC 7515 §4.1.11: extensions a recipient must understand, and
            // toolgate understands none.
            return Err(AuthError::Invalid(
                "critical header extensions (crit) are not supported".into(),
            ));
        }
        // The signature and algorithm are checked by `jsonwebtoken`; the
        // claims are read here, so that a claim of the wrong type is named
        // rather than reported as a malformed token, and none is ignored.
        let mut validation = Validation::new(self.algorithm);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_aud = false;
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &self.decoding,
            &validation,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                AuthError::Invalid("bad signature".into())
            }
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                AuthError::Invalid("algorithm not accepted".into())
            }
            _ => AuthError::Invalid("malformed token".into()),
        })?;
        let (claims, not_before) = read_claims(&data.claims)?;
        let now = unix_now();
        // RFC 7519: not accepted on or after `exp` (here with the leeway),
        // the moment a stream it opened ends.
        if claims.exp.saturating_add(self.leeway) <= now {
            return Err(AuthError::Expired);
        }
        if not_before.is_some_and(|nbf| nbf > now.saturating_add(self.leeway)) {
            return Err(AuthError::Invalid(
                "not valid yet (nbf is in the future)".into(),
            ));
        }
        if claims.iss != self.issuer {
            return Err(AuthError::Invalid("wrong issuer".into()));
        }
        let audiences = match &claims.aud {
            Audience::One(one) => std::slice::from_ref(one),
            Audience::Many(many) => many.as_slice(),
        };
        if !audiences.contains(&self.audience) {
            return Err(AuthError::Invalid("wrong audience".into()));
        }
        if !valid_subject(&claims.sub) {
            return Err(AuthError::Invalid("unusable subject".into()));
        }
        Ok(claims)
    }
}

/// The claims of a token whose signature was checked, and its `nbf`. Each
/// registered claim toolgate reads must be present where required and of its
/// type (RFC 7519 §4.1); the refusal names the claim.
fn read_claims(
    claims: &serde_json::Map<String, serde_json::Value>,
) -> Result<(Claims, Option<u64>), AuthError> {
    use serde_json::Value;
    let missing = |name: &str| AuthError::Invalid(format!("missing claim {name}"));
    let wrong = |name: &str, what: &str| AuthError::Invalid(format!("claim {name} must be {what}"));
    // A NumericDate is seconds since the epoch and may have a fraction
    // (RFC 7519 §2); the whole seconds are kept.
    let date = |name: &str| -> Result<Option<u64>, AuthError> {
        match claims.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|seconds| seconds.is_finite())
                .map(|seconds| Some(seconds.max(0.0).floor() as u64))
                .ok_or_else(|| wrong(name, "a number of seconds since the epoch")),
            Some(_) => Err(wrong(name, "a number of seconds since the epoch")),
        }
    };
    let text = |name: &str| -> Result<String, AuthError> {
        match claims.get(name) {
            None => Err(missing(name)),
            Some(Value::String(text)) => Ok(text.clone()),
            Some(_) => Err(wrong(name, "a string")),
        }
    };
    let exp = date("exp")?.ok_or_else(|| missing("exp"))?;
    let nbf = date("nbf")?;
    let iat = date("iat")?;
    let sub = text("sub")?;
    let iss = text("iss")?;
    let aud = match claims.get("aud") {
        None => return Err(missing("aud")),
        Some(Value::String(one)) => Audience::One(one.clone()),
        Some(Value::Array(many)) => Audience::Many(
            many.iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| wrong("aud", "a string or a list of strings"))?,
        ),
        Some(_) => return Err(wrong("aud", "a string or a list of strings")),
    };
    // RFC 6749 §3.3: scopes are separated by spaces (U+0020) alone, and
    // each is printable ASCII other than `"` and `\`; a list holds one
    // scope per element. Anything else is no scope (and is dropped, so
    // `toolgate:approve\u{a0}` or a list element `"toolgate:approve x"`
    // grants nothing).
    let scope_token = |s: &&str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
    };
    let scope = match claims.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(
            text.split(' ')
                .filter(scope_token)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(Value::as_str)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong("scope", "a string or a list of strings"))?
                .into_iter()
                .filter(scope_token)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Some(_) => return Err(wrong("scope", "a string or a list of strings")),
    };
    Ok((
        Claims {
            sub,
            exp,
            iat,
            aud,
            iss,
            scope,
        },
        nbf,
    ))
}

/// Does the token's header carry `crit`? A header that cannot be read is
/// left to the full check, which refuses it.
fn has_critical_extensions(token: &str) -> bool {
    use base64::Engine;
    let Some((header, _)) = token.split_once('.') else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|bytes| {
            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes).ok()
        })
        .is_some_and(|header| header.contains_key("crit"))
}

fn valid_subject(sub: &str) -> bool {
    !sub.is_empty() && sub.len() <= 128 && !sub.chars().any(char::is_control)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The key in the PEM file an `auth.*_pem` setting names, or an error
/// naming the setting, the file and the kind of key it should hold.
fn key_file<K>(
    setting: &str,
    path: &Path,
    name: &str,
    kind: &str,
    algorithm: Algorithm,
    parse: impl FnOnce(&[u8]) -> jsonwebtoken::errors::Result<K>,
) -> anyhow::Result<K> {
    let pem = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("auth.{setting}: cannot read {}: {e}", path.display()))?;
    parse(&pem).map_err(|e| {
        anyhow::anyhow!(
            "auth.{setting}: {} is not {name} {kind} key in PEM, which auth.algorithm \
             {algorithm:?} needs ({e})",
            path.display()
        )
    })
}

/// A key file others may read is a key others may sign with: said at
/// start-up, not changed behind the operator's back.
fn warn_if_others_can_read(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "the signing key can be read by other users than its owner: anyone who can read it can sign tokens (chmod 600)"
            );
        }
    }
}

/// Write a new key file readable by its owner only, whole or not at all:
/// written beside it, synced, then renamed into place. A key file cut
/// short (a full disk) would stop every later start until removed by hand.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    // One left by a start that died while writing it.
    let _ = std::fs::remove_file(&partial);
    let write = || -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&partial)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        // Never over a key another process made meanwhile.
        std::fs::hard_link(&partial, path)?;
        std::fs::remove_file(&partial)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

/// Parse the `Authorization` header value into a token.
pub fn bearer_token(header: Option<&str>) -> Result<&str, AuthError> {
    let value = header.ok_or(AuthError::Missing)?;
    // An empty header, or the scheme with no token after it: the token is
    // what is missing.
    if value.trim().is_empty() || value.trim().eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Missing);
    }
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::NotBearer)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::NotBearer);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Missing);
    }
    if token.contains(char::is_whitespace) {
        return Err(AuthError::Invalid(
            "it holds whitespace; a bearer token is one word (a JWT: three base64url parts joined by dots)".into(),
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(dir: &Path) -> Keys {
        Keys::load(&AuthSettings::default(), dir).unwrap()
    }

    #[test]
    fn generates_then_reuses_the_data_dir_key() {
        let dir = tempfile::tempdir().unwrap();
        let first = keys(dir.path());
        assert_eq!(first.source, KeySource::DataDirGenerated);
        let token = first.mint("alice", 60).unwrap();
        let second = keys(dir.path());
        assert_eq!(second.source, KeySource::DataDirExisting);
        assert_eq!(second.verify(&token).unwrap().sub, "alice");
    }

    #[test]
    fn rejects_expired_and_foreign_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let k = keys(dir.path());
        let other = keys(tempfile::tempdir().unwrap().path());
        let foreign = other.mint("alice", 60).unwrap();
        assert_eq!(
            k.verify(&foreign),
            Err(AuthError::Invalid("bad signature".into()))
        );
        let mut expired_keys = keys(dir.path());
        expired_keys.leeway = 0;
        let claims = Claims {
            sub: "a".into(),
            exp: unix_now() - 10,
            iat: Some(unix_now() - 20),
            aud: "toolgate".into(),
            iss: "toolgate".into(),
            scope: None,
        };
        let expired = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            expired_keys.encoding.as_ref().unwrap(),
        )
        .unwrap();
        assert_eq!(expired_keys.verify(&expired), Err(AuthError::Expired));
    }

    #[test]
    fn tokens_without_iat_or_with_a_list_of_scopes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let k = keys(dir.path());
        let sign = |claims: serde_json::Value| {
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims,
                k.encoding.as_ref().unwrap(),
            )
            .unwrap()
        };
        let token = sign(serde_json::json!({"sub": "a", "exp": unix_now() + 60,
            "aud": "toolgate", "iss": "toolgate", "scope": ["toolgate:approve", "x"]}));
        let claims = k.verify(&token).unwrap();
        assert_eq!(claims.iat, None);
        assert_eq!(claims.scope.as_deref(), Some("toolgate:approve x"));
        // Scopes are separated by U+0020 alone, one per list element; what
        // is no scope token grants nothing.
        for (scope, read) in [
            (serde_json::json!("toolgate:approve\u{a0}"), ""),
            (serde_json::json!("toolgate:approve\ttoolgate:x"), ""),
            (serde_json::json!(["toolgate:approve extra"]), ""),
            (
                serde_json::json!("a  toolgate:approve"),
                "a toolgate:approve",
            ),
            (
                serde_json::json!(["x", "toolgate:approve"]),
                "x toolgate:approve",
            ),
        ] {
            let token = sign(serde_json::json!({"sub": "a", "exp": unix_now() + 60,
                "aud": "toolgate", "iss": "toolgate", "scope": scope}));
            let claims = k.verify(&token).unwrap();
            assert_eq!(claims.scope.as_deref(), Some(read), "{scope}");
        }
        let token = sign(serde_json::json!({"sub": "a", "exp": unix_now() + 60,
            "aud": "toolgate", "iss": "toolgate", "scope": [1]}));
        assert!(matches!(k.verify(&token), Err(AuthError::Invalid(_))));
    }

    #[test]
    fn a_remembered_token_is_still_checked_for_expiry_and_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut k = keys(dir.path());
        k.leeway = 0;
        let token = k.mint("alice", 60).unwrap();
        assert_eq!(k.verify(&token).unwrap().sub, "alice");
        assert!(k.verified_tokens().contains_key(token.as_str()));
        // Another signature over the same header and claims: not the
        // remembered text, so it is checked in full and refused.
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let flipped = if signature.starts_with('A') { 'B' } else { 'A' };
        let forged = format!("{signed}.{flipped}{}", &signature[1..]);
        assert_eq!(
            k.verify(&forged),
            Err(AuthError::Invalid("bad signature".into()))
        );
        // Time passes while the token is remembered.
        k.verified_tokens().get_mut(token.as_str()).unwrap().exp = unix_now() - 1;
        assert_eq!(k.verify(&token), Err(AuthError::Expired));
        assert!(!k.verified_tokens().contains_key(token.as_str()));
    }

    #[test]
    fn the_remembered_tokens_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let k = keys(dir.path());
        for i in 0..=VERIFIED_TOKENS {
            let token = k.mint(&format!("user{i}"), 60).unwrap();
            k.verify(&token).unwrap();
            assert!(k.verified_tokens().len() <= VERIFIED_TOKENS);
        }
        assert_eq!(k.verified_tokens().len(), 1);
    }

    /// A token signed with the service's key whose claims and header are
    /// given as JSON.
    fn signed(k: &Keys, header: serde_json::Value, claims: serde_json::Value) -> String {
        use base64::Engine;
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let message = format!("{}.{}", b64(&header), b64(&claims));
        let signature = jsonwebtoken::crypto::sign(
            message.as_bytes(),
            k.encoding.as_ref().unwrap(),
            Algorithm::HS256,
        )
        .unwrap();
        format!("{message}.{signature}")
    }

    #[test]
    fn registered_claims_and_header_parameters_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let mut k = keys(dir.path());
        k.leeway = 0;
        let now = unix_now();
        let claims = |extra: serde_json::Value| {
            let mut c = serde_json::json!({
                "sub": "alice", "exp": now + 60, "iat": now, "aud": "toolgate", "iss": "toolgate"
            });
            c.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            c
        };
        let header = serde_json::json!({"alg": "HS256", "typ": "JWT"});
        // Not before an hour from now: not yet.
        let early = signed(
            &k,
            header.clone(),
            claims(serde_json::json!({"nbf": now + 3600})),
        );
        assert_eq!(
            k.verify(&early),
            Err(AuthError::Invalid(
                "not valid yet (nbf is in the future)".into()
            ))
        );
        let due = signed(
            &k,
            header.clone(),
            claims(serde_json::json!({"nbf": now - 1})),
        );
        assert_eq!(k.verify(&due).unwrap().sub, "alice");
        // A NumericDate may have a fraction; the whole seconds are kept.
        let fractional = signed(
            &k,
            header.clone(),
            claims(serde_json::json!({"exp": now as f64 + 60.75, "iat": now as f64 - 0.5})),
        );
        let read = k.verify(&fractional).unwrap();
        assert_eq!((read.exp, read.iat), (now + 60, Some(now - 1)));
        // A registered claim of the wrong type, or one that is missing, is
        // named, not ignored and not called a malformed token.
        let refused = |extra: serde_json::Value, drop: &str| {
            let mut c = claims(extra);
            c.as_object_mut().unwrap().remove(drop);
            k.verify(&signed(&k, header.clone(), c))
        };
        for (extra, drop, message) in [
            (
                serde_json::json!({"nbf": "tomorrow"}),
                "",
                "claim nbf must be a number of seconds since the epoch",
            ),
            (
                serde_json::json!({"exp": "soon"}),
                "",
                "claim exp must be a number of seconds since the epoch",
            ),
            (
                serde_json::json!({"iat": true}),
                "",
                "claim iat must be a number of seconds since the epoch",
            ),
            (serde_json::json!({}), "exp", "missing claim exp"),
            (serde_json::json!({}), "sub", "missing claim sub"),
            (
                serde_json::json!({"sub": 7}),
                "",
                "claim sub must be a string",
            ),
            (
                serde_json::json!({"iss": ["toolgate"]}),
                "",
                "claim iss must be a string",
            ),
            (serde_json::json!({}), "aud", "missing claim aud"),
            (
                serde_json::json!({"aud": ["toolgate", 1]}),
                "",
                "claim aud must be a string or a list of strings",
            ),
            (
                serde_json::json!({"scope": {"a": 1}}),
                "",
                "claim scope must be a string or a list of strings",
            ),
        ] {
            assert_eq!(
                refused(extra, drop),
                Err(AuthError::Invalid(message.into()))
            );
        }
        // A token naming another issuer.
        assert_eq!(
            refused(serde_json::json!({"iss": "elsewhere"}), ""),
            Err(AuthError::Invalid("wrong issuer".into()))
        );
        // An audience list naming this service is accepted; one that does
        // not is refused.
        let listed = signed(
            &k,
            header.clone(),
            claims(serde_json::json!({"aud": ["other", "toolgate"], "sub": "bob"})),
        );
        assert_eq!(k.verify(&listed).unwrap().sub, "bob");
        let elsewhere = signed(
            &k,
            header.clone(),
            claims(serde_json::json!({"aud": ["other"]})),
        );
        assert_eq!(
            k.verify(&elsewhere),
            Err(AuthError::Invalid("wrong audience".into()))
        );
        // A critical extension nobody here understands.
        let critical = signed(
            &k,
            serde_json::json!({"alg": "HS256", "typ": "JWT", "crit": ["exp-ext"], "exp-ext": 1}),
            claims(serde_json::json!({"sub": "carol"})),
        );
        assert!(
            matches!(k.verify(&critical), Err(AuthError::Invalid(m)) if m.contains("crit")),
            "{:?}",
            k.verify(&critical)
        );
    }

    #[test]
    fn key_pairs_sign_tokens_their_public_keys_verify() {
        let fixture = |name: &str| {
            Some(std::path::PathBuf::from(format!(
                "{}/tests/fixtures/jwt/{name}",
                env!("CARGO_MANIFEST_DIR")
            )))
        };
        let dir = tempfile::tempdir().unwrap();
        for (algorithm, public, private) in [
            ("RS256", "rsa.pub.pem", "rsa.pem"),
            ("EdDSA", "ed25519.pub.pem", "ed25519.pem"),
        ] {
            let settings = AuthSettings {
                algorithm: Some(algorithm.into()),
                public_key_pem: fixture(public),
                private_key_pem: fixture(private),
                ..AuthSettings::default()
            };
            let signer = Keys::load(&settings, dir.path()).unwrap();
            assert_eq!(signer.source, KeySource::KeyFiles);
            let token = signer.mint("alice", 60).unwrap();
            assert_eq!(signer.verify(&token).unwrap().sub, "alice");
            // Verifying only: tokens come from elsewhere, none is minted.
            let verifier = Keys::load(
                &AuthSettings {
                    private_key_pem: None,
                    ..settings
                },
                dir.path(),
            )
            .unwrap();
            assert_eq!(verifier.verify(&token).unwrap().sub, "alice");
            assert!(verifier.mint("bob", 60).is_err());
            // An HS256 token is refused whatever its key.
            let hs = keys(dir.path()).mint("alice", 60).unwrap();
            assert!(verifier.verify(&hs).is_err());
        }
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), Err(AuthError::NotBearer));
        assert_eq!(bearer_token(None), Err(AuthError::Missing));
        assert_eq!(bearer_token(Some("Bearer ")), Err(AuthError::Missing));
        assert_eq!(bearer_token(Some("Bearer")), Err(AuthError::Missing));
        assert_eq!(bearer_token(Some("")), Err(AuthError::Missing));
        assert_eq!(bearer_token(Some("  ")), Err(AuthError::Missing));
        assert!(matches!(
            bearer_token(Some("Bearer abc extra")),
            Err(AuthError::Invalid(why)) if why.contains("whitespace")
        ));
    }
}
