-- Issue 16: a claim that also records its submission start (`Queue::claim_to_submit`) logs one
-- event, `submission_started` with the claim's move (ready -> executing), set by the statement
-- itself; the trigger goes back to logging each update's `last_event` once (see the Postgres
-- migration 17). Rows logged before this migration keep their two events.
DROP TRIGGER operations_audit_update;
CREATE TRIGGER operations_audit_update AFTER UPDATE ON operations WHEN NEW.last_event IS NOT NULL
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, NEW.last_event, COALESCE(NEW.last_actor, 'unknown'),
            OLD.status, NEW.status, NEW.attempt, NEW.last_detail);
END;
