//! The inserts a payment or a refund commits with: payments, events with their webhook deliveries, and
//! remembered responses. Each writes any number of rows in one statement (a group of payments,
//! `groups`) and is also what a single request uses, so there is one way each row is written.

use super::{KeyRecord, NewEvent, PaymentRow, Tx};
use sqlx::{AssertSqlSafe, Row};
use std::collections::HashMap;

/// The most bound parameters in one statement (SQLite's limit since 3.32 is 32,766; kept well below).
pub(crate) const VARIABLES_MAX: usize = 8_000;

const INSERT_PAYMENTS: &str = "INSERT INTO payment_intents (id, created, created_ms, amount, currency, \
    customer, description, payment_method, status, metadata, transfer_destination, latest_charge, \
    last_payment_error, next_action, amount_received, amount_refunded, client_secret, idempotency_key, \
    request_id, settle_at_ms) VALUES ";
const PAYMENT_TUPLE: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const PAYMENT_PARAMETERS: usize = 20;

const INSERT_EVENTS: &str = "INSERT INTO events (id, created, type, body) VALUES ";
const EVENT_TUPLE: &str = "(?, ?, ?, ?)";
const EVENTS_RETURNING: &str = " RETURNING id, seq";

const INSERT_DELIVERIES: &str = "INSERT INTO webhook_outbox (event_seq, due_ms, state) VALUES ";
const DELIVERY_TUPLE: &str = "(?, ?, 'pending')";

const UPSERT_KEYS: &str =
    "INSERT INTO idempotency_keys (key, fingerprint, status, body, created_ms) VALUES ";
const KEY_TUPLE: &str = "(?, ?, ?, ?, ?)";
const KEYS_ON_CONFLICT: &str = " ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, \
    status = excluded.status, body = excluded.body, created_ms = excluded.created_ms";

/// `head` followed by `rows` copies of `tuple`, comma-separated, then `tail`. Built only from the constants
/// in this module and `?` placeholders, never from a request (hence `AssertSqlSafe` where it is run).
pub(crate) fn statement(head: &str, tuple: &str, rows: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + rows * (tuple.len() + 2) + tail.len());
    sql.push_str(head);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(tuple);
    }
    sql.push_str(tail);
    sql
}

/// How many rows of `parameters` bound values each fit in one statement.
fn rows_per_statement(parameters: usize) -> usize {
    VARIABLES_MAX / parameters
}

/// Inserts new PaymentIntents.
pub(crate) async fn insert_payments(
    tx: &mut Tx<'_>,
    rows: &[&PaymentRow],
) -> Result<(), sqlx::Error> {
    for chunk in rows.chunks(rows_per_statement(PAYMENT_PARAMETERS)) {
        let sql = statement(INSERT_PAYMENTS, PAYMENT_TUPLE, chunk.len(), "");
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for pi in chunk {
            query = query
                .bind(&pi.id)
                .bind(pi.created)
                .bind(pi.created_ms)
                .bind(pi.amount)
                .bind(&pi.currency)
                .bind(&pi.customer)
                .bind(&pi.description)
                .bind(&pi.payment_method)
                .bind(&pi.status)
                .bind(&pi.metadata)
                .bind(&pi.transfer_destination)
                .bind(&pi.latest_charge)
                .bind(&pi.last_payment_error)
                .bind(&pi.next_action)
                .bind(pi.amount_received)
                .bind(pi.amount_refunded)
                .bind(&pi.client_secret)
                .bind(&pi.idempotency_key)
                .bind(&pi.request_id)
                .bind(pi.settle_at_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Inserts events in the order given, each with its webhook delivery where one is due (`Some(due_ms)`).
pub(crate) async fn insert_events_due(
    tx: &mut Tx<'_>,
    events: &[(&NewEvent, Option<i64>)],
) -> Result<(), sqlx::Error> {
    let mut deliveries: Vec<(i64, i64)> = Vec::new();
    for chunk in events.chunks(rows_per_statement(4)) {
        let sql = statement(INSERT_EVENTS, EVENT_TUPLE, chunk.len(), EVENTS_RETURNING);
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (e, _) in chunk {
            query = query.bind(&e.id).bind(e.created).bind(e.kind).bind(&e.body);
        }
        // SQLite does not promise RETURNING's order: match the sequence numbers by event id.
        let due: HashMap<&str, i64> = chunk
            .iter()
            .filter_map(|(e, due)| due.map(|d| (e.id.as_str(), d)))
            .collect();
        for row in query.fetch_all(&mut **tx).await? {
            let id: String = row.try_get("id")?;
            if let Some(due_ms) = due.get(id.as_str()) {
                deliveries.push((row.try_get("seq")?, *due_ms));
            }
        }
    }
    deliveries.sort_unstable();
    for chunk in deliveries.chunks(rows_per_statement(2)) {
        let sql = statement(INSERT_DELIVERIES, DELIVERY_TUPLE, chunk.len(), "");
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (seq, due_ms) in chunk {
            query = query.bind(*seq).bind(*due_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Inserts one request's events, all with the same webhook due time (or none).
pub(crate) async fn insert_events(
    tx: &mut Tx<'_>,
    events: &[NewEvent],
    webhooks_due_ms: Option<i64>,
) -> Result<(), sqlx::Error> {
    let events: Vec<(&NewEvent, Option<i64>)> =
        events.iter().map(|e| (e, webhooks_due_ms)).collect();
    insert_events_due(tx, &events).await
}

/// Remembers responses under their keys (replacing a forgotten key's old response).
pub(crate) async fn upsert_keys(tx: &mut Tx<'_>, keys: &[&KeyRecord]) -> Result<(), sqlx::Error> {
    for chunk in keys.chunks(rows_per_statement(5)) {
        let sql = statement(UPSERT_KEYS, KEY_TUPLE, chunk.len(), KEYS_ON_CONFLICT);
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for k in chunk {
            query = query
                .bind(&k.key)
                .bind(&k.fingerprint)
                .bind(i64::from(k.status))
                .bind(&k.body)
                .bind(k.created_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Remembers one response under its key.
pub(crate) async fn upsert_key(tx: &mut Tx<'_>, key: &KeyRecord) -> Result<(), sqlx::Error> {
    upsert_keys(tx, &[key]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_lists_one_tuple_per_row() {
        assert_eq!(
            statement("INSERT INTO t (a, b) VALUES ", "(?, ?)", 3, " RETURNING a"),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) RETURNING a"
        );
        assert_eq!(statement("X ", "(?)", 1, ""), "X (?)");
    }

    #[test]
    fn no_statement_binds_more_than_the_named_limit() {
        for parameters in [PAYMENT_PARAMETERS, 4, 2, 5] {
            let rows = rows_per_statement(parameters);
            assert!(rows >= 1);
            assert!(rows * parameters <= VARIABLES_MAX);
            assert!((rows + 1) * parameters > VARIABLES_MAX);
        }
        assert_eq!(PAYMENT_TUPLE.matches('?').count(), PAYMENT_PARAMETERS);
        assert_eq!(
            INSERT_PAYMENTS.matches(',').count() + 1,
            PAYMENT_PARAMETERS,
            "one parameter per column"
        );
    }
}
