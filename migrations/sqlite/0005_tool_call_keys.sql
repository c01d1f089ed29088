-- MCP `tools/call` idempotency keys (SEP-3182, offered as an experimental capability): the first
-- answer to a key is kept so a retry with the same key and arguments replays it without running the
-- tool again. Correlation only: an operation's identity stays its business key.
CREATE TABLE tool_call_keys (
    tenant_id        TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,
    answer           TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
