-- payonce: contract needs 0004
-- (Written before the expand/contract rule, docs/decisions/004-expand-contract-migrations.md: a
-- column older binaries do not fill becomes NOT NULL, so only binaries that know it run beside it.)
-- API key lifecycle (issue 13): a public id to name a key by without its secret, an expiry, who revoked
-- it and why, the key a rotation replaced it with, and when it was last used (to the minute).
-- Keys issued before this migration get an id from their hash's first 64 bits (not the secret).
ALTER TABLE api_keys ADD COLUMN key_id TEXT;
UPDATE api_keys SET key_id = 'key_' || substr(key_hash, 1, 16);
ALTER TABLE api_keys ALTER COLUMN key_id SET NOT NULL;
CREATE UNIQUE INDEX api_keys_key_id_idx ON api_keys (key_id);
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN revoked_by TEXT;
ALTER TABLE api_keys ADD COLUMN revoked_reason TEXT;
ALTER TABLE api_keys ADD COLUMN replaced_by TEXT;
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, created_at);
