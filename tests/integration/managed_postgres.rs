//! Postgres as managed services run it (issue 50): TLS required (`hostssl` only, a CA the test
//! makes), and a full data disk under readiness. Every test starts its own cluster on a free port;
//! the shared server on 5432 is never touched.

use crate::serve::free_port;
use crate::startup::{paid_by_the_worker, ready, spawn};
use crate::support::cluster::{Cluster, as_postgres};
use crate::support::postgres::postgres_bin_dir;
use crate::support::processes::simulator;
use crate::support::{self, wait_for};
use payonce_ledger::postgres::PostgresLedger;
use payonce_simulator::SimulatorConfig;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a test waits for a process to come up, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);
/// What "fails at once" means for a refused configuration: one attempt, well inside the connect
/// timeout the process was given ([`CONNECT_TIMEOUT`]).
const AT_ONCE: Duration = Duration::from_secs(10);
/// The connect timeout the processes under test get: a retried refusal would take this long.
const CONNECT_TIMEOUT: &str = "60000";
/// The readiness answer the issue asks for when the database cannot take a row or does not answer.
const READY_ANSWER_MAX: Duration = Duration::from_secs(2);

/// Runs `openssl` with `args` in `dir`, panicking with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority the test makes (`{name}.pem`, `{name}.key` in `dir`).
fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let key = format!("{name}.key");
    let pem = format!("{name}.pem");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &key,
            "-out",
            &pem,
        ],
    );
    dir.join(pem)
}

/// A CA of the test's (`ca.pem`) and a server certificate it signed for 127.0.0.1 and localhost
/// (`server.pem`, `server.key`), all in `certs`; returns the CA's file and that of another CA that
/// signed nothing.
pub(crate) fn server_certificate(certs: &Path) -> (PathBuf, PathBuf) {
    let ca = make_ca(certs, "ca");
    let other_ca = make_ca(certs, "other-ca");
    std::fs::write(
        certs.join("san.ext"),
        "subjectAltName = IP:127.0.0.1, DNS:localhost\n",
    )
    .unwrap();
    openssl(
        certs,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        certs,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
    (ca, other_ca)
}

/// A cluster that takes TLS connections only (`hostssl` in `pg_hba.conf`, `ssl = on`), its server
/// certificate for 127.0.0.1 signed by a CA of the test's ([`server_certificate`]); returns the
/// cluster, the CA's file and that of another CA that signed nothing.
fn tls_cluster(certs: &Path) -> (Cluster, PathBuf, PathBuf) {
    tls_cluster_with(certs, "")
}

/// [`tls_cluster`] with `hostssl` options (`clientcert=verify-full`); the server trusts client
/// certificates the test's CA signed.
fn tls_cluster_with(certs: &Path, hba_options: &str) -> (Cluster, PathBuf, PathBuf) {
    let (ca, other_ca) = server_certificate(certs);
    let bin = postgres_bin_dir().expect("the Postgres binaries under /usr/lib/postgresql");
    let cluster = Cluster::initdb(
        bin,
        "-c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server.key -c ssl_ca_file=ca.pem",
    );
    for file in ["server.pem", "server.key", "ca.pem"] {
        let to = cluster.dir().join(file);
        std::fs::copy(certs.join(file), &to).unwrap();
        std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&to)
            .status();
    }
    // TCP only with TLS; the socket (the cluster's own tools) as initdb set it.
    std::fs::write(
        cluster.dir().join("pg_hba.conf"),
        format!("local all all trust\nhostssl all all 127.0.0.1/32 trust {hba_options}\n"),
    )
    .unwrap();
    cluster.pg_ctl(&["start"]);
    (cluster, ca, other_ca)
}

/// A scratch directory of the test's, removed on drop.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "payonce-{what}-{}",
            payonce_core::id::random_hex(6)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `payonce migrate` on `url`: how it exited, its stderr, and how long it took.
fn migrate(url: &str) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = Command::new(support::payonce_bin())
        .args(["migrate", "--database-url", url])
        .env("PAYONCE_DB_CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT)
        .output()
        .expect("run payonce migrate");
    (out, started.elapsed())
}

