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
