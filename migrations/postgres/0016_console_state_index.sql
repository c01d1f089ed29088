-- Issue 16: the console's state index takes no entry from the worker's two row versions.
--
-- Every row version of an operation adds an entry to every index of operations whose predicate it
-- matches (a status change is never a heap-only update). `operations_console_status_idx` matched
-- all of them, so the claim (-> executing) and the outcome write (-> succeeded) each added one:
-- about a tenth of the end-to-end rate (payonce-bench, three alternating pairs with and without it).
-- It now leaves out those two states. The console finds them another way (console.rs, `page_sql`):
-- a page of succeeded operations, most of a tenant's rows, walks the search directory in order and
-- keeps the rows in that state; executing operations, at most the fleet's in-flight work, are
-- found through `operations_lease_idx`. The overview counts states through the directory.
DROP INDEX operations_console_status_idx;
CREATE INDEX operations_console_status_idx ON operations (tenant_id, status, created_at, id)
    WHERE status NOT IN ('executing', 'succeeded');
