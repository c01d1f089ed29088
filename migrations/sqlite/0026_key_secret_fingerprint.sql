-- Issue 49: the ledger remembers which key secret derives its operation ids and processor keys.
-- `value` is a keyed hash of a fixed label under PAYONCE_KEY_SECRET (never the secret): a process
-- started with another secret after a restore would derive new ids and keys for every lost invoice
-- and pay it again, so every process that derives keys compares its own fingerprint with this row
-- and refuses to start on a mismatch. The row is in the ledger on purpose: a restore brings it back.
CREATE TABLE ledger_identity (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL,
    set_at BIGINT NOT NULL
);

-- A first submission the processor answered as a replay: another request under the same key had
-- reached it first, made for a row this ledger no longer has (a restore, a failover). The money is
-- right (the replay is that payment), but the loss must be heard: the worker records it here, the
-- reconciler raises the lost-money alert once per row and notes it on the operation.
CREATE TABLE lost_rows (
    operation_id TEXT PRIMARY KEY,
    reference    TEXT NOT NULL,
    found_by     TEXT NOT NULL,
    found_at     BIGINT NOT NULL,
    reported_at  BIGINT
);
CREATE INDEX lost_rows_unreported ON lost_rows (found_at) WHERE reported_at IS NULL;
