-- Discovery indexes (issue 7: performance).
-- versions=all pages walk (tenant, agent, skill, precedence) without the prerelease split that
-- capability_versions_order (used by versions=latest) has, so a first page reads a few index
-- entries instead of sorting every visible version.
CREATE INDEX capability_versions_all_order ON capability_versions (tenant, agent_id, skill_id, version_key DESC);
-- The response cache bounds an entry by the next moment a version becomes effective.
CREATE INDEX capability_versions_effective_at ON capability_versions (effective_at) WHERE effective_at IS NOT NULL;
