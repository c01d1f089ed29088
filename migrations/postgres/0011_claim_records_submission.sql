-- Issue 16: a worker's claim may record, in the same row version and commit, that the claimed
-- operation's request is about to leave (`Queue::claim_to_submit`): one row version, one statement
-- and one commit fewer per payment than a claim followed by a submission record.
--
-- The audit trail stays what it was: such a claim still logs `claim` (ready -> executing) and then
-- `submission_started` (executing -> executing), in that order, at the same instant, by the same
-- actor. A claim records a submission exactly when it counts one (`submit_count` grows); a plain
-- claim counts none. (`first_submitted_attempt` would not do: a row an on-call person sent back to
-- ready with `resolve retry` keeps an earlier attempt's record, which a plain claim leaves there.)
CREATE OR REPLACE FUNCTION payonce_record_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, e.event, COALESCE(n.last_actor, 'unknown'),
           e.from_status, n.status, n.attempt, e.detail
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    CROSS JOIN LATERAL (VALUES
        (0, n.last_event, o.status, n.last_detail),
        (1, CASE WHEN o.status = 'ready' AND n.status = 'executing' AND n.submit_count > o.submit_count
                 THEN 'submission_started' END, 'executing', NULL)
    ) AS e(step, event, from_status, detail)
    WHERE e.event IS NOT NULL ORDER BY n.id, e.step;
    RETURN NULL;
END $$;
