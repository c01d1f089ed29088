-- An operation created with its approval (the batch intake, `POST /v1/operations` with `approval`)
-- is inserted already `ready`: one insert instead of an insert and an update of the same row (a
-- second row version, its index entries and its statement trigger), on the hottest intake path.
-- Its audit trail is the same as a create then an approve: the insert trigger writes both events
-- for a row inserted with `last_event = 'approve'`: `create` (by `last_actor`, the creator) from
-- nothing to awaiting_approval, then `approve` (by `approved_by`, with the row's `last_detail`,
-- the approval's method) from awaiting_approval to the row's state. Every other insert is logged
-- as before.
CREATE OR REPLACE FUNCTION payonce_record_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_events (operation_id, at, event, actor, from_status, to_status, attempt, detail)
    SELECT n.id, n.updated_at, e.event, e.actor, e.from_status, e.to_status, n.attempt, e.detail
    FROM new_rows n CROSS JOIN LATERAL (
        SELECT COALESCE(n.last_event, 'create') AS event, COALESCE(n.last_actor, 'unknown') AS actor,
               NULL::text AS from_status, n.status AS to_status, n.last_detail AS detail, 0 AS step
        WHERE n.last_event IS DISTINCT FROM 'approve'
        UNION ALL
        SELECT 'create', COALESCE(n.last_actor, 'unknown'), NULL, 'awaiting_approval', NULL, 0
        WHERE n.last_event = 'approve'
        UNION ALL
        SELECT 'approve', COALESCE(n.approved_by, 'unknown'), 'awaiting_approval', n.status, n.last_detail, 1
        WHERE n.last_event = 'approve'
    ) AS e
    ORDER BY n.id, e.step;
    RETURN NULL;
END $$;
