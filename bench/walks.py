"""The walks of three requests (docs/architecture.md#three-walks-measured): which of capreg's modules a
registration, an offers call and a ticket mint pass through, counted by tracing one request of each.

    python -m bench.walks [--database-url URL] [--json]

For each request, every call into a function of capreg's own packages (`registry`, `auth`, `db`)
made in the request's task is seen (sys.setprofile; resumed coroutines are not new calls). A call
is an *entry* into its module when the nearest capreg frame below it is in another module (or
there is none: the door). `modules` counts the distinct modules entered, `entries` every entry,
`re-entries` the entries into a module that is already further down the stack (it called out and
is called back: a climb, as when a lower layer calls the one above it), `refusal entries` the
entries into the module that records refusals. Work done for the request in other tasks (the group-commit
writer, the audit sequencer) is not in the walk: the walk is the request's own path.

The script uses only the HTTP API and the app factory, so the same file measures an older checkout:
run it with that checkout first on the path (`cd old-checkout && python /path/to/bench/walks.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import sys
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGES = ("registry", "auth", "db")
REFUSAL_MODULES = ("registry.operations.refusals", "registry.core.refusals")
CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR, CO_GENERATOR = 0x80, 0x100, 0x200, 0x20
SUSPENDABLE = CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR | CO_GENERATOR


def own_module(frame: FrameType | None) -> str | None:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name if name.split(".", 1)[0] in PACKAGES else None


class Walk:
    """Entries into capreg's modules made in one task, while `on`."""

    def __init__(self) -> None:
        self.entries: Counter[str] = Counter()
        self.started: dict[int, FrameType] = {}
        self.re_entries: Counter[str] = Counter()
        self.task: asyncio.Task | None = None
        self.on = False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        module = own_module(frame)
        if module is None:
            return
        # A resumed coroutine or generator reports "call" again; only its first start is a call.
        # (Its frames are kept, so that no id is reused while the walk lasts.)
        if frame.f_code.co_flags & SUSPENDABLE:
            if id(frame) in self.started:
                return
            self.started[id(frame)] = frame
        try:
            if asyncio.current_task() is not self.task:
                return
        except RuntimeError:  # no running loop: a worker thread
            return
        below = frame.f_back
        while below is not None and own_module(below) is None:
            below = below.f_back
        if own_module(below) == module:
            return
        self.entries[module] += 1
        # A climb back: the module is already on the stack, further down (it called out, and what it
        # called calls into it again), as a layer calling the one above it would.
        deeper = below
        while deeper is not None:
            if own_module(deeper) == module:
                self.re_entries[module] += 1
                break
            deeper = deeper.f_back

    def summary(self) -> dict[str, Any]:
        return {
            "modules": len(self.entries),
            "entries_total": sum(self.entries.values()),
            "re_entries": sum(self.re_entries.values()),
            "refusal_entries": sum(self.entries[m] for m in REFUSAL_MODULES),
            "entries": dict(self.entries.most_common()),
            "re_entered": dict(self.re_entries.most_common()),
        }


@asynccontextmanager
async def running(database_url: str | None, home: Path):
    from registry.app import create_app
    from registry.config import Settings
    from registry.web.in_process import served_in_process

    # The access log's lines would mix with the report on stdout (a logger with a handler is left alone).
    logging.getLogger("capreg.access").addHandler(logging.NullHandler())
    logging.getLogger("capreg.access").propagate = False
    settings = Settings(database_url=database_url, home=home) if database_url else Settings(home=home)
    application = create_app(settings)
    async with served_in_process(application) as client:
        yield application, settings, client


def skill(skill_id: str, version: str, scopes: list[str], **fields: Any) -> dict:
    return {
        "id": skill_id,
        "name": skill_id,
        "description": f"{skill_id}: look up an invoice by its id",
        "tags": ["finance"],
        "version": version,
        "scopes": scopes,
        "sideEffect": "none",
        **fields,
    }


