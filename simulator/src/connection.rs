//! Connections a handler can abort, and the accept loop that serves them. Every TCP stream gets a
//! kill switch the handler reaches through `ConnectInfo`. On HTTP/1.1, killing makes every later read
//! and write fail, so hyper drops the connection without sending the response, and the socket is
//! closed with SO_LINGER 0 (a TCP reset). On HTTP/2 (cleartext, prior knowledge, as a client that
//! multiplexes its requests speaks it) a kill resets only that request's stream: the other requests
//! on the connection are other callers' and go on, as behind Stripe's own front ends.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Most requests one HTTP/2 connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`).
/// hyper's default is 200; a client past the limit queues its requests instead of opening a second
/// connection, so a worker with more in flight than this would be held to it by the simulator.
pub const HTTP2_MAX_STREAMS: u32 = 4_096;

/// The handler's view of its connection: it can abort it (HTTP/2: its stream).
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    killed: Arc<AtomicBool>,
}

impl ConnHandle {
    /// Aborts the connection: the response, if any, is never written.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Release);
    }

    fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }
}

/// A request the handler killed on an HTTP/2 connection: hyper resets its stream.
#[derive(Debug)]
struct StreamKilled;

impl std::fmt::Display for StreamKilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("killed by a simulator fault")
    }
}

impl std::error::Error for StreamKilled {}

/// A TCP stream that fails every operation once killed.
#[derive(Debug)]
pub(crate) struct KillableStream {
    inner: TcpStream,
    killed: Arc<AtomicBool>,
}

impl KillableStream {
    fn check(&self) -> io::Result<()> {
        if self.killed.load(Ordering::Acquire) {
            // Linger 0: when the killed stream is dropped the peer sees a reset, not a clean close.
            let _ = self.inner.set_zero_linger();
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "killed by a simulator fault",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A TCP listener whose streams can be killed by their handlers; it counts the connections it
/// accepted (`GET /_sim/audit/connections`), so a test can tell a client that reuses its
/// connections from one that opens a new one per request.
#[derive(Debug)]
pub(crate) struct KillableListener {
    inner: TcpListener,
    accepted: Arc<AtomicU64>,
}

impl KillableListener {
    /// Wraps a bound listener; `accepted` counts every connection it hands out.
    pub(crate) fn new(inner: TcpListener, accepted: Arc<AtomicU64>) -> Self {
        KillableListener { inner, accepted }
    }

    async fn accept(&self) -> KillableStream {
        loop {
            match self.inner.accept().await {
                Ok((stream, _)) => {
                    self.accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    return KillableStream {
                        inner: stream,
                        killed: Arc::new(AtomicBool::new(false)),
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "simulator accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }
}

/// Serves `router` on `listener`, HTTP/1.1 and cleartext HTTP/2 on the same port, until `shutdown`
/// resolves; then stops accepting and waits for open connections to finish.
pub(crate) async fn serve(
    listener: KillableListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http2().max_concurrent_streams(HTTP2_MAX_STREAMS);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            stream = listener.accept() => stream,
        };
        let connection = ConnHandle {
            killed: stream.killed.clone(),
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            // HTTP/2: a kill switch per request, checked when the handler is done.
            let handle = if request.version() == hyper::Version::HTTP_2 {
                ConnHandle {
                    killed: Arc::new(AtomicBool::new(false)),
                }
            } else {
                connection.clone()
            };
            let stream_only = request.version() == hyper::Version::HTTP_2;
            request.extensions_mut().insert(ConnectInfo(handle.clone()));
            let mut router = router.clone();
            async move {
                let response = match router.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if stream_only && handle.is_killed() {
                    return Err(StreamKilled);
                }
                Ok::<_, StreamKilled>(response)
            }
        });
        let served = graceful.watch(
            http.serve_connection(TokioIo::new(stream), service)
                .into_owned(),
        );
        tokio::spawn(async move {
            if let Err(error) = served.await {
                tracing::debug!(%error, "simulator connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
