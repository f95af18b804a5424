"""CAPREG_PUBLISHER_DOMAINS, parsed and checked: each tenant's publisher domain for ARD
(registry.ard.names spells identifiers with them). Here, not in the ARD context, because the
settings read it at start-up and settings import no context. Pure: no I/O."""

from __future__ import annotations

import json
import re

from auth.identifiers import TENANT_PATTERN

# Where default domains live (RFC 2606's reserved `.invalid`): no configured domain may be under it.
DEFAULT_SUFFIX = ".capreg.invalid"
# One DNS label (RFC 1035, lowercase): registry.ard.names spells default domains with it.
DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
FQDN = re.compile(rf"^{DNS_LABEL}(?:\.{DNS_LABEL})+$")
_TENANT = re.compile(TENANT_PATTERN)


class PublisherDomainError(ValueError):
    """CAPREG_PUBLISHER_DOMAINS is not what it must be (the message says what and where)."""


def parse_publisher_domains(raw: str) -> dict[str, str]:
    """CAPREG_PUBLISHER_DOMAINS: a JSON object tenant -> lowercase FQDN. Every tenant a valid tenant
    name, every domain a lowercase FQDN of at least two labels, no domain named twice, none under
    `capreg.invalid` (where default domains live)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise PublisherDomainError(f"CAPREG_PUBLISHER_DOMAINS is not valid JSON: {exc}") from None
    return check_publisher_domains(value)


def check_publisher_domains(value: object) -> dict[str, str]:
    """The checks of parse_publisher_domains on a decoded value (settings given in code are
    checked at start-up too)."""
    if not isinstance(value, dict):
        raise PublisherDomainError("CAPREG_PUBLISHER_DOMAINS must be a JSON object of tenant -> domain")
    owners: dict[str, str] = {}
    for tenant, domain in value.items():
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            raise PublisherDomainError(f"CAPREG_PUBLISHER_DOMAINS: {tenant[:80]!r} is not a tenant name")
        if not isinstance(domain, str) or len(domain) > 253 or not FQDN.fullmatch(domain):
            raise PublisherDomainError(
                f"CAPREG_PUBLISHER_DOMAINS: the domain of tenant {tenant!r} must be a lowercase FQDN such as 'acme.example'"
            )
        if domain == DEFAULT_SUFFIX[1:] or domain.endswith(DEFAULT_SUFFIX):
            raise PublisherDomainError(
                f"CAPREG_PUBLISHER_DOMAINS: {domain!r} (tenant {tenant!r}) is under capreg.invalid, reserved for default domains"
            )
        if domain in owners:
            raise PublisherDomainError(
                f"CAPREG_PUBLISHER_DOMAINS: {domain!r} is named for both {owners[domain]!r} and {tenant!r}"
            )
        owners[domain] = tenant
    return dict(value)
