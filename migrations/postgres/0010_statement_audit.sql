-- Issue 16: cheaper writes on the hot path, same audit trail.
--
-- 1. The audit trail is written once per statement instead of once per row. A batch statement of
--    the worker or the sweep moves up to hundreds of rows; the row trigger ran its INSERT once for
--    each of them. These statement triggers insert the same rows (operation, time, event, actor,
--    from and to state, attempt, detail) with one INSERT … SELECT over the statement's transition
--    tables. An UPDATE that sets no event (lease renewal) still writes no row.
DROP TRIGGER operations_audit ON operations;
DROP FUNCTION payonce_record_event();

CREATE FUNCTION payonce_record_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, COALESCE(n.last_event, 'create'), COALESCE(n.last_actor, 'unknown'),
           NULL, n.status, n.attempt, n.last_detail
    FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END $$;

CREATE FUNCTION payonce_record_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, n.last_event, COALESCE(n.last_actor, 'unknown'),
           o.status, n.status, n.attempt, n.last_detail
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.last_event IS NOT NULL ORDER BY n.id;
    RETURN NULL;
END $$;

CREATE TRIGGER operations_audit_insert AFTER INSERT ON operations
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION payonce_record_inserted();
CREATE TRIGGER operations_audit_update AFTER UPDATE ON operations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION payonce_record_updated();

-- 2. No index names updated_at any more, so a write that changes no indexed column (the worker's
--    submission record: times, counters, the event columns) can be a heap-only tuple update instead
--    of a new entry in every index of the table. The on-call list of operations needing attention
--    sorts those few rows by updated_at after the partial index has found them.
DROP INDEX operations_attention_idx;
CREATE INDEX operations_attention_idx ON operations (id) WHERE status = 'needs_attention';

-- 3. Room on each page for such an update's new version (applies to pages written from now on).
ALTER TABLE operations SET (fillfactor = 85);
