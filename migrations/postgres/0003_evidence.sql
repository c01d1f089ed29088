-- Issue 13: a webhook is a hint (docs/decisions.md).
--
-- 1. A payment the processor holds for an operation nobody approved must reach needs_attention with
--    both facts (and may then be resolved by hand); before this, the approval CHECK refused it and
--    the webhook failed with 503 forever. The invariant kept: nothing is ready, executing, unknown
--    or rejected (states that run or ran the payment) without an approval on the row.
DO $$
DECLARE c TEXT;
BEGIN
    SELECT conname INTO c FROM pg_constraint
     WHERE conrelid = 'operations'::regclass AND contype = 'c'
       AND pg_get_constraintdef(oid) LIKE '%approved_hash IS NOT NULL%';
    IF c IS NOT NULL THEN
        EXECUTE format('ALTER TABLE operations DROP CONSTRAINT %I', c);
    END IF;
END $$;
ALTER TABLE operations ADD CONSTRAINT operations_work_needs_approval
    CHECK (status NOT IN ('ready', 'executing', 'unknown', 'rejected') OR approved_hash IS NOT NULL);

-- 2. Stored webhooks are hints the reconciler checks by retrieving the processor object; a hint
--    whose retrieval failed waits until check_after, and checks counts the tries.
ALTER TABLE processor_events ADD COLUMN check_after BIGINT;
ALTER TABLE processor_events ADD COLUMN checks BIGINT NOT NULL DEFAULT 0;
CREATE INDEX processor_events_pending_idx ON processor_events (received_at) WHERE applied_at IS NULL;
