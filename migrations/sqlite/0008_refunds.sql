-- Refunds (issue 19): an operation of kind `refund` names the succeeded payment operation it gives
-- money back from, that payment's processor reference (copied at creation) and Stripe's reason.
-- The over-refund guard is one INSERT ... SELECT (`ledger/src/refunds.rs`), atomic under
-- SQLite's single writer; the CHECKs below mirror `Details` and Postgres's 0008.
-- SQLite cannot alter a CHECK: the table is rebuilt as in 0006 (foreign keys are off while SQLite
-- migrations run, and checked before the migrator finishes). The rebuild drops the table's indexes
-- and triggers: every one of 0001-0007 is recreated below.
CREATE TABLE operations_rebuilt (
    id                      TEXT PRIMARY KEY CHECK (length(id) = 35 AND substr(id, 1, 3) = 'op_'
                                AND substr(id, 4) NOT GLOB '*[^0-9a-f]*'),
    tenant_id               TEXT NOT NULL,
    business_key            TEXT NOT NULL,
    kind                    TEXT NOT NULL CHECK (kind IN ('payment', 'refund')),
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
    refund_of               TEXT REFERENCES operations (id),
    refund_payment_reference TEXT,
    refund_reason           TEXT,
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
    CHECK (first_submitted_at IS NULL OR attempt > 0),
    -- The refund columns are set exactly on refunds, and a refund never refers to itself (each column
    -- is tested IS NOT NULL: a CHECK that evaluates to NULL passes).
    CHECK (
        CASE kind
            WHEN 'refund' THEN refund_of IS NOT NULL AND refund_payment_reference IS NOT NULL
                AND refund_reason IS NOT NULL AND refund_of <> id
                AND length(refund_payment_reference) BETWEEN 1 AND 128
                AND refund_reason IN ('duplicate', 'fraudulent', 'requested_by_customer')
            ELSE refund_of IS NULL AND refund_payment_reference IS NULL AND refund_reason IS NULL
        END
    )
);
-- The new columns are listed after `*`: a column another migration added since 0006 makes the
-- copy fail loudly (the rebuilt table must then list it) instead of being dropped.
INSERT INTO operations_rebuilt SELECT *, NULL, NULL, NULL FROM operations;
DROP TABLE operations;
ALTER TABLE operations_rebuilt RENAME TO operations;

CREATE INDEX operations_ready_idx ON operations (available_at) WHERE status = 'ready';
CREATE INDEX operations_lease_idx ON operations (lease_expires_at) WHERE status = 'executing';
CREATE INDEX operations_due_idx ON operations (next_check_at) WHERE status = 'unknown';
CREATE INDEX operations_attention_idx ON operations (updated_at) WHERE status = 'needs_attention';
CREATE INDEX operations_console_tenant_idx ON operations (tenant_id, created_at, id);
CREATE INDEX operations_console_status_idx ON operations (tenant_id, status, created_at, id);
CREATE INDEX operations_console_invoice_idx ON operations (tenant_id, invoice);
CREATE INDEX operations_console_customer_idx ON operations (tenant_id, customer);
CREATE INDEX operations_console_reference_idx ON operations (external_ref);
-- A payment's refunds: the guard's sum and the listings beside the payment.
CREATE INDEX operations_refund_of_idx ON operations (refund_of) WHERE refund_of IS NOT NULL;

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
