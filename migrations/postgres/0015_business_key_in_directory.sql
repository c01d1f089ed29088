-- payonce: contract needs 0015
-- (Written before the expand/contract rule, docs/decisions/004-expand-contract-migrations.md: a
-- column older binaries do not fill becomes NOT NULL, so only binaries that know it run beside it.)
-- Issue 16: the business key joins the search directory, and its uniqueness per tenant moves there
-- with it. Like the columns migration 13 moved, it never changes after creation, and its unique
-- index on operations took an entry on every row version (about 8.5 µs per payment on the hot
-- path, `bench/scripts/hot-path-rows.sh`). In the directory it costs one entry, at creation.
--
-- Creating an operation whose business key is taken in its tenant now fails in the directory's
-- trigger, in the creating statement, with a unique violation on `operation_search_business_key`
-- (a concurrent creator waits for the first to commit, as it did on operations' own index); the
-- ledger reads that error as "already created" and answers with the existing operation, as before.
ALTER TABLE operation_search ADD COLUMN business_key TEXT;
UPDATE operation_search s SET business_key = o.business_key FROM operations o WHERE o.id = s.id;
ALTER TABLE operation_search ALTER COLUMN business_key SET NOT NULL;
CREATE UNIQUE INDEX operation_search_business_key ON operation_search (tenant_id, business_key);

CREATE OR REPLACE FUNCTION payonce_search_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer, business_key)
    SELECT n.id, n.tenant_id, n.created_at, n.invoice, n.customer, n.business_key FROM new_rows n;
    RETURN NULL;
END $$;

DROP TRIGGER operations_search_columns_fixed ON operations;
CREATE OR REPLACE FUNCTION payonce_search_columns_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.tenant_id, NEW.created_at, NEW.invoice, NEW.customer, NEW.business_key)
       IS DISTINCT FROM (OLD.id, OLD.tenant_id, OLD.created_at, OLD.invoice, OLD.customer, OLD.business_key) THEN
        RAISE EXCEPTION 'an operation''s id, tenant, creation time, invoice, customer and business key never change'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER operations_search_columns_fixed
    BEFORE UPDATE OF id, tenant_id, created_at, invoice, customer, business_key ON operations
    FOR EACH ROW EXECUTE FUNCTION payonce_search_columns_fixed();

ALTER TABLE operations DROP CONSTRAINT operations_tenant_id_business_key_key;
