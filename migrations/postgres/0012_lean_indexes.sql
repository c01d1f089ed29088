-- Issue 16: less work per status change. Every status change is a new row version with an
-- entry in every index of operations whose predicate it meets (status is indexed, so no such update
-- is heap-only); these two indexes took one on every version without needing it.
--
-- 1. The processor-reference index holds only rows that have a reference: lookups by reference
--    (webhooks, console search) always name one, so `external_ref = $1` implies the predicate, and
--    the versions written before the processor answered (created, approved, claimed) add nothing.
DROP INDEX operations_console_reference_idx;
CREATE INDEX operations_console_reference_idx ON operations (external_ref) WHERE external_ref IS NOT NULL;

-- 2. The audit trail's time index is a BRIN: events are appended in time order, so block ranges
--    bound the overview's last-hour chart as well as a B-tree did, and an appended event costs no
--    B-tree descent (three per payment). Ranges not yet summarised are always read, and those are
--    the newest, which the chart reads anyway.
DROP INDEX operation_events_at_idx;
CREATE INDEX operation_events_at_idx ON operation_events USING brin (at) WITH (autosummarize = on);

-- 3. The two regular-expression CHECKs are written without a regular expression. Postgres checks
--    every CHECK on every new row version, so these two ran twice per payment on columns no
--    update touches; measured in the same loop of 200 claims and outcome writes of 128 rows each
--    (docs/benchmarks.md, seventh pass), the regular expressions cost about 6 µs per row version,
--    the plain string functions about 2. Same rows accepted: exactly 'op_' and 32 lowercase hex
--    digits; exactly three lowercase ASCII letters.
ALTER TABLE operations DROP CONSTRAINT operations_id_check,
    ADD CONSTRAINT operations_id_check CHECK (length(id) = 35 AND starts_with(id, 'op_')
        AND translate(substr(id, 4), '0123456789abcdef', '') = '');
ALTER TABLE operations DROP CONSTRAINT operations_currency_check,
    ADD CONSTRAINT operations_currency_check CHECK (length(currency) = 3
        AND translate(currency, 'abcdefghijklmnopqrstuvwxyz', '') = '');
