//! The optional config file (`--config payonce.toml` or `PAYONCE_CONFIG`): flat TOML keys, each the
//! name of an environment variable without `PAYONCE_`, lowercased (`PAYONCE_API_LISTEN` is
//! `api_listen`). A value from the file becomes the setting's default, so clap keeps the precedence
//! flag > environment > file > built-in default. Unknown keys and bad values are refused, naming the key.

use clap::builder::OsStr;
use clap::{Arg, Command};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the config file.
pub const ENV: &str = "PAYONCE_CONFIG";
/// Prefix of every setting's environment variable; the key is the rest, lowercased.
const ENV_PREFIX: &str = "PAYONCE_";
/// What `config show` prints for a secret that is set. A file giving it as a secret's value was
/// saved from that output with the comment removed; it is refused, never taken as the secret.
pub const SECRET_PLACEHOLDER: &str = "(set)";
/// Largest config file read: a full file is about 2 KiB; anything near this is not a config file.
pub const FILE_LEN_MAX: u64 = 64 * 1024;

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`FILE_LEN_MAX`].
    #[error("the config file {path} is larger than {FILE_LEN_MAX} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not TOML.
    #[error("{path} is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A key no setting has.
    #[error(
        "{path}: unknown key `{key}` (keys are environment variable names without PAYONCE_, lowercased; `payonce config reference` lists them)"
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A value of a type settings never take (tables, arrays, floats, dates).
    #[error("{path}: key `{key}` must be a string, an integer or a boolean, not {found}")]
    WrongType {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What was there.
        found: &'static str,
    },
    /// A value the setting's parser refuses.
    #[error("{path}: key `{key}` has an invalid value {value:?}: {reason}")]
    InvalidValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// The setting parser's reason.
        reason: String,
    },
}

/// A parsed config file: key to value as the command line would spell it.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
    values: BTreeMap<String, String>,
}

impl ConfigFile {
    /// Reads and parses `path` (keys are checked against a command by [`apply`]).
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigFileError> {
        let read = |source| ConfigFileError::Read {
            path: path.to_path_buf(),
            source,
        };
        if std::fs::metadata(path).map_err(read)?.len() > FILE_LEN_MAX {
            return Err(ConfigFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        ConfigFile::parse(path, &text)
    }

    /// Parses `text` as the contents of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigFileError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigFileError::Syntax {
                    path: path.to_path_buf(),
                    message: e.to_string().trim_end().to_string(),
                })?;
        let mut values = BTreeMap::new();
        for (key, value) in table {
            let wrong = |found| ConfigFileError::WrongType {
                path: path.to_path_buf(),
                key: key.clone(),
                found,
            };
            let text = match &value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Float(_) => return Err(wrong("a float")),
                toml::Value::Datetime(_) => return Err(wrong("a date")),
                toml::Value::Array(_) => {
                    return Err(wrong("an array (lists are comma-separated strings)"));
                }
                toml::Value::Table(_) => return Err(wrong("a table (keys are flat)")),
            };
            values.insert(key, text);
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            values,
        })
    }

    /// Whether the file sets `key`.
    pub fn sets(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The config key of a setting: its `PAYONCE_` environment variable without the prefix, lowercased.
/// The file cannot name itself, so `PAYONCE_CONFIG` has no key.
pub fn key_of(arg: &Arg) -> Option<String> {
    let env = arg.get_env()?.to_str()?;
    let rest = env.strip_prefix(ENV_PREFIX)?;
    (env != ENV).then(|| rest.to_ascii_lowercase())
}

/// Calls `visit` for every argument of `cmd` and its subcommands, with the command path.
pub fn walk(cmd: &Command, path: &str, visit: &mut impl FnMut(&str, &Arg)) {
    for arg in cmd.get_arguments() {
        visit(path, arg);
    }
    for sub in cmd.get_subcommands() {
        walk(sub, &format!("{path} {}", sub.get_name()), visit);
    }
}

/// Finds the config file: `--config PATH` / `--config=PATH` on the command line, else `PAYONCE_CONFIG`.
/// Scanned before clap parses, because the file changes the defaults clap parses with.
pub fn locate(args: impl IntoIterator<Item = OsString>, env: Option<OsString>) -> Option<PathBuf> {
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(path));
        }
    }
    env.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Makes the file's values the defaults of the settings they name, in `cmd` and every subcommand.
