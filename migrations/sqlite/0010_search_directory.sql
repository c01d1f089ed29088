-- Issue 16: the console's searchable columns that never change after creation (tenant, creation
-- time, invoice, customer) get a write-once directory of their own, and their three indexes move
-- there from operations, as on Postgres (its migration 13 says why). One console query for both
-- stores.
CREATE TABLE operation_search (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    invoice     TEXT NOT NULL,
    customer    TEXT NOT NULL
);
INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer)
    SELECT id, tenant_id, created_at, invoice, customer FROM operations;
CREATE INDEX operation_search_tenant_idx ON operation_search (tenant_id, created_at, id);
CREATE INDEX operation_search_invoice_idx ON operation_search (tenant_id, invoice);
CREATE INDEX operation_search_customer_idx ON operation_search (tenant_id, customer);

CREATE TRIGGER operations_search_insert AFTER INSERT ON operations
BEGIN
    INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer)
    VALUES (NEW.id, NEW.tenant_id, NEW.created_at, NEW.invoice, NEW.customer);
END;

-- The directory is a copy: its columns may never change on operations.
CREATE TRIGGER operations_search_columns_fixed
    BEFORE UPDATE OF id, tenant_id, created_at, invoice, customer ON operations
    WHEN NEW.id IS NOT OLD.id OR NEW.tenant_id IS NOT OLD.tenant_id OR NEW.created_at IS NOT OLD.created_at
      OR NEW.invoice IS NOT OLD.invoice OR NEW.customer IS NOT OLD.customer
BEGIN
    SELECT RAISE(ABORT, 'an operation''s id, tenant, creation time, invoice and customer never change');
END;

DROP INDEX operations_console_tenant_idx;
DROP INDEX operations_console_invoice_idx;
DROP INDEX operations_console_customer_idx;
