//! A transaction whose caller is dropped after `BEGIN` went out and before its answer came back must
//! not leave the pooled connection inside that transaction (sqlx 0.9 counts a transaction only once
//! the server answered; later autocommit writes on such a connection would never commit). A TCP
//! proxy between the ledger's pool and Postgres holds the server's answer to the `BEGIN`, so the
//! window is hit every run, not by chance.

use super::{T0, approval_of, at, autocommit_writes_are_committed, new_op};
use crate::support::{self, tenant, wait_for};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Holds the server's bytes to a client once that client has sent a simple-query `BEGIN`, while
/// armed, until released.
#[derive(Default)]
struct BeginGate {
    armed: AtomicBool,
    holding: AtomicBool,
    released: Notify,
}

impl BeginGate {
    fn release(&self) {
        self.holding.store(false, SeqCst);
        self.released.notify_waiters();
    }

    async fn wait_while_holding(&self) {
        loop {
            let released = self.released.notified();
            if !self.holding.load(SeqCst) {
                return;
            }
            released.await;
        }
    }
}

/// A proxy on a free loopback port to `upstream`; each client connection gets its own upstream one.
async fn proxy(upstream: String, gate: Arc<BeginGate>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(to_server(client_read, server_write, gate.clone()));
            tokio::spawn(to_client(server_read, client_write, gate.clone()));
        }
    });
    address
}

/// Forwards the client's messages whole; a simple query `BEGIN` sent while the gate is armed makes
/// it hold the server's side before the `BEGIN` leaves.
async fn to_server(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    gate: Arc<BeginGate>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    // The startup message has no type byte; every later one is a type byte and a length that
    // counts itself.
    let mut started = false;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        loop {
            let header = if started { 5 } else { 4 };
            if buffer.len() < header {
                break;
            }
            let at = header - 4;
            let length = u32::from_be_bytes(buffer[at..at + 4].try_into().unwrap()) as usize + at;
            if buffer.len() < length {
                break;
            }
            let message: Vec<u8> = buffer.drain(..length).collect();
            if started
                && message[0] == b'Q'
                && message[5..].starts_with(b"BEGIN")
                && gate.armed.swap(false, SeqCst)
            {
                gate.holding.store(true, SeqCst);
            }
            started = true;
            if to.write_all(&message).await.is_err() {
                return;
            }
        }
    }
}

/// Forwards the server's bytes, waiting while the gate holds.
async fn to_client(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    gate: Arc<BeginGate>,
) {
    let mut chunk = [0u8; 8192];
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        gate.wait_while_holding().await;
        if to.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn postgres_a_begin_dropped_before_its_answer_leaves_no_open_transaction() {
    let url = support::postgres::fresh_database().await;
    // postgres://user@host:port/database…: the proxy stands in for host:port.
    let authority_start = url.find('@').expect("the test URL names a user") + 1;
    let authority_end = authority_start + url[authority_start..].find('/').unwrap();
    let upstream = url[authority_start..authority_end].to_string();
    let gate = Arc::new(BeginGate::default());
    let proxied = format!(
        "{}{}{}",
        &url[..authority_start],
        proxy(upstream, gate.clone()).await,
        &url[authority_end..]
    );
    let proxied = if proxied.contains('?') {
        format!("{proxied}&sslmode=disable")
    } else {
        format!("{proxied}?sslmode=disable")
    };
    // One connection: whatever the dropped approval leaves on it, the next writes get.
    let ledger = payonce_ledger::connect(&proxied, 1).await.unwrap();
    let op = ledger
        .create_or_get(new_op("INV-GATE", 100), at(T0))
        .await
        .unwrap()
        .operation;
    gate.armed.store(true, SeqCst);
    let t = tenant();
    let mut approve = Box::pin(ledger.approve(&t, approval_of(&op), at(T0)));
    tokio::select! {
        _ = &mut approve => panic!("the approval cannot end while its BEGIN's answer is held"),
        () = wait_for("the BEGIN's answer is held", Duration::from_secs(30), || async {
            gate.holding.load(SeqCst).then_some(())
        }) => {}
    }
    drop(approve);
    gate.release();
    // Autocommit writes on the pool's one connection, read back straight from the server.
    autocommit_writes_are_committed(&ledger, &url, "INV-AFTER-BEGIN", 5).await;
}
