-- Issue 38: the pages a customer sees name the merchant and the card.
--
-- A tenant's public profile, set by `payonce tenant set-profile` or `PUT /v1/tenant/profile`
-- (service key). No row: the pages fall back to the tenant id. Lengths are the api's limits
-- (`profile.rs`), repeated here so no writer can store more.
CREATE TABLE tenant_profiles (
    tenant_id      TEXT PRIMARY KEY,
    display_name   TEXT NOT NULL CHECK (char_length(display_name) BETWEEN 1 AND 80),
    support_url    TEXT CHECK (char_length(support_url) <= 2048),
    support_email  TEXT CHECK (char_length(support_email) <= 254),
    updated_at     BIGINT NOT NULL
);

-- The card an operation's payment method names (brand and last four digits), read once from the
-- processor for the confirmation page and kept with the operation: the page does not ask the
-- processor on every view, and the card shown never changes under a customer's eyes.
CREATE TABLE operation_cards (
    operation_id     TEXT PRIMARY KEY REFERENCES operations (id),
    payment_method   TEXT NOT NULL,
    brand            TEXT NOT NULL CHECK (char_length(brand) BETWEEN 1 AND 32),
    last4            TEXT NOT NULL CHECK (last4 ~ '^[0-9]{4}$'),
    fetched_at       BIGINT NOT NULL
);

-- A read-only on-call key (`payonce keys create --role on_call --read-only`): it signs in to the
-- console and reads everything its tenant's on-call keys read, and resolves or approves nothing.
-- Only an on-call key can be read-only (the other roles have their own narrow rights).
ALTER TABLE api_keys ADD COLUMN read_only BIGINT NOT NULL DEFAULT 0
    CHECK (read_only IN (0, 1) AND (read_only = 0 OR role = 'on_call'));
