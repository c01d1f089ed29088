-- Issue 13: a webhook is a hint (docs/decisions.md).
--
-- 1. A payment the processor holds for an operation nobody approved must reach needs_attention with
--    both facts (and may then be resolved by hand); before this, the approval CHECK refused it and
--    the webhook failed with 503 forever. The invariant kept: nothing is ready, executing, unknown
--    or rejected (states that run or ran the payment) without an approval on the row.
--    SQLite cannot alter a CHECK: the table is rebuilt as sqlite.org/lang_altertable.html describes
--    (new table, copy, drop, rename). The migrator runs SQLite migrations with foreign keys off, as
--    that procedure requires, and runs PRAGMA foreign_key_check before it commits.
CREATE TABLE operations_rebuilt (
    id                      TEXT PRIMARY KEY CHECK (id GLOB 'op_[0-9a-f]*' AND length(id) = 35),
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
-- Explicit columns: a column added by a later migration must be added here too (loud, not silent).
INSERT INTO operations_rebuilt (id, tenant_id, business_key, kind, amount_minor, currency, customer,
    payment_method, invoice, destination, description, details_hash, status, attempt, lease_owner,
    lease_expires_at, idempotency_key, first_submitted_at, first_submitted_attempt, last_submitted_at,
    submit_count, external_ref, result, failure_code, failure_message, available_at, next_check_at,
    check_count, approved_hash, approved_by, approval_expires_at, last_event, last_actor, last_detail,
    created_at, updated_at)
SELECT id, tenant_id, business_key, kind, amount_minor, currency, customer,
    payment_method, invoice, destination, description, details_hash, status, attempt, lease_owner,
    lease_expires_at, idempotency_key, first_submitted_at, first_submitted_attempt, last_submitted_at,
    submit_count, external_ref, result, failure_code, failure_message, available_at, next_check_at,
    check_count, approved_hash, approved_by, approval_expires_at, last_event, last_actor, last_detail,
    created_at, updated_at
FROM operations;
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

-- 2. Stored webhooks are hints the reconciler checks by retrieving the processor object; a hint
--    whose retrieval failed waits until check_after, and checks counts the tries.
ALTER TABLE processor_events ADD COLUMN check_after BIGINT;
ALTER TABLE processor_events ADD COLUMN checks BIGINT NOT NULL DEFAULT 0;
CREATE INDEX processor_events_pending_idx ON processor_events (received_at) WHERE applied_at IS NULL;
