-- Issue 16: a worker's claim may record, in the same row version and commit, that the claimed
-- operation's request is about to leave (`Queue::claim_to_submit`). The audit trail stays what it
-- was: such a claim logs `claim` (ready -> executing) and then `submission_started` (executing ->
-- executing), in that order. A claim records a submission exactly when it counts one
-- (`submit_count` grows); a plain claim counts none (see the Postgres migration 11 for why not
-- `first_submitted_attempt`).
DROP TRIGGER operations_audit_update;
CREATE TRIGGER operations_audit_update AFTER UPDATE ON operations WHEN NEW.last_event IS NOT NULL
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, NEW.last_event, COALESCE(NEW.last_actor, 'unknown'),
            OLD.status, NEW.status, NEW.attempt, NEW.last_detail);
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT NEW.id, NEW.updated_at, 'submission_started', COALESCE(NEW.last_actor, 'unknown'),
           'executing', NEW.status, NEW.attempt, NULL
    WHERE OLD.status = 'ready' AND NEW.status = 'executing' AND NEW.submit_count > OLD.submit_count;
END;
