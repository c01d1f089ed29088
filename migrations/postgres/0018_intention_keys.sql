-- Issue 37: the processor key comes from the intention, not the row.
--
-- A key made from the random operation id ('payonce-' || id, migration 0014) changes when a ledger
-- that lost a row (restore, asynchronous failover) creates the same business action again, and the
-- processor then charges twice. New rows carry a keyed hash of tenant, business key, details hash and
-- generation (`po1_` + 40 hex digits, `payonce_core::intention`), so the CHECK that tied the key to
-- the id goes. Existing rows keep the key they have: it may already be at the processor, and a
-- changed key would be a new payment.
ALTER TABLE operations DROP CONSTRAINT operations_idempotency_key_derived;
ALTER TABLE operations ADD CONSTRAINT operations_idempotency_key_shape
    CHECK (idempotency_key = 'payonce-' || id OR idempotency_key ~ '^po1_[0-9a-f]{40}$');
