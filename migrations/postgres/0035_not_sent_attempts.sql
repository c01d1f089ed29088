-- Issue 53: `attempt_max` counts the attempts that ended with nothing executed (a request that could
-- not be built, Adyen's `Transient-Error` 5xx, a check before submission that could not ask), not
-- every claim: refused connections and rate limits never count, so the fencing `attempt` alone made
-- an outage's claims spend the cap ("attempt 6 of 5"). Reset when a human sends the row back to
-- ready. Rows from before this migration start at 0.
ALTER TABLE operations ADD COLUMN not_sent_attempts BIGINT NOT NULL DEFAULT 0;