/// Refuses keys no setting has and values the setting's own parser refuses.
pub fn apply(cmd: Command, file: &ConfigFile) -> Result<Command, ConfigFileError> {
    let mut known = std::collections::BTreeSet::new();
    walk(&cmd, "", &mut |_, arg| {
        if let Some(k) = key_of(arg) {
            known.insert(k);
        }
    });
    if let Some(key) = file.values.keys().find(|k| !known.contains(*k)) {
        return Err(ConfigFileError::UnknownKey {
            path: file.path.clone(),
            key: key.clone(),
        });
    }
    set_defaults(cmd, file)
}

fn set_defaults(mut cmd: Command, file: &ConfigFile) -> Result<Command, ConfigFileError> {
    let settings: Vec<(clap::Id, String)> = cmd
        .get_arguments()
        .filter_map(|a| key_of(a).map(|k| (a.get_id().clone(), k)))
        .collect();
    for (id, key) in settings {
        let Some(value) = file.values.get(&key) else {
            continue;
        };
        // clap keeps defaults as `&'static str` without its `string` feature; the file is read once
        // per process, so leaking its few values costs a few bytes and saves a dependency feature.
        let value: &'static str = Box::leak(value.clone().into_boxed_str());
        if let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == &id) {
            if arg.is_hide_env_values_set() && value == SECRET_PLACEHOLDER {
                return Err(ConfigFileError::InvalidValue {
                    path: file.path.clone(),
                    key,
                    value: value.to_string(),
                    reason: "that is `config show`'s placeholder for a secret, not a secret: \
                             set the real one in the environment or remove the line"
                        .to_string(),
                });
            }
            // The setting's own parser judges the value now, so the error names the file's key
            // rather than a flag the operator never typed.
            let alone = Command::new("payonce")
                .no_binary_name(true)
                .arg(arg.clone().env(None).default_value(OsStr::from(value)));
            if let Err(e) = alone.try_get_matches_from(Vec::<String>::new()) {
                return Err(ConfigFileError::InvalidValue {
                    path: file.path.clone(),
                    key,
                    value: value.to_string(),
                    reason: clap_reason(&e),
                });
            }
        }
        cmd = cmd.mut_arg(id, |a| a.default_value(OsStr::from(value)));
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        if let Some(sub) = cmd.find_subcommand(&name).cloned() {
            let sub = set_defaults(sub, file)?;
            cmd = cmd.mut_subcommand(name, |_| sub);
        }
    }
    Ok(cmd)
}

/// The reason in a clap error, without its `error:` prefix and usage lines.
fn clap_reason(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The flag spelling of a setting's key (`worker_batch` is `--worker-batch`).
pub fn flag_of_key(key: &str) -> String {
    key.replace('_', "-")
}

/// Gives every setting whose flag is spelled differently from its key (`--batch-size` for
/// `worker_batch`) the key's spelling as a visible alias, in `cmd` and every subcommand: an operator
/// who read the key in the table, the file or the environment can type it as a flag.
pub fn with_key_flags(mut cmd: Command) -> Command {
    let renamed: Vec<(clap::Id, String)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let key = key_of(a)?;
            let long = a.get_long()?;
            let flag = flag_of_key(&key);
            (long != flag
                && !a
                    .get_visible_aliases()
                    .is_some_and(|v| v.contains(&flag.as_str())))
            .then(|| (a.get_id().clone(), flag))
        })
        .collect();
    for (id, flag) in renamed {
        // Leaked once per process (about twenty short names), as clap keeps aliases as `&'static str`.
        let flag: &'static str = Box::leak(flag.into_boxed_str());
        cmd = cmd.mut_arg(id, |a| a.visible_alias(flag));
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, with_key_flags);
    }
    cmd
}
