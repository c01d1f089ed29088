-- Refunds (issue 19): an operation of kind `refund` names the succeeded payment operation it gives
-- money back from, that payment's processor reference (copied at creation) and Stripe's reason.
-- The over-refund guard is transactional (`ledger/src/refunds.rs`): the payment's row is
-- locked, then one INSERT ... SELECT checks the sum; the CHECKs below mirror `Details`.
ALTER TABLE operations ADD COLUMN refund_of TEXT REFERENCES operations (id);
ALTER TABLE operations ADD COLUMN refund_payment_reference TEXT;
ALTER TABLE operations ADD COLUMN refund_reason TEXT;
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check CHECK (kind IN ('payment', 'refund'));
-- The refund columns are set exactly on refunds, and a refund never refers to itself (each column
-- is tested IS NOT NULL: a CHECK that evaluates to NULL passes).
ALTER TABLE operations ADD CONSTRAINT operations_refund_shape_check CHECK (
    CASE kind
        WHEN 'refund' THEN refund_of IS NOT NULL AND refund_payment_reference IS NOT NULL
            AND refund_reason IS NOT NULL AND refund_of <> id
            AND length(refund_payment_reference) BETWEEN 1 AND 128
            AND refund_reason IN ('duplicate', 'fraudulent', 'requested_by_customer')
        ELSE refund_of IS NULL AND refund_payment_reference IS NULL AND refund_reason IS NULL
    END
);
-- A payment's refunds: the guard's sum and the listings beside the payment.
CREATE INDEX operations_refund_of_idx ON operations (refund_of) WHERE refund_of IS NOT NULL;
