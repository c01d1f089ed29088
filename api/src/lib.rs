//! payonce's HTTP front door: upstream services create and approve operations, customers confirm them
//! on a trusted page, assistants ask about them through narrow tools, processors report on them, and
//! on-call reads and resolves them in a console.
//!
//! The modules form layers, listed here from the bottom up: a module imports only modules listed
//! before it, so no import runs in a circle and none reaches up (no module imports the router). A
//! test below holds the source to this list.
//!
//! **Foundations** (no handler state):
//! - [`config`]: the API's settings and their named defaults.
//! - [`errors`]: the stable table of error codes and the JSON error body.
//! - [`body`]: the JSON body extractor whose rejections speak the error table.
//! - [`page`]: HTML escaping, the layout the confirmation pages share, the HTML pages' security headers.
//! - [`ledger_time`]: the database's clock, checked against this process's.
//! - [`assertion`]: the signed customer assertion a tenant's app hands the page.
//! - [`schedule`]: a new operation's `priority` and `not_before` as callers write them, checked.
//! - [`notify`]: signed, retried deliveries to a tenant's notification endpoint.
//! - [`shared_reads`]: reads shared by the requests that arrive together, each from a read taken after it arrived (API keys).
//! - [`counters`]: the API's own counters (responses, latency, webhook deliveries).
//! - [`group_commit`]: concurrent single creates with their approval written together, one ledger batch per group.
//! - [`listener`]: the accept loop with its header-read timeout and connection limit.
//!
//! **State**:
//! - [`state`]: [`AppState`], what every handler shares: ledger, clock, settings and the parts above.
//!
//! **Callers and what they may do** (read the state):
//! - [`auth`]: bearer API keys at request time, looked up by digest, mapped to a tenant and a role.
//! - [`keys`]: the API key lifecycle: issue with an expiry, rotate with a grace period, revoke.
//! - [`verify`]: customer verification per tenant: links with their codes, requests on an assistant's behalf.
//! - [`answer`]: what a repeated request or a tool call returns: the operation's stored truth, as fields and a sentence.
//!
//! **Routes, by audience** (each module's `routes()`):
//! - [`operations`]: callers and services: operations, their batch create ([`intake`]), refunds, the tenant's profile.
//! - [`assistants`]: the assistant's tools ([`tools`]), their provider formats ([`formats`]), the MCP server ([`mcp`]).
//! - [`confirm`]: customers: the confirmation page, a single-use link plus the customer's own proof.
//! - [`console`]: on-call: sessions, overview, lists, one operation's evidence chain, resolve.
//! - [`webhooks`]: processors: the Stripe and Adyen webhook routes, handing raw bytes to the reconciler.
//! - [`health`], [`metrics`], [`openapi`]: the platform: liveness and readiness, the Prometheus
//!   `/metrics` endpoint and the middleware that counts responses, the OpenAPI document and its route table.
//!
//! **Server**:
//! - [`server`]: the router that merges every audience's routes, and the server with graceful shutdown.
//!
//! [`intake`], [`profile`], [`refunds`], [`formats`], [`mcp`] and [`tools`] are also re-exported here, so
//! `payonce_api::intake::…` and the like keep naming them.

pub mod answer;
pub mod assertion;
pub mod assistants;
pub mod auth;
pub mod body;
pub mod config;
pub mod confirm;
pub mod console;
pub mod counters;
pub mod errors;
pub mod group_commit;
pub mod health;
pub mod keys;
pub mod ledger_time;
pub mod listener;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod operations;
pub mod page;
pub mod schedule;
pub mod server;
pub mod shared_reads;
pub mod state;
pub mod verify;
pub mod webhooks;

pub use assistants::{formats, mcp, tools};
pub use config::ApiConfig;
pub use keys::create_api_key;
pub use ledger_time::database_clock;
pub use operations::{intake, profile, refunds};
pub use server::{ApiError, router, serve, serve_listener};
pub use state::AppState;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

    /// The crate's top-level modules, in the order the crate map above first names them.
    fn map_order() -> Vec<String> {
        let mut order = Vec::new();
        for line in include_str!("lib.rs")
            .lines()
            .filter(|l| l.starts_with("//!"))
        {
            for link in line.split("[`").skip(1) {
                let name = link.split('`').next().unwrap_or_default().to_string();
                let top = Path::new(SRC).join(format!("{name}.rs")).is_file()
                    || Path::new(SRC).join(&name).join("mod.rs").is_file();
                if top && !order.contains(&name) {
                    order.push(name);
                }
            }
        }
        order
    }

    /// Every `.rs` file under `dir`.
    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).expect("a readable source folder") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                out.extend(rust_files(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
        out
    }

    /// The first segment of each path named after `crate::` in `source` (`crate::{a, b::c}` names
    /// `a` and `b`), doc links included; a file's own unit tests are left out.
    fn crate_paths(source: &str) -> BTreeSet<String> {
        let source = source
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect()
        };
        let mut out = BTreeSet::new();
        for rest in source.split("crate::").skip(1) {
            let Some(group) = rest.strip_prefix('{') else {
                out.insert(ident(rest));
                continue;
            };
            // The group's items, split at its own commas (not those of nested groups).
            let (mut depth, mut item_start) = (0usize, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(&group[item_start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&group[item_start..i]));
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        }
        out
    }

    #[test]
    fn each_module_imports_only_modules_listed_before_it_in_the_crate_map() {
        let order = map_order();
        let mut modules: BTreeSet<String> = BTreeSet::new();
        for file in rust_files(Path::new(SRC)) {
            let relative = file.strip_prefix(SRC).expect("a file under src");
            let top = relative
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .map(|c| c.trim_end_matches(".rs").to_string())
                .unwrap_or_default();
            if top == "lib" || top == "main" {
                continue;
            }
            let position = order.iter().position(|m| *m == top);
            assert!(
                position.is_some(),
                "{top} is missing from the crate map in lib.rs"
            );
            modules.insert(top.clone());
            let source = std::fs::read_to_string(&file).expect("a readable source file");
            for named in crate_paths(&source) {
                let Some(at) = order.iter().position(|m| *m == named) else {
                    continue;
                };
                assert!(
                    Some(at) < position || named == top,
                    "{}: {top} imports {named}, which the crate map lists after it \
                     (an import that reaches up a layer, or runs in a circle)",
                    file.display()
                );
            }
        }
        assert!(modules.len() > 20, "the scan found only {modules:?}");
        assert_eq!(order.last().map(String::as_str), Some("server"));
    }

    #[test]
    fn crate_paths_are_read_from_uses_groups_and_doc_links() {
        let source = "use crate::a::B;\nuse crate::{b::{C, D}, c};\n/// [`crate::d`]\n\
                      #[cfg(test)]\nmod tests { use crate::e; }";
        let names: Vec<String> = crate_paths(source).into_iter().collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }
}
