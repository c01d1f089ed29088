-- Issue 43: a repeated tool call (the api's own retry after `unavailable`, an assistant sending a
-- call again) added a row each time: 11,175 rows for 7,450 call ids. A model provider's call id
-- names one call: it is now one row per tenant, provider, call id and operation (the operation too,
-- so a client that reuses ids never hides a call about another operation). Not for MCP: its call id
-- is the JSON-RPC request id, which every session (and every stateless request) numbers anew, so
-- equal ids are different calls. Calls without an id cannot be told from new ones and are each kept
-- (NULLs are distinct in a unique index).
--
-- Repeats recorded before this migration fold into the first row of each call (lowest id: its
-- first `at`), so the index can be built.
DELETE FROM tool_calls WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (
            PARTITION BY tenant_id, provider, provider_call_id, COALESCE(operation_id, '')
            ORDER BY id) AS n
        FROM tool_calls
        WHERE provider_call_id IS NOT NULL AND provider <> 'mcp') numbered
    WHERE n > 1);
CREATE UNIQUE INDEX tool_calls_call_idx
    ON tool_calls (tenant_id, provider, provider_call_id, COALESCE(operation_id, ''))
    WHERE provider <> 'mcp';
