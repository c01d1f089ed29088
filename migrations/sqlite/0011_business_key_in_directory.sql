-- Issue 16: the business key joins the search directory, as on Postgres (its migration 15), so one
-- lookup by business key and one console search serve both stores. SQLite keeps the unique key on
-- operations too (an insert that finds the key taken does nothing, as before); the directory's own
-- unique index says the same.
ALTER TABLE operation_search ADD COLUMN business_key TEXT;
UPDATE operation_search SET business_key = (SELECT o.business_key FROM operations o WHERE o.id = operation_search.id);
CREATE UNIQUE INDEX operation_search_business_key ON operation_search (tenant_id, business_key);

DROP TRIGGER operations_search_insert;
CREATE TRIGGER operations_search_insert AFTER INSERT ON operations
BEGIN
    INSERT INTO operation_search (id, tenant_id, created_at, invoice, customer, business_key)
    VALUES (NEW.id, NEW.tenant_id, NEW.created_at, NEW.invoice, NEW.customer, NEW.business_key);
END;

DROP TRIGGER operations_search_columns_fixed;
CREATE TRIGGER operations_search_columns_fixed
    BEFORE UPDATE OF id, tenant_id, created_at, invoice, customer, business_key ON operations
    WHEN NEW.id IS NOT OLD.id OR NEW.tenant_id IS NOT OLD.tenant_id OR NEW.created_at IS NOT OLD.created_at
      OR NEW.invoice IS NOT OLD.invoice OR NEW.customer IS NOT OLD.customer
      OR NEW.business_key IS NOT OLD.business_key
BEGIN
    SELECT RAISE(ABORT, 'an operation''s id, tenant, creation time, invoice, customer and business key never change');
END;
