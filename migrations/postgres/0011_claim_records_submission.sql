-- Issue 16: a worker's claim may record, in the same row version and commit, that the claimed
-- operation's request is about to leave (`Queue::claim_to_submit`): one row version, one statement
-- and one commit fewer per payment than a claim followed by a submission record.
--
-- The audit trail stays what it was: such a claim still logs `claim` (ready -> executing) and then
-- `submission_started` (executing -> executing), in that order, at the same instant, by the same
-- actor. A claim records a submission exactly when the claimed row has `first_submitted_attempt`
-- set: a ready row never has it (every path back to ready clears it or goes to unknown instead),
-- and a plain claim leaves it unset.
CREATE OR REPLACE FUNCTION payonce_record_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, e.event, COALESCE(n.last_actor, 'unknown'),
           e.from_status, n.status, n.attempt, e.detail
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    CROSS JOIN LATERAL (VALUES
        (0, n.last_event, o.status, n.last_detail),
        (1, CASE WHEN o.status = 'ready' AND n.status = 'executing' AND n.first_submitted_attempt IS NOT NULL
                 THEN 'submission_started' END, 'executing', NULL)
    ) AS e(step, event, from_status, detail)
    WHERE e.event IS NOT NULL ORDER BY n.id, e.step;
    RETURN NULL;
END $$;
