-- Issue 50: readiness must fail when the ledger cannot take a new row. The one-row update of
-- `write_probe` fits in its page and kept succeeding on a full disk while every insert failed with
-- "could not extend file". The probe (`postgres.rs`, `WRITE_PROBE_PAGE`) empties this table and
-- inserts one row in a transaction it rolls back: the insert goes to a new, empty file, so it
-- must extend it by a page, as a create does once its table's pages are full. Nothing is kept.
CREATE TABLE write_probe_page (
    probed_at BIGINT NOT NULL
);
