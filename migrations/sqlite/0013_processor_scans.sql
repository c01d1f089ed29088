-- Issue 37: the reconciler's scan for money the ledger does not know about. One row per processor
-- account: the scan has read every payment created from `watermark_ms` on. The watermark lives in
-- the ledger on purpose: a ledger restored from an older backup, or a replica promoted without the
-- primary's last commits, comes back with an older watermark, so the next scan walks again the very
-- period whose rows may be lost.
CREATE TABLE processor_scans (
    processor    TEXT PRIMARY KEY,
    watermark_ms BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
