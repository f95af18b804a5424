"""The one check of a URL a registrant gives (docs/api.md#endpoint-urls, contract section 19): a
heartbeat's `url` and every interface URL of a card are released to other tenants' routers, which
call them, so each must be a plain absolute http(s) URL of a host that is not this machine's
metadata service, an unspecified or a multicast address, nor (unless allowed) a loopback one.

Pure functions over strings (urllib.parse, ipaddress): no I/O, no DNS. A name is judged as
written; DNS answers are the caller's to distrust, the registry never resolves or fetches it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from urllib.parse import urlsplit

from registry.config import Settings

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")
# A host name as DNS spells it (ASCII letters, digits, hyphens, dots); international names in
# their punycode form. Anything else in a host (`%`, `_`, spaces, non-ASCII) is refused.
_HOST_NAME = re.compile(
    r"^(?=.{1,253}\.?$)([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$"
)
# Host names that always mean this machine (RFC 6761: `localhost` and every name under it).
_LOOPBACK_NAMES = ("localhost",)
# 0.0.0.0/8 is "this network": connecting to any of it reaches the local host on Linux.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def url_problem(url: str, *, allow_loopback: bool) -> str | None:
    """Why `url` may not be stored as an endpoint (None: it may)."""
    if not isinstance(url, str) or not url:
        return "must be a non-empty string"
    if len(url) > MAX_URL_LENGTH:
        return f"must be at most {MAX_URL_LENGTH} characters"
    if url != url.strip() or any(ch.isspace() for ch in url):
        return "must not contain blanks"
    for ch in url:
        # Cc: control characters; Cf: format characters, among them the bidi overrides and zero-widths.
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"must not contain control or bidi characters (U+{ord(ch):04X})"
    if "\\" in url:
        return "must not contain backslashes (UNC and Windows path forms are refused)"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme.lower() not in SCHEMES:
        return "must be an absolute http or https URL"
    if not url.lower().startswith(parts.scheme.lower() + "://") or not parts.netloc:
        return "must be an absolute http or https URL with a host"
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        return "must not contain user info (user:password@)"
    if port == 0:
        return "must not use port 0"
    host = parts.hostname or ""
    if not host:
        return "must name a host"
    return host_problem(host, bracketed=parts.netloc.lstrip().startswith("["), allow_loopback=allow_loopback)


def host_problem(host: str, *, bracketed: bool, allow_loopback: bool) -> str | None:
    """Why `host` (as urlsplit gives it: lower-cased, brackets removed) may not be an endpoint's."""
    try:
        address = _ip_address(host, bracketed=bracketed)
    except ValueError:  # numeric, but no parser agrees on which address: refused
        return "must name a host by a DNS name (punycode for international names) or an IP address"
    if address is None:
        if bracketed or not _HOST_NAME.match(host):
            return "must name a host by a DNS name (punycode for international names) or an IP address"
        name = host.rstrip(".").lower()
        if not allow_loopback and any(name == n or name.endswith("." + n) for n in _LOOPBACK_NAMES):
            return "must not be a loopback host (set CAPREG_ALLOW_LOOPBACK_URLS=1 to allow)"
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_link_local:
        return "must not be a link-local address (169.254.0.0/16, fe80::/10)"
    if address.is_unspecified or (address.version == 4 and address in _THIS_NETWORK):
        return "must not be an unspecified address (0.0.0.0, ::)"
    if address.is_multicast or (address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255")):
        return "must not be a multicast or broadcast address"
    if address.is_loopback and not allow_loopback:
        return "must not be a loopback address (set CAPREG_ALLOW_LOOPBACK_URLS=1 to allow)"
    return None


def _ip_address(host: str, *, bracketed: bool) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host spells, including the forms HTTP clients still accept for IPv4
    (`127.1`, `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`), which ipaddress alone does not parse."""
    if bracketed:
        try:
            return ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    # Only something that is not a DNS name (a last label of digits or hex) can be an inet_aton form.
    last = host.rstrip(".").rsplit(".", 1)[-1].lower()
    if last and (last.isdigit() or re.fullmatch(r"0x[0-9a-f]*", last)):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))
        except OSError:
            raise ValueError("a numeric host that is no IPv4 address") from None
    return None


def is_loopback_host(host: str) -> bool:
    """Whether capreg listening on `host` listens on a loopback address (the default of
    CAPREG_ALLOW_LOOPBACK_URLS)."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def registration_url_errors(registration, *, allow_loopback: bool) -> list[tuple[str, str]]:
    """(JSON pointer, reason) for every URL of a registration body that `url_problem` refuses:
    each interface (A2A 1.0 `supportedInterfaces`, 0.3 `url` and `additionalInterfaces`), and the
    card's provider, documentation and icon URLs, which public cards release to everyone."""
    candidates: list[tuple[str, object]] = [
        (f"/supportedInterfaces/{i}/url", interface.url)
        for i, interface in enumerate(registration.supported_interfaces)
    ]
    if registration.url is not None:
        candidates.append(("/url", registration.url))
    for i, entry in enumerate(registration.additional_interfaces):
        if isinstance(entry, dict) and "url" in entry:
            candidates.append((f"/additionalInterfaces/{i}/url", entry["url"]))
    if registration.provider is not None:
        candidates.append(("/provider/url", registration.provider.url))
    for pointer, value in (("/documentationUrl", registration.documentation_url), ("/iconUrl", registration.icon_url)):
        if value is not None:
            candidates.append((pointer, value))
    errors = []
    for pointer, value in candidates:
        problem = url_problem(value, allow_loopback=allow_loopback) if isinstance(value, str) else "must be a string"
        if problem is not None:
            errors.append((pointer, f"the URL {problem}"))
    return errors


def loopback_urls_allowed(settings: Settings) -> bool:
    """CAPREG_ALLOW_LOOPBACK_URLS, by default on exactly when capreg listens on a loopback address."""
    if settings.allow_loopback_urls is not None:
        return settings.allow_loopback_urls
    return is_loopback_host(settings.host)
