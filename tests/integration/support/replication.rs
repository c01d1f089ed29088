//! A Postgres primary with an asynchronous streaming replica, both throwaway clusters of the test's
//! own, for tests that lose the ledger's tail in a failover: the replica streams through a TCP proxy
//! inside the test process, so the test can cut the WAL stream ([`Replicated::hold_wal`]), commit
//! more on the primary, crash it and promote the replica, which then lacks those commits.

use super::cluster::{Cluster, as_postgres};
use super::wait_for;
use sqlx::{Connection, PgConnection};
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the replica may take to replay what the primary has written, or to leave recovery.
const DEADLINE: Duration = Duration::from_secs(30);

/// Settings of both servers. Postgres 15's defaults already stream (`wal_level=replica`, ten WAL
/// senders, hot standby on); they are spelled out so the harness does not depend on them.
const SETTINGS: &str = "-c wal_level=replica -c max_wal_senders=5 -c hot_standby=on";

/// A running primary and its asynchronous streaming replica; both stopped and removed on drop.
pub struct Replicated {
    primary: Cluster,
    replica: Cluster,
    proxy: Proxy,
}

impl Replicated {
    /// Starts a primary and a replica streaming from it through the test's proxy; `None`, after
    /// saying so, only when the Postgres server binaries are not installed.
    pub fn start() -> Option<Replicated> {
        let Some(bin) = super::postgres::postgres_bin_dir() else {
            eprintln!(
                "skipped: Postgres server binaries not found under /usr/lib/postgresql/*/bin \
                 (apt-get install postgresql)"
            );
            return None;
        };
        let primary = Cluster::initdb(bin.clone(), SETTINGS);
        // initdb's pg_hba.conf has had this line since Postgres 10; written here so that a change of
        // default cannot turn the replica away.
        let hba = primary.dir().join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str("\nhost replication all 127.0.0.1/32 trust\n");
        std::fs::write(&hba, rules).unwrap();
        primary.pg_ctl(&["start"]);

        let proxy = Proxy::start(primary.port());
        let replica = Cluster::empty(bin.clone(), SETTINGS);
        let r = replica.dir().to_string_lossy().to_string();
        let proxy_port = proxy.port.to_string();
        // Taken through the proxy, so the `primary_conninfo` that `-R` writes names the proxy: the
        // replica never learns the primary's own port. A fast checkpoint starts the backup at once
        // instead of after a spread one; no fsync, like the servers.
        as_postgres(
            bin.join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &proxy_port,
                "-U",
                "postgres",
                "-D",
                &r,
                "-R",
                "--checkpoint=fast",
                "--no-sync",
            ],
        );
        // The primary's server log came along; the replica's own starts empty.
        let _ = std::fs::remove_file(replica.dir().join("log"));
        let conninfo = std::fs::read_to_string(replica.dir().join("postgresql.auto.conf")).unwrap();
        assert!(
            conninfo.contains(&format!("port={proxy_port}")),
            "the replica must stream through the proxy: {conninfo}"
        );
        replica.pg_ctl(&["start"]);
        Some(Replicated {
            primary,
            replica,
            proxy,
        })
    }

    /// The URL of database `db` on the primary.
    pub fn primary_url(&self, db: &str) -> String {
        self.primary.url(db)
    }

    /// The URL of database `db` on the replica (read-only until [`Replicated::promote`]).
    pub fn replica_url(&self, db: &str) -> String {
        self.replica.url(db)
    }

    /// Creates database `name` on the primary and waits until the replica has it.
    pub async fn create_database(&self, name: &str) {
        self.primary.create_database(name).await;
        self.wait_caught_up().await;
    }

    /// Waits until the replica has replayed all the WAL the primary had written when called.
    pub async fn wait_caught_up(&self) {
        let target: String = scalar(
            &self.primary_url("postgres"),
            "SELECT pg_current_wal_lsn()::text",
        )
        .await;
        let replica = pool(&self.replica_url("postgres")).await;
        let replica = &replica;
        wait_for(
            &format!("the replica to replay the primary's WAL up to {target}"),
            DEADLINE,
            || async {
                // NULL (so `None`) until the replica has replayed anything at all.
                let done: Option<bool> =
                    sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn")
                        .bind(&target)
                        .fetch_one(replica)
                        .await
                        .unwrap();
                done.unwrap_or(false).then_some(())
            },
        )
        .await;
    }

    /// Cuts the replica off the primary's WAL for good: the proxy drops its connections and refuses
    /// new ones, so nothing the primary commits from now on reaches the replica. Returns once the
    /// primary has no WAL sender left.
    pub async fn hold_wal(&self) {
        self.proxy.hold();
        let primary = pool(&self.primary_url("postgres")).await;
        let primary = &primary;
        wait_for(
            "the primary's WAL senders to exit after the hold",
            DEADLINE,
            || async {
                let senders: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_replication")
                    .fetch_one(primary)
                    .await
                    .unwrap();
                (senders == 0).then_some(())
            },
        )
        .await;
    }

    /// Crashes the primary: `pg_ctl -m immediate stop`, no shutdown checkpoint.
    pub fn kill_primary(&self) {
        self.primary.kill();
    }

    /// Promotes the replica and waits until it accepts writes.
    pub async fn promote(&self) {
        // `-w`: pg_ctl returns once the control file says the server is in production.
        self.replica.pg_ctl(&["promote"]);
        let replica = pool(&self.replica_url("postgres")).await;
        let replica = &replica;
        wait_for(
            "the promoted replica to accept writes",
            DEADLINE,
            || async {
                let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(replica)
                    .await
                    .unwrap();
                (!in_recovery).then_some(())
            },
        )
        .await;
    }
}

