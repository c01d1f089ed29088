-- Issue 16: the audit trail's foreign key is dropped. Every operation_events row is written by the
-- operations_audit trigger from the operations row it describes (NEW.id), inside the statement that
-- wrote that row, and no code deletes operations, so the referent exists by construction. The key's
-- check was a SELECT … FOR KEY SHARE per event, three per payment on the hot path, costing about as
-- much as the event insert itself (measured with EXPLAIN ANALYZE: 11 µs per event, 2,000 events).
-- SQLite keeps its declaration: it costs nothing there unless foreign keys are switched on.
ALTER TABLE operation_events DROP CONSTRAINT IF EXISTS operation_events_operation_id_fkey;
