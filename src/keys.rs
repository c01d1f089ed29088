//! `payonce keys create | list | revoke | rotate`: the API key lifecycle from the command line (and
//! `payonce create-key`, its older spelling). Secrets are printed once, at creation or rotation;
//! everything else names a key by its public id (`key_…`). The logic is `payonce_api::keys`.

use anyhow::Context;
use clap::{Args, Subcommand};
use payonce_api::keys::{self, IssuedKey, KeyError};
use payonce_core::clock::{Clock, SystemClock, Timestamp};
use payonce_core::id::TenantId;
use payonce_ledger::{ApiKeyRecord, Role, SharedLedger};
use payonce_reconciler::oncall::table;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;

/// `payonce keys …`.
#[derive(Subcommand)]
pub enum KeysCommand {
    /// Issues a key for a tenant and role; prints its id and its secret (shown once, stored hashed).
    Create(CreateArgs),
    /// Lists keys (id, tenant, role, label, created, expires, state, last used); never a secret or hash.
    List {
        /// Only this tenant's keys.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Revokes a key at once: every api process refuses it from its next request (401).
    Revoke {
        /// The key's id (`key_…`, from `keys list`).
        id: String,
        /// Why (recorded with the key).
        #[arg(long, default_value = "revoked with payonce keys revoke")]
        reason: String,
        /// Who is revoking (recorded with the key).
        #[arg(long, env = "USER", default_value = "on-call")]
        actor: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Issues a new key with the same tenant, role and label; the old one keeps working for the grace period, then is refused.
    Rotate {
        /// The key's id (`key_…`).
        id: String,
        /// The new key's lifetime (e.g. 90d, 12h); default: never expires.
        #[arg(long, value_parser = lifetime)]
        expires_in: Option<Duration>,
        /// How long the old key keeps working (0s: stop it at once).
        #[arg(long, value_parser = grace, default_value = "1h")]
        grace: Duration,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// `keys create` (and `create-key`) arguments.
#[derive(Args)]
pub struct CreateArgs {
    /// Tenant the key acts for.
    #[arg(long)]
    pub tenant: String,
    /// service, assistant or on_call.
    #[arg(long)]
    pub role: String,
    /// Human label (who or what holds the key).
    #[arg(long, default_value = "created by payonce keys create")]
    pub label: String,
    /// Lifetime (e.g. 90d, 12h, 30m); default: never expires.
    #[arg(long, value_parser = lifetime)]
    pub expires_in: Option<Duration>,
    /// An on-call key that signs in and reads everything, and resolves or approves nothing.
    #[arg(long)]
    pub read_only: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

fn lifetime(raw: &str) -> Result<Duration, String> {
    keys::parse_lifetime(raw, false).map_err(|e| e.to_string())
}

fn grace(raw: &str) -> Result<Duration, String> {
    keys::parse_lifetime(raw, true).map_err(|e| e.to_string())
}

fn now() -> Timestamp {
    SystemClock.now()
}

/// A time relative to now, for tables: `3m ago`, `in 89d`.
fn when(now: Timestamp, at: Timestamp) -> String {
    let (now_ms, at_ms) = (now.as_millis(), at.as_millis());
    let s = ((at_ms - now_ms).abs() + 500) / 1000;
    // Rounded to the nearest unit: a key made `--expires-in 90d` a moment ago expires "in 90d".
    let span = match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", (s + 30) / 60),
        7_200..=172_799 => format!("{}h", (s + 1_800) / 3_600),
        _ => format!("{}d", (s + 43_200) / 86_400),
    };
    if at_ms > now_ms {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// `active`, `expired`, `revoked`, or `rotated` (still in its grace period).
fn state(key: &ApiKeyRecord, now: Timestamp) -> &'static str {
    if key.revoked_at.is_some() {
        "revoked"
    } else if !key.is_active(now) {
        "expired"
    } else if key.replaced_by.is_some() {
        "rotated"
    } else {
        "active"
    }
}

/// A key as listed: never its secret or hash.
fn view(key: &ApiKeyRecord, now: Timestamp) -> Value {
    json!({
        "id": key.key_id,
        "tenant": key.tenant.as_str(),
        "role": key.role.as_str(),
        "label": key.label,
        "state": state(key, now),
        "created_at_ms": key.created_at,
        "expires_at_ms": key.expires_at,
        "revoked_at_ms": key.revoked_at,
        "revoked_by": key.revoked_by,
        "revoked_reason": key.revoked_reason,
        "replaced_by": key.replaced_by,
        "last_used_at_ms": key.last_used_at,
        "read_only": key.read_only,
    })
}

fn issued_json(key: &IssuedKey, now: Timestamp) -> Value {
    let mut v = view(&key.record, now);
    v["secret"] = json!(key.secret);
    v
}

/// A key's role as a person reads it: a read-only key says so, as the console does.
fn role_label(k: &ApiKeyRecord) -> String {
    if k.read_only {
        format!("{} (read-only)", k.role.as_str())
    } else {
        k.role.as_str().to_string()
    }
}

fn print_issued(key: &IssuedKey, now: Timestamp) {
    let r = &key.record;
    println!(
        "{}  tenant {}  role {}  label {:?}  expires {}",
        key.key_id,
        r.tenant,
        role_label(r),
        r.label,
        r.expires_at
            .map_or_else(|| "never".to_string(), |at| when(now, at))
    );
    println!("{}", key.secret);
    eprintln!("The secret above is shown once; payonce keeps only its SHA-256.");
}

fn refused(e: KeyError) -> anyhow::Error {
    anyhow::Error::new(e)
}

/// `keys create` and `create-key`. `secret_only`: print just the secret (create-key's output).
pub async fn create(
    ledger: &SharedLedger,
    args: CreateArgs,
    secret_only: bool,
) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::parse(&args.tenant)?;
    let role = Role::parse(&args.role).with_context(|| {
        let known = ["service", "assistant", "on_call"];
        format!(
            "unknown role {:?}{}: a role is service, assistant or on_call",
            args.role,
            crate::suggestion::hint(&args.role, known)
        )
    })?;
    let now = now();
    let key = if args.read_only {
        anyhow::ensure!(
            role == Role::OnCall,
            "--read-only is for on_call keys (the other roles have their own narrow rights)"
        );
        keys::issue_read_only(ledger.as_ref(), &tenant, &args.label, args.expires_in, now).await
    } else {
        keys::issue(
            ledger.as_ref(),
            &tenant,
            role,
            &args.label,
            args.expires_in,
            now,
        )
        .await
    }
    .map_err(refused)?;
    if args.json {
        println!("{}", issued_json(&key, now));
    } else if secret_only {
        println!("{}", key.secret);
    } else {
        print_issued(&key, now);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs one `keys` subcommand.
pub async fn run(ledger: &SharedLedger, command: KeysCommand) -> anyhow::Result<ExitCode> {
    match command {
        KeysCommand::Create(args) => create(ledger, args, false).await,
        KeysCommand::List { tenant, json } => list(ledger, tenant.as_deref(), json).await,
        KeysCommand::Revoke {
            id,
            reason,
            actor,
            json,
        } => revoke(ledger, &id, &reason, &actor, json).await,
        KeysCommand::Rotate {
            id,
            expires_in,
            grace,
            json,
        } => rotate(ledger, &id, expires_in, grace, json).await,
    }
}

/// `keys list`: the newest keys (of one tenant, if given), never a secret or hash.
async fn list(ledger: &SharedLedger, tenant: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let tenant = tenant.map(TenantId::parse).transpose()?;
    let now = now();
    let listed = ledger
        .list_api_keys(tenant.as_ref(), keys::LIST_MAX)
        .await?;
    if listed.len() >= keys::LIST_MAX as usize {
        eprintln!(
            "showing the newest {} keys; narrow with --tenant",
            keys::LIST_MAX
        );
    }
    if json {
        let keys: Vec<Value> = listed.iter().map(|k| view(k, now)).collect();
        println!("{}", json!({ "keys": keys }));
    } else {
        let rows: Vec<Vec<String>> = listed.iter().map(|k| row(k, now)).collect();
        print!(
            "{}",
            table(
                &[
                    "ID",
                    "TENANT",
                    "ROLE",
                    "LABEL",
                    "CREATED",
                    "EXPIRES",
                    "STATE",
                    "LAST USED"
                ],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One key as a row of `keys list`'s table.
fn row(k: &ApiKeyRecord, now: Timestamp) -> Vec<String> {
    vec![
        k.key_id.clone(),
        k.tenant.to_string(),
        role_label(k),
        k.label.clone(),
        when(now, k.created_at),
        k.expires_at
            .map_or_else(|| "never".into(), |at| when(now, at)),
        match (&k.replaced_by, state(k, now)) {
            (Some(new), "rotated") => format!("rotated to {new}"),
            (_, s) => s.to_string(),
        },
        k.last_used_at
            .map_or_else(|| "never".into(), |at| when(now, at)),
    ]
}

/// `keys revoke`: refuses a key from every api process's next request.
async fn revoke(
    ledger: &SharedLedger,
    id: &str,
    reason: &str,
    actor: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let revoked = keys::revoke(
        ledger.as_ref(),
        id,
        &format!("{}:{actor}", Role::OnCall.as_str()),
        reason,
        now(),
    )
    .await
    .map_err(refused)?;
    if json {
        println!(
            "{}",
            json!({"id": id, "revoked": true, "already": !revoked})
        );
    } else if revoked {
        println!("{id} revoked: every api process refuses it from its next request");
    } else {
        println!("{id} was already revoked; nothing changed");
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys rotate`: a new key like the old one; the old one keeps working for `grace`.
async fn rotate(
    ledger: &SharedLedger,
    id: &str,
    expires_in: Option<Duration>,
    grace: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let now = now();
    let rotated = keys::rotate(ledger.as_ref(), id, expires_in, grace, now)
        .await
        .map_err(refused)?;
    if json {
        let mut v = issued_json(&rotated.new, now);
        v["replaces"] = json!(rotated.old_id);
        v["old_until_ms"] = json!(rotated.old_until);
        println!("{v}");
    } else {
        print_issued(&rotated.new, now);
        let until = if rotated.old_until > now {
            format!("keeps working; it expires {}", when(now, rotated.old_until))
        } else {
            "is refused from now on".to_string()
        };
        println!("{} {until}: deploy the new secret", rotated.old_id);
    }
    Ok(ExitCode::SUCCESS)
}

/// The label of the keys `payonce serve` issues for its tenant.
pub const SERVE_LABEL: &str = "payonce serve";
/// The roles `payonce serve` prints keys for.
pub const SERVE_ROLES: [Role; 3] = [Role::Service, Role::Assistant, Role::OnCall];
/// Suffix of the file next to a SQLite database that keeps `payonce serve`'s key secrets (mode 0600).
pub const SERVE_KEYS_FILE_SUFFIX: &str = ".serve-keys.json";

/// One of `payonce serve`'s quick-start keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeKey {
    /// Issued now; the secret was saved to the keys file (if any).
    Issued {
        /// Role.
        role: Role,
        /// Public id.
        key_id: String,
        /// Secret.
        secret: String,
    },
    /// Read back from the keys file and still accepted by the ledger.
    Reused {
        /// Role.
        role: Role,
        /// Public id.
        key_id: String,
        /// Secret.
        secret: String,
    },
    /// An active `payonce serve` key exists but its secret is not at hand (Postgres, or the file is
    /// gone): nothing was issued.
    Elsewhere {
        /// Role.
        role: Role,
        /// Public id.
        key_id: String,
    },
}

/// Where `payonce serve` keeps its key secrets for `database_url`: next to a SQLite file; none for
/// Postgres or an in-memory database.
pub fn serve_keys_file(database_url: &str) -> Option<std::path::PathBuf> {
    let rest = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    Some(std::path::PathBuf::from(format!(
        "{path}{SERVE_KEYS_FILE_SUFFIX}"
    )))
}

/// The secrets in the keys file, by `tenant/role`; empty when it is missing, unreadable, or readable
/// by anyone but its owner (it is then ignored, with a warning).
fn read_serve_keys(path: &std::path::Path) -> serde_json::Map<String, Value> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return serde_json::Map::new();
    };
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "ignoring a serve keys file others can read; chmod 600 it");
        return serde_json::Map::new();
    }
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

/// Writes the keys file with mode 0600 (a temporary file renamed into place).
fn write_serve_keys(
    path: &std::path::Path,
    keys: &serde_json::Map<String, Value>,
) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(Value::Object(keys.clone()).to_string().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `payonce serve`'s keys for `tenant`, one per [`SERVE_ROLES`]: the saved secret while the ledger
/// still accepts it; else, if an active `payonce serve` key of that role exists, its id only;
/// else a new never-expiring key, saved to `keys_file`. Restarts therefore add no key rows.
pub async fn serve_keys(
    ledger: &SharedLedger,
    tenant: &TenantId,
    keys_file: Option<&std::path::Path>,
    now: Timestamp,
) -> anyhow::Result<Vec<ServeKey>> {
    let mut saved = keys_file.map(read_serve_keys).unwrap_or_default();
    let existing = ledger.list_api_keys(Some(tenant), keys::LIST_MAX).await?;
    let mut out = Vec::new();
    let mut changed = false;
    for role in SERVE_ROLES {
        let slot = format!("{tenant}/{}", role.as_str());
        let secret = saved.get(&slot).and_then(Value::as_str).map(String::from);
        if let Some(secret) = secret {
            let digest = payonce_api::auth::sha256_hex(&secret);
            if let Some(key) = ledger.find_api_key(&digest, now).await?
                && key.tenant == *tenant
                && key.role == role
            {
                out.push(ServeKey::Reused {
                    role,
                    key_id: key.key_id,
                    secret,
                });
                continue;
            }
        }
        if let Some(key) = existing.iter().find(|k| {
            k.role == role && k.label == SERVE_LABEL && k.is_active(now) && k.replaced_by.is_none()
        }) {
            out.push(ServeKey::Elsewhere {
                role,
                key_id: key.key_id.clone(),
            });
            continue;
        }
        let key = keys::issue(ledger.as_ref(), tenant, role, SERVE_LABEL, None, now)
            .await
            .map_err(refused)?;
        saved.insert(slot, json!(key.secret));
        changed = true;
        out.push(ServeKey::Issued {
            role,
            key_id: key.key_id,
            secret: key.secret,
        });
    }
    if changed && let Some(path) = keys_file {
        write_serve_keys(path, &saved)?;
    }
    Ok(out)
}

/// Prints `payonce serve`'s keys (or how to create one whose secret is not at hand); returns the
/// service key for the first `curl`, or a placeholder.
pub fn print_serve_keys(
    tenant: &TenantId,
    keys: &[ServeKey],
    keys_file: Option<&std::path::Path>,
    database_url: &str,
) -> Vec<(Role, String)> {
    let mut secrets = Vec::new();
    for key in keys {
        let (role, line) = match key {
            ServeKey::Issued { role, secret, .. } | ServeKey::Reused { role, secret, .. } => {
                (*role, format!("({tenant}) {secret}"))
            }
            ServeKey::Elsewhere { role, key_id } => (
                *role,
                format!(
                    "({tenant}) {key_id} exists; its secret was shown when it was made. Another: \
                     payonce keys create --tenant {tenant} --role {} --label '{}' --database-url \"{}\"",
                    role.as_str(),
                    SERVE_LABEL,
                    hint_url(database_url),
                ),
            ),
        };
        if let ServeKey::Issued { secret, .. } | ServeKey::Reused { secret, .. } = key {
            secrets.push((role, secret.clone()));
        }
        let name = format!("{} key", role.as_str());
        println!("  {name:<14} {line}");
    }
    if let Some(path) = keys_file {
        println!(
            "  keys file      {} (mode 0600; reused at the next start while valid)",
            path.display()
        );
    }
    secrets
}

/// The database URL as a printed command carries it: as configured, with a password (never
/// printed) left for the operator to fill in.
pub fn hint_url(database_url: &str) -> String {
    // `scheme://user:password@host` → `scheme://user:PASSWORD@host`; anything else as it is.
    if let (Some(s), Some(at)) = (database_url.find("://"), database_url.rfind('@'))
        && at > s
        && let Some((user, _password)) = database_url[s + 3..at].split_once(':')
    {
        return format!(
            "{}://{user}:PASSWORD@{}",
            &database_url[..s],
            &database_url[at + 1..]
        );
    }
    database_url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_database_url_never_carries_its_password() {
        assert_eq!(hint_url("sqlite:payonce.db"), "sqlite:payonce.db");
        assert_eq!(
            hint_url("postgres://payonce@db.internal/payonce"),
            "postgres://payonce@db.internal/payonce"
        );
        assert_eq!(
            hint_url("postgres://payonce:s3cret@db.internal:5432/payonce"),
            "postgres://payonce:PASSWORD@db.internal:5432/payonce"
        );
    }

    #[test]
    fn times_read_relative_to_now() {
        let at = Timestamp::from_millis;
        assert_eq!(when(at(1_000_000), at(1_000_000 - 5_000)), "5s ago");
        assert_eq!(when(at(0), at(90 * 86_400_000)), "in 90d");
        assert_eq!(when(at(0), at(3 * 3_600_000)), "in 3h");
        assert_eq!(when(at(13), at(90 * 86_400_000)), "in 90d");
    }
}
