-- Kept tool answers (`tool_call_keys`) are pruned with the tool-call period: this index lets a prune
-- find the oldest without reading the table.
CREATE INDEX tool_call_keys_created_idx ON tool_call_keys (created_at);
