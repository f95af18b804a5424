"""ARD names (docs/api.md#ard): tenants' publisher domains and the `urn:air:{publisher}:{agentId}`
identifiers of ARD catalog entries, both ways. Pure: no I/O.

A tenant's publisher domain is its `CAPREG_PUBLISHER_DOMAINS` entry, else `{tenant}.capreg.invalid`
(RFC 2606: an honest "not verified"). Tenant names may hold characters no DNS label may (`_`, an
empty label between two dots, a 64-character label), so such a tenant's default domain spells the
tenant in hex behind the reserved label prefix `xq--` (`xq--615f62.capreg.invalid` for `a_b`);
tenants whose own name starts with `xq--` are spelled that way too (the digits split into labels of
at most 63 characters), so every domain names at most
one tenant and a lookup can never land on another tenant's agent. db/ard.py spells the same
function in SQL (`publisher_sql`); tests check that the two agree.
"""

from __future__ import annotations

import re

import msgspec

from auth.identifiers import AGENT_ID_PATTERN, TENANT_PATTERN
from registry.core.publisher_domains import DEFAULT_SUFFIX, DNS_LABEL, FQDN

ENCODED_PREFIX = "xq--"
URN_PREFIX = "urn:air:"
# Longer identifiers are not ours (publisher ≤ 253, agent id ≤ 64); refused unread.
URN_MAX_LENGTH = 400

_DNS_NAME = re.compile(rf"^{DNS_LABEL}(?:\.{DNS_LABEL})*$")
_TENANT = re.compile(TENANT_PATTERN)
_AGENT_ID = re.compile(AGENT_ID_PATTERN)
_HEX = re.compile(r"^(?:[0-9a-f]{2})+$")


def default_domain(tenant: str) -> str:
    """`{tenant}.capreg.invalid`, or the hex spelling for a tenant that is no DNS name (module doc)."""
    if _DNS_NAME.fullmatch(tenant) and not tenant.startswith(ENCODED_PREFIX):
        return tenant + DEFAULT_SUFFIX
    digits = tenant.encode().hex()  # at most 128 digits: tenant names are at most 64 ASCII characters
    labels = [ENCODED_PREFIX + digits[:58], digits[58:120], digits[120:]]  # DNS labels stay within 63
    return ".".join(label for label in labels if label) + DEFAULT_SUFFIX


class Publishers(msgspec.Struct, frozen=True):
    """Publisher domains of this registry's tenants, both ways."""

    configured: dict[str, str]  # tenant -> domain

    def domain_of(self, tenant: str) -> str:
        return self.configured.get(tenant) or default_domain(tenant)

    def is_configured(self, tenant: str) -> bool:
        return tenant in self.configured

    def tenant_of(self, domain: str) -> str | None:
        """The one tenant whose publisher domain is `domain`, or None."""
        domain = domain.lower()
        for tenant, configured in self.configured.items():
            if configured == domain:
                return tenant
        if not domain.endswith(DEFAULT_SUFFIX):
            return None
        spelled = domain[: -len(DEFAULT_SUFFIX)]
        if spelled.startswith(ENCODED_PREFIX):
            digits = spelled[len(ENCODED_PREFIX) :].replace(".", "")
            if not _HEX.fullmatch(digits):
                return None
            try:
                tenant = bytes.fromhex(digits).decode()
            except UnicodeDecodeError:
                return None
        else:
            tenant = spelled
        # Only the canonical spelling of an unconfigured tenant names it.
        if not _TENANT.fullmatch(tenant) or tenant in self.configured or default_domain(tenant) != domain:
            return None
        return tenant


class AgentUrn(msgspec.Struct, frozen=True):
    publisher: str
    agent_id: str


def agent_urn(publisher: str, agent_id: str) -> str:
    return f"{URN_PREFIX}{publisher}:{agent_id}"


def parse_agent_urn(text: str) -> AgentUrn | None:
    """`urn:air:{publisher}:{agentId}` in its parts (the NID and the domain case-insensitively, as
    RFC 8141 and DNS compare them), or None when `text` is not one capreg could have issued."""
    if len(text) > URN_MAX_LENGTH or text[: len(URN_PREFIX)].lower() != URN_PREFIX:
        return None
    parts = text[len(URN_PREFIX) :].split(":")
    if len(parts) != 2:
        return None
    publisher, agent_id = parts[0].lower(), parts[1]
    if len(publisher) > 253 or not FQDN.fullmatch(publisher) or not _AGENT_ID.fullmatch(agent_id):
        return None
    return AgentUrn(publisher=publisher, agent_id=agent_id)
