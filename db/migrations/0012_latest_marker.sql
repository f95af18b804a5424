-- The latest marker (docs/api.md#ranked-search): which versions are, or may become by time alone,
-- the latest in-force version of their skill. Maintained by db.capabilities.refresh_latest, from
-- the one definition of "in force" and "latest" there; backfilled by the migration runner right
-- after this file (db.migrate), so the rule is not written a second time in SQL.
ALTER TABLE capability_versions ADD COLUMN latest boolean NOT NULL DEFAULT false;
ALTER TABLE capability_versions ADD COLUMN latest_until timestamptz;

-- Ranked search and ARD read matches among marked rows only; per-agent reads of marked rows.
CREATE INDEX capability_versions_latest_search ON capability_versions USING gin (search_vector)
    WITH (fastupdate = off) WHERE latest;
CREATE INDEX capability_versions_latest_agent ON capability_versions (tenant, agent_id, skill_id) WHERE latest;

-- ARD's list pages in identifier order: per tenant, agent ids bytewise (db.ard.identifier_page).
CREATE INDEX agents_identifier_order ON agents (tenant, agent_id COLLATE "C");
