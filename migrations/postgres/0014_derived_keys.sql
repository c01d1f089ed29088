-- Issue 16: two keys that repeated another key's guarantee.
--
-- An operation's idempotency key is derived from its id (`IdempotencyKey::derive`: 'payonce-' || id,
-- once, at creation), so the id's primary key already makes it unique. A CHECK
-- now says so, and the unique index that repeated it goes: it took an entry on every row version
-- (about 6 µs per payment on the hot path, measured as in migration 13). The key still cannot
-- repeat, and now cannot drift from the id either.
ALTER TABLE operations ADD CONSTRAINT operations_idempotency_key_derived
    CHECK (idempotency_key = 'payonce-' || id);
ALTER TABLE operations DROP CONSTRAINT operations_idempotency_key_key;

-- The audit trail is keyed by (operation, id) instead of id alone: the index every trail read walks
-- (`operation_events_operation_idx`) becomes the primary key, so an appended event takes one B-tree
-- entry fewer (three per payment; about 4.5 µs per payment, measured as above). `id` still comes
-- from its sequence, so it stays unique and in order.
CREATE UNIQUE INDEX operation_events_key ON operation_events (operation_id, id);
ALTER TABLE operation_events DROP CONSTRAINT operation_events_pkey;
ALTER TABLE operation_events ADD CONSTRAINT operation_events_pkey PRIMARY KEY USING INDEX operation_events_key;
DROP INDEX operation_events_operation_idx;
