"""External identity providers (CAPREG_TRUSTED_ISSUERS): their key sets, by issuer and kid."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import jwt

from auth.tokens import IssuerKeys
from registry.config import TrustedIssuer

log = logging.getLogger("capreg.auth")


def keys_from_jwks(document: dict) -> dict[str, object]:
    """Public keys of a JWKS document by kid; keys without a kid cannot be selected and are skipped."""
    keys = {}
    for jwk in document.get("keys", []):
        kid = jwk.get("kid")
        if not isinstance(kid, str) or "d" in jwk:  # never accept private key material as a verifier
            continue
        try:
            keys[kid] = jwt.PyJWK.from_dict(jwk).key
        except jwt.PyJWTError as exc:
            log.warning("skipping JWK %s: %s", kid, exc)
    return keys


def load_external_issuers(trusted: list[TrustedIssuer]) -> dict[str, IssuerKeys]:
    """Fetch every trusted issuer's JWKS once at start-up (file or URL)."""
    loaded = {}
    for issuer in trusted:
        if issuer.jwks_file:
            document = json.loads(Path(issuer.jwks_file).read_text())
        else:
            response = httpx.get(issuer.jwks_url, timeout=10)
            response.raise_for_status()
            document = response.json()
        loaded[issuer.issuer] = IssuerKeys(
            issuer=issuer.issuer, keys=keys_from_jwks(document), algorithms=list(issuer.algorithms)
        )
    return loaded
