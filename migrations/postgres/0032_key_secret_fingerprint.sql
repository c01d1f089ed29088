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

-- The processor key names the business action (tenant, business key, generation), not its details:
-- new rows carry `po2_` keys; rows that hold `po1_` keys keep them (they may be at the processor).
-- NOT VALID, then VALIDATE: the check of existing rows does not block writes while it reads them.
ALTER TABLE operations DROP CONSTRAINT operations_idempotency_key_shape;
ALTER TABLE operations ADD CONSTRAINT operations_idempotency_key_shape
    CHECK (idempotency_key = 'payonce-' || id OR idempotency_key ~ '^po[12]_[0-9a-f]{40}$') NOT VALID;
ALTER TABLE operations VALIDATE CONSTRAINT operations_idempotency_key_shape;

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
