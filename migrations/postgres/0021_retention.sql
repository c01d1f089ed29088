-- Issue 43: retention. Checked webhook payloads are pruned by the time they were checked; this
-- partial index serves that walk without touching pending hints (which have their own index).
CREATE INDEX processor_events_checked_idx ON processor_events (applied_at) WHERE applied_at IS NOT NULL;
