//! Connections a handler can abort: the accept loop wraps every TCP stream with a kill switch that the
//! handler reaches through `ConnectInfo`. Killing makes every later read and write fail, so hyper drops the
//! connection without sending the response, and the socket is closed with SO_LINGER 0 (a TCP reset).

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The handler's view of its connection: it can abort it.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    killed: Arc<AtomicBool>,
}

impl ConnHandle {
    /// Aborts the connection: the response, if any, is never written.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Release);
    }
}

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
}

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    self.accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    return (
                        KillableStream {
                            inner: stream,
                            killed: Arc::new(AtomicBool::new(false)),
                        },
                        addr,
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "simulator accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        ConnHandle {
            killed: stream.io().killed.clone(),
        }
    }
}