/// `sslmode=verify-full` against a server whose certificate the test's CA signed for 127.0.0.1:
/// `payonce migrate` and a worker process open the ledger over TLS (the server's `pg_stat_ssl`
/// says so) and the worker pays; the ledger's statement timeout holds on every pooled connection,
/// set after connecting rather than as a startup parameter a pooler may drop.
#[tokio::test]
async fn a_ledger_that_requires_tls_is_migrated_and_paid_through_verify_full() {
    let certs = Scratch::new("tls");
    let (cluster, ca, _) = tls_cluster(&certs.0);
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={}",
        cluster.port(),
        ca.display()
    );
    let (out, _) = migrate(&url);
    assert!(
        out.status.success(),
        "migrate over verify-full: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let sim = simulator(SimulatorConfig::default()).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let (_worker, _log) = spawn(
        &["worker"],
        &url,
        &sim,
        &[
            ("PAYONCE_METRICS_LISTEN", &listen),
            ("PAYONCE_POLL_MS", "50"),
            ("PAYONCE_DB_CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT),
        ],
    );
    wait_for("the worker is ready", DEADLINE, || async {
        ready(&listen).await.then_some(())
    })
    .await;
    paid_by_the_worker(&url, "INV-TLS-1").await;

    let ledger = PostgresLedger::connect(&url, 2, Duration::from_secs(10))
        .await
        .unwrap();
    let encrypted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = 'payonce' AND s.ssl AND a.pid <> pg_backend_pid()",
    )
    .fetch_one(ledger.pool())
    .await
    .unwrap();
    assert!(encrypted >= 1, "the worker's connections use TLS");
    let unencrypted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.backend_type = 'client backend' AND NOT s.ssl AND a.client_addr IS NOT NULL",
    )
    .fetch_one(ledger.pool())
    .await
    .unwrap();
    assert_eq!(
        unencrypted, 0,
        "hostssl only: nothing over TCP in the clear"
    );
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(ledger.pool())
        .await
        .unwrap();
    assert_eq!(
        timeout, "15s",
        "set after connecting, on a pooled connection"
    );
    let jit: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(ledger.pool())
        .await
        .unwrap();
    assert_eq!(jit, "off", "JIT turned off after connecting (issue 51)");
}

/// What a retry cannot change fails the first attempt with its cause, not after the whole connect
/// timeout as "not reachable yet": a CA that did not sign the server's certificate, and a client
/// that does not ask for TLS where the server requires it.
#[tokio::test]
async fn a_wrong_ca_or_no_tls_fails_the_first_attempt_with_the_cause() {
    let certs = Scratch::new("tls");
    let (cluster, _, other_ca) = tls_cluster(&certs.0);
    let base = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let wrong_ca = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        other_ca.display()
    );
    let cleartext = format!("{base}?sslmode=disable");
    for (url, cause) in [(wrong_ca, "UnknownIssuer"), (cleartext, "no encryption")] {
        let (out, took) = migrate(&url);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {stderr}");
        assert!(
            stderr.contains("(attempts: 1 in"),
            "{url}: one attempt: {stderr}"
        );
        assert!(stderr.contains(cause), "{url}: names the cause: {stderr}");
        assert!(
            !stderr.contains("not reachable yet"),
            "{url}: not retried: {stderr}"
        );
        assert!(
            took < AT_ONCE,
            "{url}: at once, not after the connect timeout: {took:?}"
        );
    }
}

/// A client certificate from the URL (`sslcert`, `sslkey`), as Cloud SQL's "require trusted client
/// certificates" wants: with it the ledger opens; without it the server's refusal fails the first
/// attempt, naming it.
#[tokio::test]
async fn a_client_certificate_named_in_the_url_is_presented_and_its_absence_fails_at_once() {
    let certs = Scratch::new("tls");
    let (cluster, ca, _) = tls_cluster_with(&certs.0, "clientcert=verify-full");
    openssl(
        &certs.0,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=postgres",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
        ],
    );
    // An X.509 v3 certificate (it has an extension): rustls refuses a v1 one as the client's own.
    std::fs::write(
        certs.0.join("client.ext"),
        "extendedKeyUsage = clientAuth\n",
    )
    .unwrap();
    openssl(
        &certs.0,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "client.ext",
            "-out",
            "client.pem",
        ],
    );
    let base = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={}",
        cluster.port(),
        ca.display()
    );
    let with_certificate = format!(
        "{base}&sslcert={}&sslkey={}",
        certs.0.join("client.pem").display(),
        certs.0.join("client.key").display()
    );
    let (out, _) = migrate(&with_certificate);
    assert!(
        out.status.success(),
        "with the client certificate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, took) = migrate(&base);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "without it: {stderr}");
    assert!(stderr.contains("(attempts: 1 in"), "one attempt: {stderr}");
    assert!(stderr.contains("certificate"), "names the cause: {stderr}");
    assert!(took < AT_ONCE, "at once: {took:?}");
}

/// A tmpfs mounted for one test (the test runs as root, as CI does), unmounted and removed on drop,
/// after the cluster on it (declare it first).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs (needs root): {status}");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `GET http://{listen}/readyz`: its status (0 without an answer) and how long it took.
async fn readyz(listen: &str) -> (u16, Duration) {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let status = client
        .get(format!("http://{listen}/readyz"))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16());
    (status, started.elapsed())
}

