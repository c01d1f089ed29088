-- Whether the processor is reachable, as the processes that submit payments last found it: one row,
-- written only when a process sees a change (unreachable since when, or reachable again), read by
-- every api's console and /metrics, so a split deployment (api apart from worker) shows the outage.
-- `down_since` is NULL while reachable; times are the ledger's clock, ms.
CREATE TABLE processor_reachability (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    down_since  BIGINT,
    changed_at  BIGINT NOT NULL,
    changed_by  TEXT NOT NULL
);
INSERT INTO processor_reachability (id, down_since, changed_at, changed_by) VALUES (1, NULL, 0, '');
