-- Issue 51: workers claim interactive work before bulk work and take tenants in turns, and a
-- scheduled payment waits for its `not_before` (docs/decisions/080-fair-claims.md).
-- `priority`: 0 interactive (a customer or an assistant waits), 1 bulk (a billing run); lower claims
-- first. Rows from before this migration are bulk: nobody can say who waits for them.
ALTER TABLE operations ADD COLUMN priority INTEGER NOT NULL DEFAULT 1;
-- Not claimed before this (ms); NULL: as soon as approved. An approval sets `available_at` to the
-- later of now and this.
ALTER TABLE operations ADD COLUMN not_before INTEGER;
-- Claims by lane (priority, tenant), oldest first, and the lanes' discovery (one descent per lane).
-- The one index of ready rows: the unplanned claim (tools, tests) sorts the due rows it reads here.
CREATE INDEX operations_lanes_idx ON operations (priority, tenant_id, available_at) WHERE status = 'ready';
DROP INDEX operations_ready_idx;
-- A tenant's share of the claims within a class (`payonce tenant set-share`); a tenant without a
-- row has the default share (`priority::SHARE_DEFAULT`).
CREATE TABLE tenant_shares (
    tenant_id  TEXT PRIMARY KEY,
    share      BIGINT NOT NULL CHECK (share BETWEEN 1 AND 1000),
    updated_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL
);
-- A tenant's own cap of the fleet's write budget, submissions a second across every worker
-- (`payonce tenant set-cap`); a tenant without a row has none beyond the fleet's.
CREATE TABLE tenant_caps (
    tenant_id  TEXT PRIMARY KEY,
    per_second BIGINT NOT NULL CHECK (per_second BETWEEN 1 AND 100000),
    updated_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL
);
