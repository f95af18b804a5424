"""The shapes of the names capreg decides on: tenants, agent ids and skill ids (docs/api.md#agents).

Anchored patterns (msgspec's `Meta(pattern=...)` is unanchored otherwise), shared by the wire types
in `registry.core.records`, path parameters, and the pure checks of `auth.policy`.
"""

AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
SKILL_ID_PATTERN = r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$"
TENANT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
