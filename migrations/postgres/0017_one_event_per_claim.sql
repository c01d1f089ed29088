-- Issue 16: a claim that also records its submission start (`Queue::claim_to_submit`) is one row
-- version in one commit, and now one audit event: the statement sets `last_event` to
-- `submission_started` and the trigger logs it with the claim's move (ready -> executing). Before,
-- this trigger added a second row (`claim`, then `submission_started` executing -> executing) for
-- every payment: a third of the audit rows the worker wrote. The trail keeps who claimed (the
-- actor), when the request left, and one `submission_started` per submission; a plain claim still
-- logs `claim`. Rows logged before this migration keep their two events.
CREATE OR REPLACE FUNCTION payonce_record_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, n.last_event, COALESCE(n.last_actor, 'unknown'),
           o.status, n.status, n.attempt, n.last_detail
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.last_event IS NOT NULL ORDER BY n.id;
    RETURN NULL;
END $$;