/// The timeline the server at `url` writes WAL on: a promoted replica's is its primary's plus one
/// from the moment promotion ends. Read from the name of the current WAL file (its first eight hex
/// digits; any role may call both functions), not from `pg_control_checkpoint()`: its `timeline_id`
/// is that of the last completed checkpoint, and promotion only requests a spread one (Postgres 15
/// took 93 s over 930 buffers in the self-test), so for that long it shows the old timeline unless
/// someone runs `CHECKPOINT` (superuser or `pg_checkpoint`). Fails on a server in recovery, where
/// `pg_walfile_name` refuses: ask the server that takes writes.
pub async fn timeline(url: &str) -> u32 {
    let file: String = scalar(url, "SELECT pg_walfile_name(pg_current_wal_lsn())").await;
    u32::from_str_radix(&file[..8], 16)
        .unwrap_or_else(|e| panic!("WAL file name {file} has no timeline prefix: {e}"))
}

/// The cluster's identity, fixed at initdb: a replica (promoted or not) has its primary's, so it
/// tells clusters apart but not a primary from its promoted replica ([`timeline`] does).
pub async fn system_identifier(url: &str) -> i64 {
    scalar(url, "SELECT system_identifier FROM pg_control_system()").await
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// One connection to poll on, shareable by the closure [`wait_for`] calls again and again.
async fn pool(url: &str) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

async fn scalar<T>(url: &str, query: &'static str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let mut conn = connect(url).await;
    let value = sqlx::query_scalar(query)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{query} on {url}: {e}"));
    conn.close().await.ok();
    value
}

/// A TCP forwarder from a free loopback port to the primary, on plain threads rather than tasks:
/// the harness blocks its caller in `pg_basebackup` and `pg_ctl`, which would starve a proxy
/// running on the test's own (current-thread) runtime.
struct Proxy {
    port: u16,
    state: Arc<Mutex<ProxyState>>,
    accepter: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct ProxyState {
    /// Set by [`Proxy::hold`]: connections are refused from then on.
    held: bool,
    /// Set on drop: the accepting thread exits.
    closed: bool,
    /// Both ends of every connection forwarded so far, to shut them down on hold.
    sockets: Vec<Arc<TcpStream>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the replication proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let shared = Arc::clone(&state);
        let accepter = std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                // Dropping `client` refuses it: the walreceiver sees its connection closed and
                // retries later (every `wal_retrieve_retry_interval`), to be refused again.
                {
                    let state = shared.lock().unwrap();
                    if state.closed {
                        return;
                    }
                    if state.held {
                        continue;
                    }
                }
                // Refused by the primary (it is down): the same as refusing it here.
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (client, server) = (Arc::new(client), Arc::new(server));
                // Checked again and registered under the lock `hold` takes: a connection is either
                // cut by the hold or refused here, never missed by both.
                let mut state = shared.lock().unwrap();
                if state.closed {
                    return;
                }
                if state.held {
                    continue;
                }
                state.sockets.push(Arc::clone(&client));
                state.sockets.push(Arc::clone(&server));
                drop(state);
                let (c, s) = (Arc::clone(&client), Arc::clone(&server));
                std::thread::spawn(move || forward(&c, &s));
                std::thread::spawn(move || forward(&server, &client));
            }
        });
        Proxy {
            port,
            state,
            accepter: Some(accepter),
        }
    }

    /// Shuts every forwarded socket both ways and refuses new connections. Once this returns, a
    /// forwarding thread can neither read more from the primary nor write more to the replica.
    fn hold(&self) {
        let mut state = self.state.lock().unwrap();
        state.held = true;
        for socket in state.sockets.drain(..) {
            // Already closed by its peer: nothing to cut.
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` to `to` until either side ends or is shut down, then passes the end on.
fn forward(from: &TcpStream, to: &TcpStream) {
    let _ = io::copy(&mut &*from, &mut &*to);
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        {
            let mut state = self.state.lock().unwrap();
            state.closed = true;
            for socket in state.sockets.drain(..) {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
        // The accepting thread blocks in accept: one more connection wakes it to see `closed`.
        if TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && let Some(accepter) = self.accepter.take()
        {
            let _ = accepter.join();
        }
    }
}
