-- capreg schema, version 2: delegation tickets, their idempotency keys, and approvals (contract sections 5, 8).

-- One row per minted ticket (the JWT itself is not stored: it is a bearer credential).
CREATE TABLE tickets (
    jti           text        PRIMARY KEY,
    -- The ticket this one was re-delegated from, and the first ticket of its chain (itself for a first ticket).
    parent_jti    text        REFERENCES tickets (jti),
    root_jti      text        NOT NULL,
    -- The capability version the ticket is for; `tenant` is the capability's tenant (the `tenant` claim).
    tenant        text        NOT NULL,
    agent_id      text        NOT NULL,
    skill_id      text        NOT NULL,
    version       text        NOT NULL,
    ref           text        NOT NULL,
    -- The `aud` claim: the agent ref `tenant/agentId` the ticket is for.
    audience      text        NOT NULL,
    -- The minting caller as `tenant/sub` (the outermost `act.sub`), and its tenant.
    actor         text        NOT NULL,
    actor_tenant  text        NOT NULL,
    on_behalf_of  text,
    scopes        text[]      NOT NULL,
    -- Empty means every resource the capability serves.
    resources     text[]      NOT NULL DEFAULT '{}',
    depth         integer     NOT NULL CHECK (depth >= 0),
    max_depth     integer     NOT NULL CHECK (max_depth >= 0),
    issued_at     timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    -- The RFC 8693 `act` claim as signed.
    act           jsonb       NOT NULL,
    -- The signing key: a retired key stays published while a ticket it signed is live.
    kid           text        NOT NULL,
    CHECK ((parent_jti IS NULL) = (depth = 0)),
    FOREIGN KEY (tenant, agent_id, skill_id, version) REFERENCES capability_versions (tenant, agent_id, skill_id, version)
);
CREATE INDEX tickets_parent ON tickets (parent_jti) WHERE parent_jti IS NOT NULL;
CREATE INDEX tickets_tenant ON tickets (tenant, issued_at, jti);
CREATE INDEX tickets_actor_tenant ON tickets (actor_tenant, issued_at, jti);
CREATE INDEX tickets_kid ON tickets (kid, expires_at);
CREATE INDEX tickets_capability ON tickets (tenant, agent_id, skill_id, version);

-- Idempotency-Key: the first response to (principal, key) is replayed for the same body for 24 hours.
-- The row is inserted inside the minting transaction, so concurrent retries wait on the primary key
-- and find the committed answer instead of minting again.
CREATE TABLE ticket_idempotency (
    principal     text        NOT NULL,
    idem_key      text        NOT NULL,
    body_hash     text        NOT NULL,
    status_code   integer,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, idem_key)
);

-- Ticket requests for capabilities with requiresApproval. `expired` is not stored: a pending or
-- approved request past expires_at reads as expired.
CREATE TABLE approvals (
    approval_id      text        PRIMARY KEY,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'approved', 'denied', 'collected')),
    -- The capability version the request resolved to (its tenant's admins decide).
    tenant           text        NOT NULL,
    agent_id         text        NOT NULL,
    skill_id         text        NOT NULL,
    version          text        NOT NULL,
    ref              text        NOT NULL,
    requester        text        NOT NULL,
    requester_tenant text        NOT NULL,
    on_behalf_of     text,
    scopes           text[]      NOT NULL,
    -- The ticket request body as sent (parentTicket included: re-checked when the ticket is collected).
    request          jsonb       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    decided_by       text,
    decided_at       timestamptz,
    collected_jti    text        REFERENCES tickets (jti),
    FOREIGN KEY (tenant, agent_id, skill_id, version) REFERENCES capability_versions (tenant, agent_id, skill_id, version)
);
CREATE INDEX approvals_tenant ON approvals (tenant, created_at);
