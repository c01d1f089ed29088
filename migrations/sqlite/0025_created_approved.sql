-- An operation created with its approval (the batch intake, `POST /v1/operations` with `approval`)
-- is inserted already `ready`: one insert instead of an insert and an update of the same row. Its
-- audit trail is the same as a create then an approve: a row inserted with `last_event =
-- 'approve'` gets `create` (by `last_actor`, the creator) from nothing to awaiting_approval, then
-- `approve` (by `approved_by`, with the row's `last_detail`, the approval's method) from
-- awaiting_approval to the row's state. Every other insert is logged as before.
DROP TRIGGER operations_audit_insert;

CREATE TRIGGER operations_audit_insert AFTER INSERT ON operations WHEN NEW.last_event IS NOT 'approve'
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, COALESCE(NEW.last_event, 'create'), COALESCE(NEW.last_actor, 'unknown'),
            NULL, NEW.status, NEW.attempt, NEW.last_detail);
END;

CREATE TRIGGER operations_audit_insert_approved AFTER INSERT ON operations WHEN NEW.last_event = 'approve'
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, 'create', COALESCE(NEW.last_actor, 'unknown'),
            NULL, 'awaiting_approval', NEW.attempt, NULL);
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    VALUES (NEW.id, NEW.updated_at, 'approve', COALESCE(NEW.approved_by, 'unknown'),
            'awaiting_approval', NEW.status, NEW.attempt, NEW.last_detail);
END;
