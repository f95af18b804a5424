-- capreg schema, version 1: agents, capability versions, liveness, change feed, audit log, signing keys.

CREATE TABLE agents (
    tenant       text        NOT NULL,
    agent_id     text        NOT NULL,
    name         text        NOT NULL,
    description  text        NOT NULL,
    version      text        NOT NULL,
    provider     jsonb,
    visibility   text        NOT NULL CHECK (visibility IN ('public', 'tenant')),
    shared_with  text[]      NOT NULL DEFAULT '{}',
    -- The normalized A2A 1.0 card without registry fields; source of the agent's real interfaces.
    card         jsonb       NOT NULL,
    card_hash    text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, agent_id)
);

CREATE TABLE capability_versions (
    tenant              text        NOT NULL,
    agent_id            text        NOT NULL,
    skill_id            text        NOT NULL,
    version             text        NOT NULL,
    -- Bytewise-sortable semver precedence (registry.versions.Version.sort_key).
    version_key         text COLLATE "C" NOT NULL,
    prerelease          boolean     NOT NULL,
    name                text        NOT NULL,
    description         text        NOT NULL,
    tags                text[]      NOT NULL DEFAULT '{}',
    scopes              text[]      NOT NULL DEFAULT '{}',
    side_effect         text        NOT NULL CHECK (side_effect IN ('none', 'idempotent', 'write', 'destructive')),
    side_effect_rank    smallint    NOT NULL,
    requires_approval   boolean     NOT NULL,
    data_regions        text[]      NOT NULL DEFAULT '{}',
    slo                 jsonb,
    examples            jsonb       NOT NULL DEFAULT '[]',
    input_schema        jsonb       NOT NULL,
    output_schema       jsonb       NOT NULL,
    input_modes         text[]      NOT NULL DEFAULT '{}',
    output_modes        text[]      NOT NULL DEFAULT '{}',
    effective_at        timestamptz,
    status              text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deprecated', 'retired')),
    sunset_at           timestamptz,
    deprecation_message text,
    -- Hash of the published content: identical re-registration is a no-op, different content a conflict.
    content_hash        text        NOT NULL,
    -- Lower-cased id, name, description and tags for the `q` filter.
    search_text         text        NOT NULL,
    published_at        timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, agent_id, skill_id, version),
    FOREIGN KEY (tenant, agent_id) REFERENCES agents (tenant, agent_id)
);

-- Discovery walks capabilities in (tenant, agent, skill, precedence) order: keyset pagination and DISTINCT ON latest.
CREATE INDEX capability_versions_order ON capability_versions (tenant, agent_id, skill_id, prerelease, version_key DESC);
CREATE INDEX capability_versions_tags ON capability_versions USING gin (tags);

CREATE TABLE agent_instances (
    tenant       text        NOT NULL,
    agent_id     text        NOT NULL,
    instance_id  text        NOT NULL,
    url          text,
    expires_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, agent_id, instance_id),
    FOREIGN KEY (tenant, agent_id) REFERENCES agents (tenant, agent_id)
);

-- Change feed: one gap-free sequence; the single head row is advanced by every write in its own
-- transaction, so a reader that has seen seq N has seen every committed change up to N.
CREATE TABLE change_head (
    id  integer PRIMARY KEY CHECK (id = 1),
    seq bigint  NOT NULL
);
INSERT INTO change_head (id, seq) VALUES (1, 0);

CREATE TABLE changes (
    seq       bigint      PRIMARY KEY,
    kind      text        NOT NULL,
    tenant    text        NOT NULL,
    agent_id  text        NOT NULL,
    ref       text        NOT NULL,
    at        timestamptz NOT NULL
);

-- Audit log: append-only, hash-chained. seq is gap-free for the same reason as the change feed.
CREATE TABLE audit_head (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint  NOT NULL,
    hash text    NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, repeat('0', 64));

CREATE TABLE audit_events (
    seq           bigint      PRIMARY KEY,
    at            timestamptz NOT NULL,
    tenant        text,
    actor_tenant  text,
    type          text        NOT NULL,
    actor         text,
    on_behalf_of  text,
    ref           text,
    scopes        text[]      NOT NULL DEFAULT '{}',
    outcome       text        NOT NULL CHECK (outcome IN ('allowed', 'denied')),
    reason        text,
    trace_id      text,
    prev_hash     text        NOT NULL,
    hash          text        NOT NULL
);
CREATE INDEX audit_events_tenant ON audit_events (tenant, seq);
CREATE INDEX audit_events_actor_tenant ON audit_events (actor_tenant, seq);

CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
-- ALWAYS: the triggers also fire under session_replication_role = replica.
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_update;
ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate;

-- Signing keys live in the database so that every replica on it signs and verifies with the same keys.
CREATE TABLE signing_keys (
    kid           text        PRIMARY KEY,
    private_pem   text        NOT NULL,
    public_jwk    jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Set when a newer key became current; the key still verifies until publish_until.
    retired_at    timestamptz,
    publish_until timestamptz
);
