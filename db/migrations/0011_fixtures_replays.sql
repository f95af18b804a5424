-- Behaviour fixtures and the replay gate (docs/api.md#behaviour-fixtures-and-the-replay-gate).
-- A version whose baseline carries fixtures is stored as a `candidate` until a replay report passes.
ALTER TABLE capability_versions DROP CONSTRAINT capability_versions_status_check;
ALTER TABLE capability_versions ADD CONSTRAINT capability_versions_status_check
    CHECK (status IN ('active', 'deprecated', 'retired', 'candidate'));
-- Fixtures are content of the version (part of content_hash). They are read only when a version is
-- released or judged, never by discovery: the count says whether there is anything to read.
ALTER TABLE capability_versions ADD COLUMN fixtures jsonb NOT NULL DEFAULT '[]';
ALTER TABLE capability_versions ADD COLUMN fixture_count smallint NOT NULL DEFAULT 0;
-- A candidate's compatibility baseline, the version whose fixtures judge it.
ALTER TABLE capability_versions ADD COLUMN baseline text;

-- Every judged replay report of a candidate, newest read first.
CREATE TABLE capability_replays (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        text        NOT NULL,
    agent_id      text        NOT NULL,
    skill_id      text        NOT NULL,
    version       text        NOT NULL,
    baseline      text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL,
    actor_issuer  text,
    instance      text,
    verdict       text        NOT NULL CHECK (verdict IN ('passed', 'failed')),
    errors        jsonb       NOT NULL DEFAULT '[]',
    FOREIGN KEY (tenant, agent_id, skill_id, version)
        REFERENCES capability_versions (tenant, agent_id, skill_id, version)
);
CREATE INDEX capability_replays_version ON capability_replays (tenant, agent_id, skill_id, version, id DESC);
