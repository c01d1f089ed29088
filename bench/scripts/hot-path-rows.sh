#!/usr/bin/env bash
# Server-side cost of the worker's two hot-path statements, per row, on the real schema: a scratch
# database migrated by `payonce migrate`, optionally changed by SQL given as the first argument (drop
# an index, a CHECK, a trigger: to price it), 25,600 ready operations loaded, then one DO block runs
# 200 rounds of a claim of 128 rows that records their submission start (as `claim_to_submit` does)
# and an outcome write of those rows (as the worker's batch does), each round's two statements
# committed on their own, and prints the mean time per row of each. No network, no client: the
# figure is Postgres's work per row version (indexes, CHECKs, the audit trigger, WAL), which is
# what an index or a CHECK costs on the hot path. Run it three times per variant: it moves by about
# ±5 % between runs here. It also prints the WAL the 200 rounds wrote per payment and the record
# types that make it up (pg_walinspect, a contrib extension of Postgres 15): the bytes every commit
# must flush, which a change of schema moves exactly (no noise).
#
#   bench/scripts/hot-path-rows.sh                                   # the schema as migrated
#   bench/scripts/hot-path-rows.sh "DROP INDEX operations_console_status_idx"
#
# Environment: PAYONCE_BIN (default target/release/payonce), PGHOST/PGPORT/PGUSER (default
# 127.0.0.1, 5432, postgres), HOT_PATH_DB (default payonce_hot_path_rows; dropped and recreated).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${PAYONCE_BIN:-target/release/payonce}
host=${PGHOST:-127.0.0.1} port=${PGPORT:-5432} user=${PGUSER:-postgres}
db=${HOT_PATH_DB:-payonce_hot_path_rows}
psql=(psql -h "$host" -p "$port" -U "$user" -q -v ON_ERROR_STOP=1)
"${psql[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" \
  -c "CREATE DATABASE $db"
"$bin" migrate --database-url "postgres://$user@$host:$port/$db" >/dev/null 2>&1
"${psql[@]}" -d "$db" -c "CREATE EXTENSION pg_walinspect"
if [ -n "${1:-}" ]; then "${psql[@]}" -d "$db" -c "$1"; fi
"${psql[@]}" -d "$db" <<'SQL'
INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer,
    payment_method, invoice, details_hash, approved_hash, approved_by, approval_expires_at,
    idempotency_key, available_at, last_event, last_actor, created_at, updated_at, status, attempt)
SELECT 'op_' || lpad(to_hex(i), 32, '0'), 't' || (i % 7), 'bench:' || i, 'payment', 2048, 'usd',
    'cus_' || (i % 1000), 'pm_card_visa', 'INV-' || i, repeat('a', 64), repeat('a', 64), 'bench',
    9000000000000, 'payonce-op_' || lpad(to_hex(i), 32, '0'), i, 'approve', 'bench', i, i, 'ready', 0
FROM generate_series(1, 25600) i;
VACUUM ANALYZE operations;
SQL
"${psql[@]}" -d "$db" 2>&1 <<'SQL' | sed -n 's/^NOTICE:  //p'
DO $$
DECLARE t0 timestamptz; c float8 := 0; r float8 := 0; ids text[]; rec record;
  w0 pg_lsn := pg_current_wal_lsn();
BEGIN
  FOR j IN 1..200 LOOP
    t0 := clock_timestamp();
    WITH picked AS (SELECT id FROM operations WHERE status = 'ready' AND available_at <= 10000000000000
                    ORDER BY available_at LIMIT 128 FOR UPDATE SKIP LOCKED)
    UPDATE operations o SET status = 'executing', last_event = 'submission_started', attempt = o.attempt + 1,
      lease_owner = 'w', lease_expires_at = 9000000000000, updated_at = 5, last_actor = 'w', last_detail = NULL,
      first_submitted_at = COALESCE(o.first_submitted_at, 5),
      first_submitted_attempt = COALESCE(o.first_submitted_attempt, o.attempt + 1),
      last_submitted_at = 5, submit_count = o.submit_count + 1
    FROM picked WHERE o.id = picked.id AND o.status = 'ready';
    SELECT array_agg(id) INTO ids FROM operations WHERE status = 'executing';
    COMMIT;
    c := c + extract(epoch FROM clock_timestamp() - t0);
    t0 := clock_timestamp();
    UPDATE operations o SET status = 'succeeded', last_event = 'processor_succeeded', external_ref = 'pi_' || o.id,
      result = '{"status":"succeeded"}', failure_code = NULL, failure_message = NULL, lease_owner = NULL,
      lease_expires_at = NULL, next_check_at = NULL, updated_at = 6, last_actor = 'w', last_detail = 'pi'
    WHERE o.id = ANY(ids) AND o.status = 'executing';
    COMMIT;
    r := r + extract(epoch FROM clock_timestamp() - t0);
  END LOOP;
  RAISE NOTICE 'per row: claim with submission record % µs, outcome write % µs',
    round((c * 1e6 / 25600)::numeric, 1), round((r * 1e6 / 25600)::numeric, 1);
  RAISE NOTICE 'WAL per payment (claim + outcome): % bytes',
    round(pg_wal_lsn_diff(pg_current_wal_lsn(), w0) / 25600);
  FOR rec IN SELECT "resource_manager/record_type" AS kind, count, combined_size
             FROM pg_get_wal_stats(w0, pg_current_wal_lsn(), true)
             WHERE combined_size * 20 > pg_wal_lsn_diff(pg_current_wal_lsn(), w0)
             ORDER BY combined_size DESC LOOP
    RAISE NOTICE '  % % records per payment, % bytes', rpad(rec.kind, 20),
      round(rec.count / 25600.0, 1), round(rec.combined_size / 25600.0);
  END LOOP;
END $$;
SQL
"${psql[@]}" -d postgres -c "DROP DATABASE $db"
