//! Process configuration from environment variables (and flags), with documented defaults. Every
//! limit the daemons take is set here explicitly; docs/configuration.md lists them.
//!
//! One submodule per group of settings: `common` (the ledger, processors and limiter every
//! deployable shares), `worker` (the worker, one submission, the shutdown grace), `reconciler`,
//! `api`.

mod api;
mod common;
mod reconciler;
mod worker;

pub use api::ApiArgs;
pub use common::Common;
pub use reconciler::ReconcilerArgs;
pub use worker::{GraceArgs, SubmitArgs, WorkerArgs};

use clap::{Args, Command, FromArgMatches};

/// The built-in defaults of a group of settings, ignoring the environment and any config file: the
/// demo runs the same way on every machine.
pub fn builtin_defaults<T: Args + FromArgMatches>() -> anyhow::Result<T> {
    let mut cmd = T::augment_args(Command::new("defaults").no_binary_name(true));
    let ids: Vec<clap::Id> = cmd.get_arguments().map(|a| a.get_id().clone()).collect();
    for id in ids {
        cmd = cmd.mut_arg(id, |a| a.env(None));
    }
    let matches = cmd.try_get_matches_from(Vec::<String>::new())?;
    Ok(T::from_arg_matches(&matches)?)
}

#[cfg(test)]
mod tests;