async def walks(database_url: str | None, home: Path) -> dict[str, dict]:
    from auth.tokens import mint_caller_token

    card = json.loads(
        (Path(__file__).resolve().parent.parent / "tests" / "examples" / "billing-agent.json").read_text()
    )
    tenant = "walk" + secrets.token_hex(3)
    async with running(database_url, home) as (application, settings, client):

        def bearer(sub: str, scopes: str, regions: list[str] | None = None) -> dict:
            fields: dict[str, Any] = {"regions": regions} if regions else {}
            token = mint_caller_token(
                application.state.registry.keyring,
                issuer=settings.issuer,
                audience=settings.audience,
                tenant=tenant,
                sub=sub,
                scopes=scopes.split(),
                **fields,
            )
            return {"Authorization": f"Bearer {token}"}

        publisher = bearer("billing-agent", "registry:publish")
        router = bearer("router", "registry:read invoice:read", ["eu"])
        body = {**card, "skills": [skill("invoice.lookup", "2.0.0", ["invoice:read"])]}
        first = await client.put(f"/v1/agents/{tenant}/billing-agent", json=body, headers=publisher)
        assert first.status_code == 201, first.text
        beat = await client.post(
            f"/v1/agents/{tenant}/billing-agent/heartbeat",
            json={"instanceId": "i-1", "url": "https://billing-1.acme.internal/a2a", "ttlSeconds": 300},
            headers=publisher,
        )
        assert beat.status_code == 200, beat.text
        # One warm-up of each, so that caches and first-use imports are not in the walk.
        await client.post("/v1/offers", json={"need": "look up an invoice", "region": "eu"}, headers=router)
        await client.post(
            "/v1/tickets",
            json={"audience": f"{tenant}/billing-agent", "skill": "invoice.lookup", "scopes": ["invoice:read"]},
            headers=router,
        )

        requests = {
            "registration": (
                "PUT",
                f"/v1/agents/{tenant}/billing-agent",
                {
                    **card,
                    "skills": [skill("invoice.lookup", "2.0.0", ["invoice:read"]), skill("invoice.list", "1.0.0", [])],
                },
                publisher,
                201,
            ),
            "offers": ("POST", "/v1/offers", {"need": "look up an invoice", "region": "eu"}, router, 200),
            "ticket_mint": (
                "POST",
                "/v1/tickets",
                {"audience": f"{tenant}/billing-agent", "skill": "invoice.lookup", "scopes": ["invoice:read"]},
                router,
                201,
            ),
            "ticket_mint_refused": (
                "POST",
                "/v1/tickets",
                {"audience": f"{tenant}/billing-agent", "skill": "invoice.lookup", "scopes": ["invoice:write"]},
                router,
                403,
            ),
        }
        found: dict[str, dict] = {}
        for name, (method, path, payload, headers, status) in requests.items():
            walk = Walk()
            walk.task = asyncio.current_task()
            sys.setprofile(walk.profile)
            walk.on = True
            try:
                answer = await client.request(method, path, json=payload, headers=headers)
            finally:
                walk.on = False
                sys.setprofile(None)
            assert answer.status_code == status, (name, answer.status_code, answer.text)
            found[name] = walk.summary()
        return found


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", help="a PostgreSQL database to use (default: embedded, under a temporary home)"
    )
    parser.add_argument("--json", action="store_true", help="print every module's entries as JSON")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="capreg-walks-"))
    found = asyncio.run(walks(args.database_url, home))
    if args.json:
        print(json.dumps(found, indent=2))
        return
    for name, walk in found.items():
        print(
            f"{name}: {walk['modules']} modules, {walk['entries_total']} entries, {walk['re_entries']} re-entries "
            f"({', '.join(walk['re_entered']) or 'none'}), {walk['refusal_entries']} refusal entries"
        )


if __name__ == "__main__":
    main()
