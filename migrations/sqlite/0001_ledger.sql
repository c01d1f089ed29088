-- payonce ledger, SQLite. Times are milliseconds since the Unix epoch (BIGINT), the same in every
-- store, so one conformance suite covers both (docs/decisions.md).

CREATE TABLE operations (
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
    -- Nothing leaves awaiting_approval without an approval on the row.
    CHECK (status IN ('awaiting_approval', 'cancelled') OR approved_hash IS NOT NULL),
    -- Nothing can have been submitted before the first claim.
    CHECK (first_submitted_at IS NULL OR attempt > 0)
);

-- Claims: ready rows in the order they became available.
CREATE INDEX operations_ready_idx ON operations (available_at) WHERE status = 'ready';
-- Expired-lease sweeps.
CREATE INDEX operations_lease_idx ON operations (lease_expires_at) WHERE status = 'executing';
-- Reconciliation of unknown outcomes.
CREATE INDEX operations_due_idx ON operations (next_check_at) WHERE status = 'unknown';
-- On-call listings of rows that need a human.
CREATE INDEX operations_attention_idx ON operations (updated_at) WHERE status = 'needs_attention';

CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    details_hash  TEXT NOT NULL,
    approved_by   TEXT NOT NULL,
    method        TEXT NOT NULL,
    approved_at   BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT,
    CHECK (expires_at > approved_at)
);
CREATE INDEX approvals_operation_idx ON approvals (operation_id);

-- Single-use confirmation links; only the token's hash is stored.
CREATE TABLE approval_links (
    token_hash    TEXT PRIMARY KEY,
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    details_hash  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    used_at       BIGINT
);
CREATE INDEX approval_links_operation_idx ON approval_links (operation_id);

-- Append-only audit of every transition; written by a trigger so no code path can forget it.
CREATE TABLE operation_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    at            BIGINT NOT NULL,
    event         TEXT NOT NULL,
    actor         TEXT NOT NULL,
    from_status   TEXT,
    to_status     TEXT NOT NULL,
    attempt       BIGINT NOT NULL,
    detail        TEXT
);
CREATE INDEX operation_events_operation_idx ON operation_events (operation_id, id);

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

-- Processor webhooks, stored once per (processor, event id).
CREATE TABLE processor_events (
    processor     TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    operation_id  TEXT,
    payload       TEXT NOT NULL,
    received_at   BIGINT NOT NULL,
    applied_at    BIGINT,
    outcome       TEXT,
    PRIMARY KEY (processor, event_id)
);

-- Provider tool-call ids: correlation only, never identity.
CREATE TABLE tool_calls (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id         TEXT NOT NULL,
    operation_id      TEXT,
    provider          TEXT NOT NULL,
    provider_call_id  TEXT,
    tool              TEXT NOT NULL,
    at                BIGINT NOT NULL
);
CREATE INDEX tool_calls_operation_idx ON tool_calls (operation_id);

-- Per-tenant API keys; only a SHA-256 of the secret is stored.
CREATE TABLE api_keys (
    key_hash    TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('service', 'assistant', 'on_call')),
    label       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- Maintenance leases: one reconciler sweeps at a time (correctness does not depend on it).
CREATE TABLE maintenance_leases (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