/// Issue 50: a Postgres whose data disk is full kept `/readyz` at 200 (the probe's one-row update
/// fits in its page) while every insert failed with `could not extend file`. On a small tmpfs (the
/// WAL elsewhere, so the server itself keeps running) filled to the last byte, api, worker and
/// reconciler answer 503 within 2 s, and 200 again once the space is back.
#[tokio::test]
async fn a_full_postgres_disk_fails_readiness_on_every_process_until_space_returns() {
    let bin = postgres_bin_dir().expect("the Postgres binaries under /usr/lib/postgresql");
    let wal = Scratch::new("wal");
    let cluster = Cluster::empty(bin.clone(), "");
    let _disk = Tmpfs::mount(cluster.dir(), "96m");
    // Declared after the mount: stopped before it is unmounted.
    let cluster = cluster;
    let _ = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(cluster.dir())
        .arg(&wal.0)
        .status();
    let waldir = wal.0.join("pg_wal");
    let d = cluster.dir().to_string_lossy().to_string();
    let w = waldir.to_string_lossy().to_string();
    as_postgres(
        bin.join("initdb"),
        &[
            "-D",
            &d,
            "-X",
            &w,
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
    );
    cluster.pg_ctl(&["start"]);
    let url = cluster.url("postgres");
    let (out, _) = migrate(&url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let sim = simulator(SimulatorConfig::default()).await;
    let (children, listens) = ready_fleet(&url, &sim, "ready before the disk fills").await;
    let listens = listens.each_ref().map(String::as_str);

    // Fill the disk: dd stops at "No space left on device".
    let filler = cluster.dir().join("filler");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", filler.display()))
        .args(["bs=64k", "status=none"])
        .status();
    for listen in listens {
        let (status, took) = readyz(listen).await;
        assert_eq!(status, 503, "{listen}: a full disk is not ready");
        assert!(took < READY_ANSWER_MAX, "{listen}: answered in {took:?}");
    }

    std::fs::remove_file(&filler).unwrap();
    for listen in listens {
        let (status, took) = readyz(listen).await;
        assert_eq!(status, 200, "{listen}: ready again once space returns");
        assert!(took < READY_ANSWER_MAX, "{listen}: answered in {took:?}");
    }
    drop(children);
}

/// A TCP proxy to `127.0.0.1:{upstream}` that can black-hole the link (issue 50's 60 s network black
/// hole): while held, nothing read from either side is passed on and new connections get no
/// upstream, as with packets dropped on the way; released, everything held flows again.
struct BlackHole {
    port: u16,
    held: tokio::sync::watch::Sender<bool>,
    _accept: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    async fn start(upstream: u16) -> BlackHole {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (held, watch) = tokio::sync::watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(async move {
                    let mut open = watch.clone();
                    if open.wait_for(|held| !held).await.is_err() {
                        return;
                    }
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        Self::pass(client_read, server_write, watch.clone()),
                        Self::pass(server_read, client_write, watch),
                    );
                });
            }
        });
        BlackHole {
            port,
            held,
            _accept: accept,
        }
    }

    /// Copies `from` to `to`, each chunk only while the link is not held.
    async fn pass(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut watch: tokio::sync::watch::Receiver<bool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0_u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if watch.wait_for(|held| !held).await.is_err() || to.write_all(&buf[..n]).await.is_err()
            {
                return;
            }
        }
    }

    fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }
}

/// Issue 50: during a network black hole to Postgres `/readyz` hung instead of answering. With the
/// link to the database dropping everything, api, worker and reconciler answer 503 within 2 s (the
/// probe's own deadline), and 200 again once the link is back.
#[tokio::test]
async fn readiness_answers_503_within_its_deadline_while_the_database_does_not_answer() {
    let cluster = Cluster::start();
    let hole = BlackHole::start(cluster.port()).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", hole.port);
    // Off this thread: the proxy runs on the test's runtime.
    let migrating = url.clone();
    let (out, _) = tokio::task::spawn_blocking(move || migrate(&migrating))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let sim = simulator(SimulatorConfig::default()).await;
    let (children, listens) = ready_fleet(&url, &sim, "ready before the black hole").await;
    let listens = listens.each_ref().map(String::as_str);

    hole.hold(true);
    for listen in listens {
        let (status, took) = readyz(listen).await;
        assert_eq!(status, 503, "{listen}: a database that does not answer");
        assert!(took < READY_ANSWER_MAX, "{listen}: answered in {took:?}");
    }

    hole.hold(false);
    for listen in listens {
        wait_for("ready again once the link is back", DEADLINE, || async {
            (readyz(listen).await.0 == 200).then_some(())
        })
        .await;
    }
    drop(children);
}

/// An api, a worker and a reconciler on `url`, each answering `/readyz` 200 (`what` names the wait);
/// their processes (killed on drop) and the addresses their readiness is served at.
async fn ready_fleet(
    url: &str,
    sim: &payonce_simulator::Simulator,
    what: &str,
) -> (
    Vec<(tokio::process::Child, crate::startup::SharedLog)>,
    [String; 3],
) {
    let listens = [(); 3].map(|()| format!("127.0.0.1:{}", free_port()));
    let [api, worker, reconciler] = &listens;
    let mut children = Vec::new();
    for (args, listen) in [
        (vec!["api", "--listen", api.as_str()], None),
        (vec!["worker"], Some(worker.as_str())),
        (vec!["reconciler", "run"], Some(reconciler.as_str())),
    ] {
        let mut env = vec![("PAYONCE_DB_CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT)];
        if let Some(listen) = listen {
            env.push(("PAYONCE_METRICS_LISTEN", listen));
        }
        children.push(spawn(&args, url, sim, &env));
    }
    for listen in &listens {
        wait_for(what, DEADLINE, || async {
            (readyz(listen).await.0 == 200).then_some(())
        })
        .await;
    }
    (children, listens)
}
