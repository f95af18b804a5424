"""`capreg card verify REF` and `capreg card sign FILE --key KEY.pem --kid KID --tenant T --agent-id A`
(docs/client.md#signed-cards).

`verify` fetches the agent's public card from CAPREG_URL and checks the registry's signature with
a2a-sdk's verifier against that registry's JWKS (registry.client.Registry.agent_card): exit 0 and a
line naming the key when it verifies, 1 when it does not. `sign` is for publishers and needs no
registry: it prints the registration body of FILE with a publisher signature (Ed25519 key: EdDSA,
P-256 key: ES256) over its RFC 8785 form without `signatures` bound to `--tenant` and `--agent-id`,
ready for `capreg register` with the same tenant and agent id.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from registry.cli.remote import run_http
from registry.client import CapregError, Registry
from registry.client.signing import sign_registration, signature_kids


def card_verify(registry: Registry, args: argparse.Namespace) -> int:
    try:
        card = registry.agent_card(args.ref, verify=True)
    except CapregError as error:
        if error.code != "invalid_signature":
            raise
        print(f"capreg card verify: {args.ref}: NOT verified: {error.message}", file=sys.stderr)
        return 1
    kids = ", ".join(signature_kids(card)) or "?"
    print(f"{args.ref}: card signed by the registry at {registry.base_url} (key {kids}), signature verified")
    if args.json:
        print(json.dumps(card, indent=2, ensure_ascii=False))
    return 0


def card_sign(args: argparse.Namespace, settings: object) -> int:
    try:
        body = Path(args.file).read_bytes()
        key = Path(args.key).read_bytes()
    except OSError as exc:
        print(f"capreg card sign: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        signed = sign_registration(body, key, args.kid, tenant=args.tenant, agent_id=args.agent_id)
    except (ValueError, TypeError) as exc:  # not JSON, no canonical form, not a usable private key
        print(f"capreg card sign: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(signed, indent=2, ensure_ascii=False))
    return 0


def add_card_commands(commands: argparse._SubParsersAction) -> None:
    card = commands.add_parser("card", help="signed cards: verify a served card, sign a registration")
    actions = card.add_subparsers(dest="card_command", required=True)
    verify = actions.add_parser("verify", help="check the registry's signature on REF's public card (CAPREG_URL)")
    verify.add_argument("ref", help="tenant/agentId (or a capability ref)")
    verify.add_argument("--json", action="store_true", help="also print the verified card")
    verify.set_defaults(run=run_http(card_verify))
    sign = actions.add_parser("sign", help="print FILE (a registration body) with a publisher signature")
    sign.add_argument("file")
    sign.add_argument("--key", required=True, help="PEM private key, Ed25519 or P-256 (PKCS#8 or traditional)")
    sign.add_argument("--kid", required=True, help="the key's kid among the tenant's publisher keys")
    # Bound into the signed bytes: the signature authorises this one agent, not any agent it is PUT to.
    sign.add_argument("--tenant", required=True, help="the tenant the signed body registers in")
    sign.add_argument("--agent-id", required=True, help="the agent id the signed body registers")
    sign.set_defaults(run=card_sign)
