-- A tenant's processor (`payonce tenant set-processor`), and the processor each operation is bound
-- to at creation. Without a tenant row, and on every row from before this migration, NULL: the
-- configured processor of whichever process serves it, as before tenants could choose
-- (docs/decisions.md). A refund carries its payment's.
CREATE TABLE tenant_processors (
    tenant_id   TEXT PRIMARY KEY,
    processor   TEXT NOT NULL CHECK (processor IN ('stripe', 'adyen')),
    updated_at  BIGINT NOT NULL
);
ALTER TABLE operations ADD COLUMN processor TEXT;
-- NOT VALID: the existing rows are not scanned under the table's exclusive lock. Every one of them is
-- NULL, which the check admits, and every row written from now on is checked.
ALTER TABLE operations ADD CONSTRAINT operations_processor_check
    CHECK (processor IN ('stripe', 'adyen')) NOT VALID;
