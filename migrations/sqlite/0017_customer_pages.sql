-- Issue 38: the pages a customer sees name the merchant and the card (see the Postgres migration
-- 0023 for the why).
CREATE TABLE tenant_profiles (
    tenant_id      TEXT PRIMARY KEY,
    display_name   TEXT NOT NULL CHECK (length(display_name) BETWEEN 1 AND 80),
    support_url    TEXT CHECK (length(support_url) <= 2048),
    support_email  TEXT CHECK (length(support_email) <= 254),
    updated_at     BIGINT NOT NULL
);

CREATE TABLE operation_cards (
    operation_id     TEXT PRIMARY KEY REFERENCES operations (id),
    payment_method   TEXT NOT NULL,
    brand            TEXT NOT NULL CHECK (length(brand) BETWEEN 1 AND 32),
    last4            TEXT NOT NULL CHECK (length(last4) = 4 AND last4 NOT GLOB '*[^0-9]*'),
    fetched_at       BIGINT NOT NULL
);

-- A read-only on-call key (see the Postgres migration 0023).
ALTER TABLE api_keys ADD COLUMN read_only BIGINT NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1));
