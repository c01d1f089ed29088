-- Issue 43: readiness commits an update of this one row (`Operations::probe_write`), so a store that
-- cannot take a write (a full disk, a read-only server) is not ready. Nothing else reads it.
CREATE TABLE write_probe (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at BIGINT NOT NULL
);
INSERT INTO write_probe (id, probed_at) VALUES (1, 0);
