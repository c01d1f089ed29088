-- The on-call console (issue 18): server-side sessions (only the session id's SHA-256 is stored) and the
-- indexes its lists, search, overview and timeline need to stay index scans at millions of operations.
CREATE TABLE console_sessions (
    session_hash  TEXT PRIMARY KEY CHECK (length(session_hash) = 64),
    tenant_id     TEXT NOT NULL,
    key_id        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    ended_at      BIGINT,
    CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_key_idx ON console_sessions (key_id);

-- Newest first per tenant, optionally per state: the keyset (created_at, id) walks these backwards.
CREATE INDEX operations_console_tenant_idx ON operations (tenant_id, created_at, id);
CREATE INDEX operations_console_status_idx ON operations (tenant_id, status, created_at, id);
-- Search by invoice, customer or processor reference (business key and id have their own).
CREATE INDEX operations_console_invoice_idx ON operations (tenant_id, invoice);
CREATE INDEX operations_console_customer_idx ON operations (tenant_id, customer);
CREATE INDEX operations_console_reference_idx ON operations (external_ref);
-- The overview's last-hour chart and an operation's webhooks.
CREATE INDEX operation_events_at_idx ON operation_events (at);
CREATE INDEX processor_events_operation_idx ON processor_events (operation_id);
