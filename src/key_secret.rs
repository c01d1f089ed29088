//! Where the key secret (`payonce_core::intention`) comes from, and the check that it is this
//! ledger's: configuration first; a quick-start SQLite ledger keeps one in a file beside it, so
//! `payonce serve` and the commands run after it on the same file derive the same keys without
//! anyone setting one. Every process that derives keys compares the secret's fingerprint with the
//! one the ledger keeps ([`checked`]) and refuses to start on a mismatch: another secret after a
//! restore would pay every lost invoice again.

use anyhow::Context;
use payonce_core::clock::Timestamp;
use payonce_core::intention::{KeySecret, KeySecretError};
use payonce_ledger::identity::{IdentityLedger, SecretEvidence};
use std::path::{Path, PathBuf};

/// Suffix of the file next to a SQLite database that keeps its key secret (mode 0600).
pub const KEY_SECRET_FILE_SUFFIX: &str = ".key-secret";

/// The secret for `database_url`: `configured` when set; else a SQLite file's own (read, or created
/// mode 0600); else a fresh one for an in-memory ledger, which nothing can restore; else (Postgres)
/// an error that says how to set one.
/// A SQLite ledger whose keys were derived already (`in_use`) never gets a new secret file: a
/// ledger copied without its secret would otherwise derive new keys for every lost invoice.
pub fn resolve(configured: &str, database_url: &str, in_use: bool) -> anyhow::Result<KeySecret> {
    if !configured.is_empty() {
        return Ok(KeySecret::parse(configured)?);
    }
    if let Some(path) = file_for(database_url) {
        return read_or_create(&path, in_use);
    }
    if is_in_memory(database_url) {
        return Ok(KeySecret::generate());
    }
    Err(KeySecretError::Missing.into())
}

fn sqlite_path(database_url: &str) -> Option<&str> {
    let rest = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    Some(rest.split('?').next().unwrap_or_default())
}

fn is_in_memory(database_url: &str) -> bool {
    sqlite_path(database_url).is_some_and(|p| p.is_empty() || p == ":memory:")
}

/// The key secret file of a SQLite file ledger; none for Postgres or an in-memory database.
pub fn file_for(database_url: &str) -> Option<PathBuf> {
    let path = sqlite_path(database_url)?;
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    Some(PathBuf::from(format!("{path}{KEY_SECRET_FILE_SUFFIX}")))
}

fn read_or_create(path: &Path, in_use: bool) -> anyhow::Result<KeySecret> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(secret) = read(path, in_use)? {
        return Ok(secret);
    }
    let secret = KeySecret::generate();
    // create_new: two processes starting at once keep the first one's secret (and nothing is
    // ever written through a link: O_EXCL refuses one, even dangling).
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            file.write_all(secret.expose().as_bytes())?;
            file.sync_all()?;
            Ok(secret)
        }
        // Another process made it meanwhile: read its secret, once (a file that is there to
        // create and gone to read is refused by `read`, never tried again in a loop).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path, in_use)?
            .with_context(|| {
                format!(
                    "{} appeared while this process made a key secret, then vanished: \
                     start again once one process has made it",
                    path.display()
                )
            }),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// The secret in the file at `path`, or `None` when there is none there to read and one may be made.
fn read(path: &Path, in_use: bool) -> anyhow::Result<Option<KeySecret>> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            anyhow::ensure!(
                mode & 0o077 == 0,
                "{} is readable by others (mode {:o}): chmod 600 it",
                path.display(),
                mode & 0o777
            );
            KeySecret::parse(text.trim())
                .with_context(|| format!("the key secret in {}", path.display()))
                .map(Some)
        }
        // Not found, yet something is there: a link to nothing (issue 53). Creating the file
        // would fail (it exists) and reading it again would fail the same way for ever.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(path).is_ok() =>
        {
            let target = std::fs::read_link(path)
                .map_or_else(|_| "nothing".to_string(), |t| t.display().to_string());
            anyhow::bail!(
                "the key secret file {} is a symbolic link to {target}, which does not exist: \
                 restore the file it points to (or point the link at this ledger's key secret \
                 file, or set PAYONCE_KEY_SECRET); no secret is made through a broken link",
                path.display()
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && in_use => {
            anyhow::bail!(
                "the ledger beside {} already holds operations, but its key secret file {} is \
                 missing: copy that file from where the ledger came from (or set \
                 PAYONCE_KEY_SECRET to the secret it was used with). A new secret would derive new \
                 keys and pay every invoice a restore lost a second time, so none is made",
                path.display(),
                path.display()
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The secret for `database_url` (as [`resolve`]), checked against the ledger: its recorded
/// fingerprint must match; a ledger from before fingerprints must have derived its operation ids
/// with this secret; a ledger without either gets this secret's fingerprint. Any mismatch is an
/// error that says what to do: the process must not start.
pub async fn checked(
    configured: &str,
    database_url: &str,
    ledger: &dyn IdentityLedger,
    now: Timestamp,
) -> anyhow::Result<KeySecret> {
    let evidence = ledger
        .secret_evidence()
        .await
        .context("reading the ledger's key secret fingerprint")?;
    let secret = resolve(configured, database_url, evidence.in_use())?;
    let mine = secret.fingerprint();
    let recorded = match evidence {
        SecretEvidence {
            fingerprint: Some(recorded),
            ..
        } => recorded,
        SecretEvidence {
            derived: Some(derived),
            ..
        } if !secret.derived(&derived.id, &derived.tenant, &derived.business_key) => {
            anyhow::bail!(mismatch(
                &mine,
                &format!(
                    "operation {} was not derived with it; the ledger has no fingerprint yet",
                    derived.id
                )
            ))
        }
        _ => ledger
            .record_fingerprint(&mine, now)
            .await
            .context("recording the key secret's fingerprint in the ledger")?,
    };
    anyhow::ensure!(
        recorded == mine,
        mismatch(&mine, &format!("the ledger was used with {recorded}"))
    );
    Ok(secret)
}

/// The refusal, in one sentence that says what to do.
fn mismatch(mine: &str, why: &str) -> String {
    format!(
        "the key secret (PAYONCE_KEY_SECRET, fingerprint {mine}) is not this ledger's: {why}. \
         Start every process with the secret this ledger was created with (from the vault entry \
         of this ledger, or the `.key-secret` file of a SQLite ledger). Another secret would \
         derive new processor keys and pay every invoice a restore lost a second time; the \
         secret is fixed for the ledger's life (docs/runbook.md, \"The key secret\")"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_file_memory_and_postgres() {
        let configured = "c".repeat(40);
        assert_eq!(
            resolve(&configured, "postgres://x/y", false).unwrap(),
            KeySecret::parse(&configured).unwrap()
        );
        let err = resolve("", "postgres://x/y", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("PAYONCE_KEY_SECRET"), "{err}");
        assert!(resolve("short", "sqlite::memory:", false).is_err());
        assert!(resolve("", "sqlite::memory:", false).is_ok());

        let dir = std::env::temp_dir().join(format!(
            "payonce-key-secret-{}",
            payonce_core::id::random_hex(6)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite:{}/ledger.db", dir.display());
        let first = resolve("", &url, false).unwrap();
        assert_eq!(resolve("", &url, false).unwrap(), first, "kept in the file");
        let file = file_for(&url).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            resolve("", &url, false).is_err(),
            "a file others can read is refused"
        );
        std::fs::remove_file(&file).unwrap();
        let err = resolve("", &url, true).unwrap_err().to_string();
        assert!(
            err.contains("key secret file") && err.contains("missing"),
            "{err}"
        );
        assert!(!file.exists(), "no secret is made up for a ledger in use");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
