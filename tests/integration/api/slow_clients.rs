//! Issue 13, defect 7: slow-loris clients. A client that trickles header lines never finishes its
//! request; the api closes it after `header_read_timeout`, and `connections_max` bounds how many
//! sockets are served at once (the rest wait in the backlog).

use super::spawn_with;
use crate::support::sqlite_ledger;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How many slow clients at once.
const SLOW_CLIENTS: usize = 50;
/// The short timeout the test api is configured with.
const TIMEOUT: Duration = Duration::from_millis(400);
/// Longest the test waits for the server to act; the old server kept such sockets 45 s and more.
const DEADLINE: Duration = Duration::from_secs(10);

/// Opens a connection, starts a request and trickles one header line every `every` (never the
/// blank line that ends the headers). Returns how long the server kept it open, or `None` if it
/// was still open at the deadline.
async fn slow_client(addr: &str, every: Option<Duration>) -> Option<Duration> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: payonce\r\n")
        .await
        .unwrap();
    let mut tick = tokio::time::interval(every.unwrap_or(DEADLINE * 2));
    tick.tick().await;
    let mut buf = [0_u8; 512];
    let closed = async {
        loop {
            tokio::select! {
                read = s.read(&mut buf) => match read {
                    // A 408 or nothing, then the close.
                    Ok(0) | Err(_) => return started.elapsed(),
                    Ok(_) => {}
                },
                _ = tick.tick() => {
                    if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                        return started.elapsed();
                    }
                }
            }
        }
    };
    tokio::time::timeout(DEADLINE, closed).await.ok()
}

#[tokio::test]
async fn slow_loris_connections_are_closed_after_the_header_read_timeout() {
    let api = spawn_with(sqlite_ledger().await, |c| c.header_read_timeout = TIMEOUT).await;
    let addr = api.base.trim_start_matches("http://").to_string();
    let clients: Vec<_> = (0..SLOW_CLIENTS)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move { slow_client(&addr, Some(Duration::from_millis(100))).await })
        })
        .collect();
    for client in clients {
        let held = client.await.unwrap().expect("closed before the deadline");
        assert!(
            held >= TIMEOUT,
            "closed only once the timeout passed: {held:?}"
        );
    }
    // A well-behaved client is served as before.
    let r = api.get("/healthz", &api.service).await;
    assert_eq!(r.status, 200);
    api.stop().await;
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_a_slot_frees() {
    let api = spawn_with(sqlite_ledger().await, |c| {
        c.header_read_timeout = TIMEOUT;
        c.connections_max = 1;
    })
    .await;
    let addr = api.base.trim_start_matches("http://").to_string();
    // The one slot goes to a client that never finishes its headers.
    let hog_connected = Instant::now();
    let mut hog = TcpStream::connect(&addr).await.unwrap();
    hog.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let hog_closed = tokio::spawn(async move {
        let mut buf = [0_u8; 512];
        loop {
            match hog.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(_) => {}
            }
        }
    });
    // A complete request waits for the slot, then is answered.
    let mut polite = TcpStream::connect(&addr).await.unwrap();
    polite
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: payonce\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(DEADLINE, polite.read_to_end(&mut answer))
        .await
        .expect("answered before the deadline")
        .unwrap();
    let answered = Instant::now();
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Served only once the slow client's slot was freed by its timeout.
    assert!(
        answered.duration_since(hog_connected) >= TIMEOUT,
        "answered after {:?}",
        answered.duration_since(hog_connected)
    );
    let freed = tokio::time::timeout(DEADLINE, hog_closed)
        .await
        .unwrap()
        .unwrap();
    assert!(freed.duration_since(hog_connected) >= TIMEOUT);
    api.stop().await;
}
