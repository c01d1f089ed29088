-- A tenant's processor (`payonce tenant set-processor`), and the processor each operation is bound
-- to at creation. Without a tenant row, and on every row from before this migration, NULL: the
-- configured processor of whichever process serves it, as before tenants could choose
-- (docs/decisions.md). A refund carries its payment's.
CREATE TABLE tenant_processors (
    tenant_id   TEXT PRIMARY KEY,
    processor   TEXT NOT NULL CHECK (processor IN ('stripe', 'adyen')),
    updated_at  INTEGER NOT NULL
);
ALTER TABLE operations ADD COLUMN processor TEXT CHECK (processor IN ('stripe', 'adyen'));
