-- A tenant's retention period for its settled operations, the evidence of what was paid: without a
-- row, kept for ever (the default). `payonce tenant set-retention` writes it; the prune deletes an
-- operation, its events and its approval rows once it is final, no refund refers to it, and it was
-- created and last changed more than the period ago (docs/runbook.md, "Retention").
CREATE TABLE tenant_retention (
    tenant_id       TEXT PRIMARY KEY,
    operation_days  BIGINT NOT NULL CHECK (operation_days >= 540),
    updated_at      BIGINT NOT NULL
);
