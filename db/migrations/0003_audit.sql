-- capreg schema, version 3: audit queries (skill, type and actor indexes) and signed checkpoints of
-- the audit chain head. (The production role set-up is documented in README.md, not migrated.)

-- The capability id inside an audit ref: 'tenant/agent/skill@version' -> 'skill';
-- NULL for agent refs ('tenant/agent') and events without a ref. Immutable, so indexable.
CREATE FUNCTION audit_ref_skill(ref text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(split_part(split_part(ref, '/', 3), '@', 1), '') $$;

-- An auditor sees events whose record tenant or actor tenant is theirs: every filter the audit API
-- offers has an index per tenant column, ending in seq for keyset pagination.
CREATE INDEX audit_events_tenant_skill ON audit_events (tenant, audit_ref_skill(ref), seq);
CREATE INDEX audit_events_actor_tenant_skill ON audit_events (actor_tenant, audit_ref_skill(ref), seq);
CREATE INDEX audit_events_tenant_type ON audit_events (tenant, type, seq);
CREATE INDEX audit_events_actor_tenant_type ON audit_events (actor_tenant, type, seq);
CREATE INDEX audit_events_actor ON audit_events (actor_tenant, actor, seq);

-- Signed checkpoints: the chain head (seq, hash) at a moment, signed with capreg's key as a compact
-- JWS (registry/checkpoints.py). One per (seq, key): a new one is written when the head moved or the
-- signing key changed. Append-only, like the log it vouches for.
CREATE TABLE audit_checkpoints (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    seq        bigint      NOT NULL,
    hash       text        NOT NULL,
    at         timestamptz NOT NULL,
    kid        text        NOT NULL,
    signature  text        NOT NULL,
    UNIQUE (seq, kid)
);
CREATE INDEX audit_checkpoints_latest ON audit_checkpoints (seq DESC, id DESC);

CREATE FUNCTION audit_checkpoints_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_checkpoints is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_checkpoints_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_checkpoints_append_only();
ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_update;
ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_truncate;
