-- capreg schema, version 9: one audit chain per tenant (docs/audit.md, "Chains").
--
-- Events written before this migration stay as they are: the old single chain (chain, chain_seq and
-- event_id NULL), verifiable exactly as before up to audit_head, which is frozen here. Every later
-- event is an entry of a tenant's chain (an event of two tenants: one entry in each), and each
-- chain's first entry links to the old chain's head. Writes to different chains lock different head
-- rows, so they never wait for each other; seq comes from a sequence (no lock held to commit).

ALTER TABLE audit_events ADD COLUMN chain text;
ALTER TABLE audit_events ADD COLUMN chain_seq bigint;
ALTER TABLE audit_events ADD COLUMN event_id text;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_chain_entry
    CHECK ((chain IS NULL) = (chain_seq IS NULL) AND (chain IS NULL) = (event_id IS NULL));
-- A chain read in order (verification, remote export) and the gap-free position's uniqueness.
CREATE UNIQUE INDEX audit_events_chain_seq ON audit_events (chain, chain_seq) WHERE chain IS NOT NULL;

-- seq stays the cursor: unique, increasing within a chain (taken under the chain's head lock).
CREATE SEQUENCE audit_event_seq;
SELECT setval('audit_event_seq',
              greatest((SELECT seq FROM audit_head WHERE id = 1), (SELECT coalesce(max(seq), 0) FROM audit_events), 1),
              greatest((SELECT seq FROM audit_head WHERE id = 1), (SELECT coalesce(max(seq), 0) FROM audit_events)) > 0);

-- The head of each chain (chain_seq 0 and the old head's hash until its first entry).
CREATE TABLE audit_chain_heads (
    chain      text   PRIMARY KEY,
    chain_seq  bigint NOT NULL,
    seq        bigint NOT NULL,
    hash       text   NOT NULL
);

-- The old single chain ends here: its head is every chain's anchor and never moves again (a process
-- of an older version still running would fork it; it fails instead).
CREATE FUNCTION audit_head_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_head is frozen since migration 0009 (one chain per tenant): % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_head_no_update BEFORE UPDATE OR DELETE ON audit_head
    FOR EACH ROW EXECUTE FUNCTION audit_head_frozen();
ALTER TABLE audit_head ENABLE ALWAYS TRIGGER audit_head_no_update;

-- How far each chain was verified by GET /v1/audit/chain ('' is the old single chain), shared by
-- every worker and replica: each call checks only the entries after it.
CREATE TABLE audit_chain_verified (
    chain        text        PRIMARY KEY,
    chain_seq    bigint      NOT NULL,
    hash         text        NOT NULL,
    verified_at  timestamptz NOT NULL
);

-- Checkpoints sign the RFC 6962 root over every chain head, and keep the heads they cover (sorted
-- by chain) so that an inclusion proof can be computed for that exact tree. seq and hash are the
-- newest entry covered. One checkpoint per (root, key); older ones (root NULL) keep (seq, key).
ALTER TABLE audit_checkpoints ADD COLUMN root text;
ALTER TABLE audit_checkpoints ADD COLUMN chains bigint;
ALTER TABLE audit_checkpoints ADD COLUMN head_chains text[];
ALTER TABLE audit_checkpoints ADD COLUMN head_chain_seqs bigint[];
ALTER TABLE audit_checkpoints ADD COLUMN head_hashes text[];
ALTER TABLE audit_checkpoints DROP CONSTRAINT audit_checkpoints_seq_kid_key;
CREATE UNIQUE INDEX audit_checkpoints_seq_kid ON audit_checkpoints (seq, kid) WHERE root IS NULL;
CREATE UNIQUE INDEX audit_checkpoints_root_kid ON audit_checkpoints (root, kid) WHERE root IS NOT NULL;
