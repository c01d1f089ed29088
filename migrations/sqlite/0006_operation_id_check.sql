-- Issue 15: SQLite's operation-id CHECK had drifted weaker than Postgres's `^op_[0-9a-f]{32}$`:
-- `GLOB 'op_[0-9a-f]*'` let anything follow the first hex digit. The CHECK below is the same rule.
-- Migration 0003 also left out the `needs_attention` index Postgres has; it is restored here.
-- SQLite cannot alter a CHECK: the table is rebuilt as in 0003 (foreign keys are off while SQLite
-- migrations run, and checked before the migrator finishes). Postgres needs nothing.
CREATE TABLE operations_rebuilt (
    id                      TEXT PRIMARY KEY CHECK (length(id) = 35 AND substr(id, 1, 3) = 'op_'
                                AND substr(id, 4) NOT GLOB '*[^0-9a-f]*'),
    tenant_id               TEXT NOT NULL,
    business_key            TEXT NOT NULL,
    kind                    TEXT NOT NULL CHECK (kind IN ('payment')),
    amount_minor            BIGINT NOT NULL CHECK (amount_minor > 0),
    currency                TEXT NOT NULL CHECK (currency GLOB '[a-z][a-z][a-z]' AND length(currency) = 3),
    customer                TEXT NOT NULL,
    payment_method          TEXT NOT NULL,
    invoice                 TEXT NOT NULL,
    destination             TEXT,
    description             TEXT,
    details_hash            TEXT NOT NULL CHECK (length(details_hash) = 64),
    status                  TEXT NOT NULL CHECK (status IN ('awaiting_approval', 'ready', 'executing', 'succeeded',
                                'failed', 'rejected', 'unknown', 'needs_attention', 'cancelled')),
    attempt                 BIGINT NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_owner             TEXT,
    lease_expires_at        BIGINT,
    idempotency_key         TEXT NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    first_submitted_at      BIGINT,
    first_submitted_attempt BIGINT,
    last_submitted_at       BIGINT,
    submit_count            BIGINT NOT NULL DEFAULT 0,
    external_ref            TEXT,
    result                  TEXT,
    failure_code            TEXT,
    failure_message         TEXT,
    available_at            BIGINT NOT NULL,
    next_check_at           BIGINT,
    check_count             BIGINT NOT NULL DEFAULT 0,
    approved_hash           TEXT,
    approved_by             TEXT,
    approval_expires_at     BIGINT,
    last_event              TEXT,
    last_actor              TEXT,
    last_detail             TEXT,
    created_at              BIGINT NOT NULL,
    updated_at              BIGINT NOT NULL,
    UNIQUE (tenant_id, business_key),
    -- A lease exists exactly while executing.
    CHECK ((status = 'executing') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
    -- A succeeded row always names the processor's record.
    CHECK (status <> 'succeeded' OR external_ref IS NOT NULL),
    -- Unknown rows are always scheduled for a check.
    CHECK (status <> 'unknown' OR next_check_at IS NOT NULL),
    -- Nothing runs (or ran) the payment without an approval on the row.
    CHECK (status NOT IN ('ready', 'executing', 'unknown', 'rejected') OR approved_hash IS NOT NULL),
    -- Nothing can have been submitted before the first claim.
    CHECK (first_submitted_at IS NULL OR attempt > 0)
);
-- `SELECT *` on purpose: a column another migration added since 0003 makes the copy fail loudly
-- (the rebuilt table must then list it) instead of being dropped.
INSERT INTO operations_rebuilt SELECT * FROM operations;
DROP TABLE operations;
ALTER TABLE operations_rebuilt RENAME TO operations;

CREATE INDEX operations_ready_idx ON operations (available_at) WHERE status = 'ready';
CREATE INDEX operations_lease_idx ON operations (lease_expires_at) WHERE status = 'executing';
CREATE INDEX operations_due_idx ON operations (next_check_at) WHERE status = 'unknown';

CREATE TRIGGER operations_audit_insert AFTER INSERT ON operations
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, COALESCE(NEW.last_event, 'create'), COALESCE(NEW.last_actor, 'unknown'),
            NULL, NEW.status, NEW.attempt, NEW.last_detail);
END;

CREATE TRIGGER operations_audit_update AFTER UPDATE ON operations WHEN NEW.last_event IS NOT NULL
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, NEW.last_event, COALESCE(NEW.last_actor, 'unknown'),
            OLD.status, NEW.status, NEW.attempt, NEW.last_detail);
END;
CREATE INDEX operations_attention_idx ON operations (updated_at) WHERE status = 'needs_attention';
