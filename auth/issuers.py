"""External identity providers (CAPREG_TRUSTED_ISSUERS): their key sets by issuer and kid, the
tenants each may speak for, and re-reading those key sets without a restart.

A `jwksFile` is re-read when it changes (checked every couple of seconds, and at once when a token
names a kid the set lacks). A `jwksUrl` is fetched again when its `Cache-Control: max-age` runs out,
but never sooner than 30 s after the previous fetch and never later than 60 s, so a key removed from
the set stops verifying within 60 s; a token naming an unknown kid triggers a fetch at most once per
30 s per issuer. A failed re-read keeps the previous keys and is retried (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from pathlib import Path

import httpx
import jwt
import msgspec

from auth.tokens import IssuerKeys


class TrustedIssuer(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """An external identity provider whose tokens capreg accepts (CAPREG_TRUSTED_ISSUERS)."""

    issuer: str
    # The tenants this issuer may speak for; ["*"] (written out) for any. Required.
    tenants: list[str]
    jwks_url: str | None = None
    jwks_file: str | None = None
    algorithms: list[str] = msgspec.field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])


log = logging.getLogger("capreg.auth")

FILE_CHECK_SECONDS = 2.0
URL_MIN_SECONDS = 30.0
URL_MAX_SECONDS = 60.0
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d+)", re.IGNORECASE)


def keys_from_jwks(document: dict) -> dict[str, object]:
    """Public keys of a JWKS document by kid; keys without a kid cannot be selected and are skipped."""
    keys = {}
    entries = document.get("keys", []) if isinstance(document, dict) else []
    for jwk in entries if isinstance(entries, list) else []:
        if not isinstance(jwk, dict):
            continue
        kid = jwk.get("kid")
        if not isinstance(kid, str) or "d" in jwk:  # never accept private key material as a verifier
            continue
        try:
            keys[kid] = jwt.PyJWK.from_dict(jwk).key
        except jwt.PyJWTError as exc:
            log.warning("skipping JWK %s: %s", kid, exc)
    return keys


def issuer_keys(trusted: TrustedIssuer, document: dict) -> IssuerKeys:
    return IssuerKeys(
        issuer=trusted.issuer,
        keys=keys_from_jwks(document),
        algorithms=list(trusted.algorithms),
        tenants=frozenset(trusted.tenants),
    )


def url_refetch_after(cache_control: str | None) -> float:
    """Seconds until a fetched JWKS is fetched again: its max-age, within [30 s, 60 s]."""
    match = _MAX_AGE.search(cache_control or "")
    max_age = float(match.group(1)) if match else URL_MAX_SECONDS
    return min(max(max_age, URL_MIN_SECONDS), URL_MAX_SECONDS)


def _file_stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def load_external_issuers(trusted: list[TrustedIssuer]) -> dict[str, IssuerKeys]:
    """Every trusted issuer's key set, read once at start-up (file or URL); a failure stops start-up."""
    loaded = {}
    for issuer in trusted:
        if issuer.jwks_file:
            document = json.loads(Path(issuer.jwks_file).read_text())
        else:
            assert issuer.jwks_url is not None  # registry.config.trusted_issuers requires exactly one source
            response = httpx.get(issuer.jwks_url, timeout=10)
            response.raise_for_status()
            document = response.json()
        loaded[issuer.issuer] = issuer_keys(issuer, document)
    return loaded


class IssuerKeyRefresher:
    """Keeps `keysets` (the verifier's issuer -> IssuerKeys map) current. One per process."""

    def __init__(self, trusted: list[TrustedIssuer], keysets: dict[str, IssuerKeys], *, clock=time.monotonic):
        self.trusted = {t.issuer: t for t in trusted}
        self.keysets = keysets
        self.clock = clock
        now = clock()
        self._file_stamps = {t.issuer: _file_stamp(t.jwks_file) for t in trusted if t.jwks_file}
        self._next_fetch = {t.issuer: now + URL_MAX_SECONDS for t in trusted if t.jwks_url}
        self._last_fetch = {t.issuer: now for t in trusted if t.jwks_url}
        self._locks = {t.issuer: asyncio.Lock() for t in trusted}

    async def _reread(self, trusted: TrustedIssuer) -> None:
        if trusted.jwks_file:
            stamp = _file_stamp(trusted.jwks_file)
            if stamp is None or stamp == self._file_stamps.get(trusted.issuer):
                return
            text = await asyncio.to_thread(Path(trusted.jwks_file).read_text)
            self.keysets[trusted.issuer] = issuer_keys(trusted, json.loads(text))
            self._file_stamps[trusted.issuer] = stamp
            log.info("re-read the key set of %s from %s", trusted.issuer, trusted.jwks_file)
            return
        self._last_fetch[trusted.issuer] = self.clock()
        self._next_fetch[trusted.issuer] = self.clock() + URL_MIN_SECONDS  # on failure: retry then
        assert trusted.jwks_url is not None  # registry.config.trusted_issuers requires exactly one source
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(trusted.jwks_url)
        response.raise_for_status()
        self.keysets[trusted.issuer] = issuer_keys(trusted, response.json())
        self._next_fetch[trusted.issuer] = self.clock() + url_refetch_after(response.headers.get("cache-control"))

    async def refresh(self, issuer: str) -> None:
        trusted = self.trusted[issuer]
        async with self._locks[issuer]:
            try:
                await self._reread(trusted)
            except Exception as exc:  # keep the previous keys; try again later
                log.warning("could not re-read the key set of %s: %r", issuer, exc)

    async def unknown_kid(self, issuer: str) -> None:
        """A token named a kid the issuer's set lacks: re-read now (a URL at most once per 30 s)."""
        if issuer not in self.trusted:
            return
        if self.trusted[issuer].jwks_url and self.clock() - self._last_fetch[issuer] < URL_MIN_SECONDS:
            return
        await self.refresh(issuer)

    async def refresh_due(self) -> None:
        now = self.clock()
        for issuer, trusted in self.trusted.items():
            if trusted.jwks_file or now >= self._next_fetch[issuer]:
                await self.refresh(issuer)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.refresh_due()
            await asyncio.sleep(FILE_CHECK_SECONDS)
