//! The configuration reference, generated from the command-line definitions themselves, so
//! docs/configuration.md cannot drift from `--help` (a test compares them), and `payonce config show`:
//! every setting's effective value and where it came from.

use crate::config_file::{ConfigFile, SECRET_PLACEHOLDER, key_of, walk};
use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};
use std::collections::BTreeMap;
use std::fmt::Write;

struct Row {
    env: String,
    flags: Vec<String>,
    default: String,
    commands: Vec<String>,
    help: String,
}

/// The Markdown table of every setting: key, environment variable, flags, default, commands, meaning.
pub fn markdown(cmd: &Command) -> String {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    walk(cmd, "payonce", &mut |path, arg| {
        let Some(key) = key_of(arg) else { return };
        if path.starts_with("payonce config") {
            return; // `config show` takes every setting only to show it.
        }
        let row = rows.entry(key).or_insert_with(|| Row {
            env: arg
                .get_env()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_default(),
            flags: Vec::new(),
            default: arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(","),
            commands: Vec::new(),
            help: arg.get_help().map(|h| h.to_string()).unwrap_or_default(),
        });
        let aliases = arg.get_visible_aliases().unwrap_or_default();
        for long in arg.get_long().into_iter().chain(aliases) {
            let flag = format!("`--{long}`");
            if !row.flags.contains(&flag) {
                row.flags.push(flag);
            }
        }
        // Global on the root: every command. Global below it (the ledger and processor settings of
        // `keys`, `reconciler`, …): that command, and its subcommands also take it after their name.
        let command = if arg.is_global_set() && path == "payonce" {
            "all".to_string()
        } else {
            path.trim_start_matches("payonce ").to_string()
        };
        if !row.commands.contains(&command) {
            row.commands.push(command);
        }
    });
    let mut out = String::from(
        "| key | environment | flag | default | commands | meaning |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for (key, row) in rows {
        let default = if row.default.is_empty() {
            "(none)".to_string()
        } else {
            format!("`{}`", row.default)
        };
        let _ = writeln!(
            out,
            "| `{key}` | `{}` | {} | {default} | {} | {} |",
            row.env,
            row.flags.join(" "),
            row.commands.join(", "),
            row.help.replace('|', "\\|")
        );
    }
    out
}

/// Every setting in `args` (the `config show` subcommand's, as defined, for their order, and the global
/// ones) with its effective value in `matches` and its source, as TOML that could be saved as a config file. A secret
/// that is set prints as a comment (`# key = "(set)"`), so the saved file leaves it to the environment.
pub fn show<'a>(
    args: impl Iterator<Item = &'a Arg>,
    matches: &ArgMatches,
    file: Option<&ConfigFile>,
) -> String {
    let mut out = String::new();
    if let Some(f) = file {
        let _ = writeln!(out, "# config file: {}", f.path().display());
    }
    for arg in args {
        let Some(key) = key_of(arg) else { continue };
        let id = arg.get_id().as_str();
        let value = matches
            .get_raw(id)
            .map(|vs| {
                vs.map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "env",
            Some(ValueSource::DefaultValue) if file.is_some_and(|f| f.sets(&key)) => "file",
            Some(ValueSource::DefaultValue) => "default",
            _ => {
                let _ = writeln!(out, "# {key} is unset");
                continue;
            }
        };
        if arg.is_hide_env_values_set() && !value.is_empty() {
            // Commented out: saving the output as a config file must not make a placeholder the
            // secret (and the file refuses one, see `config_file::SECRET_PLACEHOLDER`).
            let _ = writeln!(
                out,
                "# {key} = {SECRET_PLACEHOLDER:?}  # {source}; a secret, not shown"
            );
            continue;
        }
        let _ = writeln!(out, "{key} = {value:?}  # {source}");
    }
    out
}
