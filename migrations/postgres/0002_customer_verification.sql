-- Customer verification on the confirmation page (docs/decisions.md, "Approval needs the customer, not
-- the link"). A link is no longer the customer's identity: approving also needs a signed assertion from
-- the tenant's app or a one-time code delivered out of band.

-- One verification method per tenant, set by `payonce tenant set-verification`. No row: the page
-- approves nothing for that tenant (there is no link-only fallback). The keys are symmetric HMAC keys,
-- so they are stored as issued (payonce must be able to compute the MAC).
CREATE TABLE tenant_verification (
    tenant_id         TEXT PRIMARY KEY,
    method            TEXT NOT NULL CHECK (method IN ('signed_assertion', 'one_time_code')),
    assertion_key_id  TEXT,
    assertion_key     TEXT,
    notify_url        TEXT,
    notify_secret     TEXT,
    updated_at        BIGINT NOT NULL,
    CHECK (method <> 'signed_assertion' OR (assertion_key_id IS NOT NULL AND assertion_key IS NOT NULL)),
    CHECK (method <> 'one_time_code' OR notify_url IS NOT NULL),
    CHECK ((notify_url IS NULL) = (notify_secret IS NULL))
);

-- Assertion nonces, inserted when an assertion is used: the primary key makes a replay (or a racing
-- second use) lose.
CREATE TABLE used_assertions (
    tenant_id     TEXT NOT NULL,
    nonce         TEXT NOT NULL,
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    used_at       BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, nonce)
);

-- One-time codes, one per link of a code-method tenant; only a hash of the code is stored. Every
-- attempt is counted before it is compared; a used or exhausted code is dead.
CREATE TABLE approval_codes (
    delivery_id   TEXT PRIMARY KEY,
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    link_hash     TEXT NOT NULL REFERENCES approval_links (token_hash),
    code_hash     TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    attempts      BIGINT NOT NULL DEFAULT 0,
    attempt_max   BIGINT NOT NULL,
    used_at       BIGINT,
    CHECK (attempts >= 0 AND attempts <= attempt_max),
    CHECK (expires_at > created_at)
);
CREATE INDEX approval_codes_link_idx ON approval_codes (link_hash);

-- Who asked for a link: the service's own budget of open links is counted apart from the links
-- payonce mints when an assistant asks to pay, so an assistant can never starve the service.
ALTER TABLE approval_links ADD COLUMN origin TEXT NOT NULL DEFAULT 'service'
    CHECK (origin IN ('service', 'assistant'));

-- Customer approval requests payonce sent because an assistant asked to pay: numbered per operation,
-- so two racing requests for the same number cannot both be sent.
CREATE TABLE approval_notices (
    operation_id  TEXT NOT NULL REFERENCES operations (id),
    seq           BIGINT NOT NULL,
    at            BIGINT NOT NULL,
    PRIMARY KEY (operation_id, seq)
);
