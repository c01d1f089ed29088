//! The replication harness itself: an asynchronous replica promoted after its primary crashed has
//! exactly what reached it before the WAL was held, accepts writes, and writes on a new timeline.

use crate::support::replication::{Replicated, system_identifier, timeline};
use sqlx::{Connection, PgConnection};

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url).await.unwrap()
}

/// The timeline of the server's last checkpoint (or restartpoint).
async fn checkpoint_timeline(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT timeline_id FROM pg_control_checkpoint()")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn execute(conn: &mut PgConnection, statement: &'static str) {
    sqlx::raw_sql(statement).execute(conn).await.unwrap();
}

#[tokio::test]
async fn a_promoted_replica_has_the_commits_before_the_hold_and_a_new_timeline() {
    let Some(pair) = Replicated::start() else {
        return;
    };
    pair.create_database("ledger").await;
    let (primary_url, replica_url) = (pair.primary_url("ledger"), pair.replica_url("ledger"));
    let mut primary = connect(&primary_url).await;
    execute(&mut primary, "CREATE TABLE rows (id int PRIMARY KEY)").await;
    execute(
        &mut primary,
        "INSERT INTO rows SELECT generate_series(1, 100)",
    )
    .await;
    pair.wait_caught_up().await;

    pair.hold_wal().await;
    let held_at: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut primary)
        .await
        .unwrap();
    // Committed without waiting for the replica: the primary has no synchronous standby.
    execute(
        &mut primary,
        "INSERT INTO rows SELECT generate_series(101, 200)",
    )
    .await;
    let on_primary: i64 = sqlx::query_scalar("SELECT count(*) FROM rows")
        .fetch_one(&mut primary)
        .await
        .unwrap();
    assert_eq!(on_primary, 200);
    let old_timeline = timeline(&primary_url).await;
    let old_checkpoint_timeline = checkpoint_timeline(&mut primary).await;
    let identifier = system_identifier(&primary_url).await;
    pair.kill_primary();

    // Nothing written after the hold reached the replica, not merely was not replayed yet.
    let mut replica = connect(&replica_url).await;
    let received_past_hold: bool =
        sqlx::query_scalar("SELECT pg_last_wal_receive_lsn() > $1::text::pg_lsn")
            .bind(&held_at)
            .fetch_one(&mut replica)
            .await
            .unwrap();
    assert!(
        !received_past_hold,
        "the replica received WAL written after the hold at {held_at}"
    );
    replica.close().await.unwrap();

    pair.promote().await;
    let mut promoted = connect(&replica_url).await;
    let ids: Vec<i32> = sqlx::query_scalar("SELECT id FROM rows ORDER BY id")
        .fetch_all(&mut promoted)
        .await
        .unwrap();
    assert_eq!(ids, (1..=100).collect::<Vec<i32>>(), "the tail is lost");
    execute(&mut promoted, "INSERT INTO rows VALUES (201)").await;

    // The WAL file name shows the new timeline at once.
    assert_eq!(timeline(&replica_url).await, old_timeline + 1);
    // pg_control_checkpoint() shows it once a checkpoint has run on it: promotion only requests one,
    // spread over minutes, so the test runs its own.
    execute(&mut promoted, "CHECKPOINT").await;
    let new_checkpoint_timeline = checkpoint_timeline(&mut promoted).await;
    assert_ne!(new_checkpoint_timeline, old_checkpoint_timeline);
    assert_eq!(new_checkpoint_timeline, old_checkpoint_timeline + 1);
    // A promoted replica is the same cluster: the identifier cannot tell a failover.
    assert_eq!(system_identifier(&replica_url).await, identifier);
}
