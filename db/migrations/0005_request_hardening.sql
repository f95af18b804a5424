-- Hardening (docs/security.md): who acted, through which issuer, in which server-side request;
-- emergency key removal; the change feed's announcement of versions that become effective later.

-- The `iss` of the caller's token, and an id the server gives each request (client trace ids can
-- collide, by accident or on purpose). Both are NULL on events written before this migration; the
-- hash covers them only when set, so older events keep verifying (registry/audit.py).
ALTER TABLE audit_events ADD COLUMN actor_issuer text;
ALTER TABLE audit_events ADD COLUMN request_id text;

-- Set by `capreg keys rotate --keep-seconds 0`: the key stops verifying at once, even for tickets
-- it signed that have not expired yet.
ALTER TABLE signing_keys ADD COLUMN removed_at timestamptz;

-- The change feed hides versions whose effectiveAt is in the future; when one becomes effective a
-- `version.effective` change announces it. The watermark is the instant up to which that was done.
CREATE TABLE effective_watermark (
    id  integer     PRIMARY KEY CHECK (id = 1),
    at  timestamptz NOT NULL
);
INSERT INTO effective_watermark (id, at) VALUES (1, now());

-- Retention (CAPREG_RETENTION_DAYS) prunes decided and expired approvals and expired idempotency keys.
CREATE INDEX approvals_expires_at ON approvals (expires_at);
CREATE INDEX approvals_decided_at ON approvals (decided_at) WHERE decided_at IS NOT NULL;
CREATE INDEX ticket_idempotency_created_at ON ticket_idempotency (created_at);
-- Finding whether a version's `version.effective` change was already recorded.
CREATE INDEX changes_version_effective ON changes (ref) WHERE kind = 'version.effective';
