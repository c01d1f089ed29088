//! Process plumbing: logging, shutdown signals, and the `/metrics` `/healthz` `/readyz` endpoint the
//! worker and reconciler serve.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::metrics::Exposition;
use payonce_ledger::SharedLedger;
use payonce_reconciler::metrics::ReconcilerMetrics;
use payonce_worker::WorkerMetrics;
use std::sync::Arc;

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The log filter when `RUST_LOG` is unset: daemons log at info. rmcp logs three info lines per MCP
/// request (initialized, input ended, finished): a billing run's calls would bury serve's `>>>` lines.
pub const LOG_FILTER_DEFAULT: &str = "info,sqlx=warn,rmcp=warn";
/// The log filter of interactive commands (demo, config) when `RUST_LOG` is unset: their stdout is the
/// story; logs would bury it.
pub const LOG_FILTER_QUIET: &str = "warn";

/// Installs rustls' ring provider for the process, the binary's one place for it: reqwest is built
/// without a provider and panics on its first client otherwise.
pub fn install_tls_provider() {
    // Harmless if one is installed already (the simulator, when in-process, asks for the same one).
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Sets up tracing in `format`; level from `RUST_LOG`, else `default_filter`.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Whether log lines may carry colour codes: only on a terminal, and not when `NO_COLOR` is set to
/// anything but the empty string (no-color.org).
pub fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// GETs `url`; success on a 2xx within `timeout_ms`. Prints why not on stderr.
pub async fn probe(url: &str, timeout_ms: u64) -> std::process::ExitCode {
    let timeout = std::time::Duration::from_millis(timeout_ms);
    let client = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("probe: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match client.get(url).send().await {
        Ok(r) if r.status().is_success() => std::process::ExitCode::SUCCESS,
        Ok(r) => {
            eprintln!("probe: {url} answered {}", r.status());
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("probe: {url}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How long `payonce api` may take after SIGTERM to finish the requests it is serving (the api has
/// no `shutdown_grace_ms` of its own: its requests are short, and one blocked on an unreachable
/// ledger must not hold the process past an orchestrator's patience).
pub const API_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a daemon, handing it a shutdown future, until it returns or until `grace` has passed since
/// SIGTERM (or Ctrl-C), whichever comes first; false if the grace ran out. A daemon blocked on an
/// unreachable database (a claim waiting for a connection, a request inside a dropped one) then
/// stops anyway: what it holds is left as a kill would leave it, and payonce is built for kills
/// (leases expire, the reconciler finishes what was in flight by lookup with the stored key).
pub async fn within_grace<T, Fut>(
    grace: std::time::Duration,
    daemon: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> Fut,
) -> Option<T>
where
    Fut: std::future::Future<Output = T>,
{
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let signal = shutdown_signal();
    tokio::spawn(async move {
        signal.await;
        let _ = stop.send(true);
    });
    let mut asked = stopping.clone();
    let shutdown = Box::pin(async move {
        let _ = asked.wait_for(|s| *s).await;
    });
    let mut past = stopping;
    let deadline = async move {
        if past.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        done = daemon(shutdown) => Some(done),
        () = deadline => {
            tracing::warn!(grace_ms = grace.as_millis() as u64,
                "shutdown grace passed with work still blocked; stopping now (leases expire and the \
                 reconciler finishes anything in flight)");
            None
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    // The handlers are registered now, not at the first poll: a SIGTERM that arrives between a
    // caller's "ready" line and its first await must not kill the process with the default action.
    #[cfg(unix)]
    let (term, interrupt) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! { () = wait(term) => {}, () = wait(interrupt) => {} }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested");
    }
}

/// Writes this process's view of the processor's reachability into the ledger at each change, for
/// every api to show (its console's banner, its `/metrics`), until `stop` resolves. The processes
/// that submit payments run it: `worker`, `reconciler run`, `serve`.
pub async fn record_reachability(
    ledger: SharedLedger,
    owner: String,
    stop: impl std::future::Future<Output = ()>,
) {
    use payonce_processor::reachability::{RECORD_RETRY, process};
    tokio::select! {
        () = process().record_into(ledger.outage(), &owner, &SystemClock, RECORD_RETRY) => {}
        () = stop => {}
    }
}

/// What a metrics endpoint reports.
#[derive(Clone)]
pub struct MetricsState {
    /// The ledger (readiness, rows per state).
    pub ledger: SharedLedger,
    /// Worker counters, if this process runs a worker.
    pub worker: Option<Arc<WorkerMetrics>>,
    /// Reconciler counters, if this process runs a reconciler.
    pub reconciler: Option<Arc<ReconcilerMetrics>>,
    /// The process's fleet limiter (waits, denials, fallback).
    pub limiter: Option<payonce_processor::limiter::SharedLimiter>,
}

async fn metrics(State(s): State<MetricsState>) -> (StatusCode, String) {
    let mut e = Exposition::default();
    if let Some(w) = &s.worker {
        w.render(&mut e);
        payonce_processor::reachability::process().render(&mut e);
    }
    if let Some(l) = &s.limiter {
        l.metrics().render(&mut e);
    }
    if let Some(r) = &s.reconciler
        && let Err(error) = r.render(s.ledger.as_ref(), SystemClock.now(), &mut e).await
    {
        tracing::warn!(%error, "metrics: ledger unavailable");
        return (StatusCode::SERVICE_UNAVAILABLE, String::new());
    }
    (StatusCode::OK, e.finish())
}

async fn ready(State(s): State<MetricsState>) -> StatusCode {
    match s.ledger.probe_write(SystemClock.now()).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The metrics and probe routes.
pub fn metrics_router(state: MetricsState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(state)
}

/// Serves the metrics routes on `listen` in the background, if set.
pub async fn spawn_metrics(listen: &str, state: MetricsState) -> anyhow::Result<()> {
    if listen.is_empty() {
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "metrics listening");
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, metrics_router(state)).await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color_set() {
        let set = std::ffi::OsStr::new("1");
        let empty = std::ffi::OsStr::new("");
        assert!(colour(true, None));
        assert!(
            colour(true, Some(empty)),
            "an empty NO_COLOR is unset (no-color.org)"
        );
        assert!(!colour(true, Some(set)));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(set)));
    }

    #[test]
    fn the_binary_installs_ring_as_the_tls_provider_itself() {
        install_tls_provider();
        let installed = rustls::crypto::CryptoProvider::get_default()
            .expect("a process-wide provider after install_tls_provider");
        let ring = rustls::crypto::ring::default_provider();
        let names = |p: &rustls::crypto::CryptoProvider| {
            p.cipher_suites
                .iter()
                .map(|s| s.suite())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(installed), names(&ring));
        // reqwest (built without a provider) can now build a client.
        reqwest::Client::builder().build().unwrap();
    }
}
