-- Issue 16: the console's searchable columns that never change after creation (tenant, creation
-- time, invoice, customer) get a write-once directory of their own, and their three indexes move
-- there from operations. Every status change writes a new operations row version with an entry in
-- every index of operations (status is indexed, so no such update is heap-only): these three cost
-- about 17 µs per payment on the hot path (two versions each), measured in the loop of 200 claims
-- and outcome writes of 128 rows (docs/benchmarks.md, seventh pass). A directory row is written
-- once, by the same statement that creates the operation, and never updated.
--
-- Pages in one state keep walking operations_console_status_idx (state changes; it stays).
CREATE TABLE operation_search (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    invoice     TEXT NOT NULL,
    customer    TEXT NOT NULL
);
INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer)
    SELECT id, tenant_id, created_at, invoice, customer FROM operations;
-- Newest first per tenant: the keyset (created_at, id) walks it backwards.
CREATE INDEX operation_search_tenant_idx ON operation_search (tenant_id, created_at, id);
CREATE INDEX operation_search_invoice_idx ON operation_search (tenant_id, invoice);
CREATE INDEX operation_search_customer_idx ON operation_search (tenant_id, customer);

-- Filled by every statement that creates operations (one INSERT … SELECT over its new rows). Its
-- own trigger, apart from the audit trail's, so switching the audit off for a bulk load (tests do)
-- leaves the directory whole.
CREATE FUNCTION payonce_search_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer)
    SELECT n.id, n.tenant_id, n.created_at, n.invoice, n.customer FROM new_rows n;
    RETURN NULL;
END $$;
CREATE TRIGGER operations_search_insert AFTER INSERT ON operations
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION payonce_search_inserted();

-- The directory is a copy: its columns may never change on operations. No statement of payonce
-- sets them; this refuses one that would (it fires only when an UPDATE names one of them).
CREATE FUNCTION payonce_search_columns_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.tenant_id, NEW.created_at, NEW.invoice, NEW.customer)
       IS DISTINCT FROM (OLD.id, OLD.tenant_id, OLD.created_at, OLD.invoice, OLD.customer) THEN
        RAISE EXCEPTION 'an operation''s id, tenant, creation time, invoice and customer never change'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER operations_search_columns_fixed
    BEFORE UPDATE OF id, tenant_id, created_at, invoice, customer ON operations
    FOR EACH ROW EXECUTE FUNCTION payonce_search_columns_fixed();

DROP INDEX operations_console_tenant_idx;
DROP INDEX operations_console_invoice_idx;
DROP INDEX operations_console_customer_idx;
