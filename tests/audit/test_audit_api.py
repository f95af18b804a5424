"""GET /v1/audit/events (filters, pagination, NDJSON export, tenant isolation) and signed checkpoints
(GET /v1/audit/checkpoints/latest, verified with nothing but the JWKS; `capreg audit checkpoint`)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import jwt
import msgspec
import pytest

from db.audit import enqueue_events, hash_at
from db.audit_events import AuditEvent, AuditRecord, record_hash
from registry.audit.checkpoints import Checkpoint, CheckpointInvalid, jwks_keys, verify_checkpoint
from tests.audit_support import capreg_cli
from tests.conftest import example
from tests.ticket_support import register_finance, ticket_body

BILLING = example("billing-agent.json")
DOCS = Path(__file__).parents[2] / "docs" / "audit.md"
FIELDS = {
    "seq",
    "at",
    "tenant",
    "actorTenant",
    "type",
    "actor",
    "onBehalfOf",
    "ref",
    "scopes",
    "outcome",
    "reason",
    "traceId",
    "hash",
    "prevHash",
    "actorIssuer",
    "requestId",
    "chain",
    "chainSeq",
    "eventId",
}


async def register(client, mint, tenant: str, agent_id: str = "billing-agent", body: dict | None = None) -> None:
    response = await client.put(
        f"/v1/agents/{tenant}/{agent_id}",
        json=body or BILLING,
        headers=mint(tenant, "billing-agent", "registry:publish"),
    )
    assert response.status_code in (200, 201), response.text


async def events(client, headers, **params) -> list[dict]:
    response = await client.get("/v1/audit/events", params={"limit": 1000, **params}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_auditor_sees_own_tenant_events_with_every_field(client, mint, tenant):
    await register(client, mint, tenant)
    auditor = mint(tenant, "sec-team", "audit:read")
    response = await client.get("/v1/audit/events", headers=auditor)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"items", "nextCursor"} and body["nextCursor"] is None
    items = body["items"]
    assert [i["type"] for i in items] == ["agent.registered", "version.published", "version.published"]
    for item in items:
        assert set(item) == FIELDS
        assert item["tenant"] == tenant and item["actorTenant"] == tenant and item["actor"] == "billing-agent"
        assert item["outcome"] == "allowed" and len(item["hash"]) == 64 and len(item["prevHash"]) == 64
        assert datetime.fromisoformat(item["at"]).tzinfo is not None
        # The hash covers exactly the fields shown: recomputing it from them gives it back.
        assert record_hash(msgspec.convert(item, AuditRecord)) == item["hash"]
    assert [i["seq"] for i in items] == sorted(i["seq"] for i in items)
    # The tenant's own chain (docs/audit.md#chains): gap-free from 1, each entry linked to the one before.
    assert [i["chain"] for i in items] == [tenant] * 3 and [i["chainSeq"] for i in items] == [1, 2, 3]
    assert [i["prevHash"] for i in items[1:]] == [i["hash"] for i in items[:-1]]
    published = [i for i in items if i["type"] == "version.published"]
    assert {i["ref"] for i in published} == {
        f"{tenant}/billing-agent/invoice.lookup@2.0.0",
        f"{tenant}/billing-agent/invoice.mark-paid@1.1.0",
    }
    assert next(i for i in published if "invoice.lookup" in i["ref"])["scopes"] == ["invoice:read"]


async def test_audit_needs_audit_read_and_shows_only_own_tenant(client, mint, tenant, other_tenant):
    await register(client, mint, tenant)
    no_scope = await client.get("/v1/audit/events", headers=mint(tenant, "dev", "registry:read registry:admin"))
    assert no_scope.status_code == 403 and no_scope.json()["code"] == "insufficient_scope"
    assert no_scope.json()["missingScopes"] == ["audit:read"]
    anonymous = await client.get("/v1/audit/events")
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "invalid_token"
    assert (await client.get("/v1/audit/grants")).status_code == 401

    stranger = await events(client, mint(other_tenant, "sec-team", "audit:read"))
    assert all(other_tenant in (i["tenant"], i["actorTenant"]) for i in stranger)
    assert not any(tenant in (i["tenant"], i["actorTenant"]) for i in stranger)


async def test_events_of_the_tenants_callers_on_other_tenants_records_are_visible_to_both(
    client, mint, tenant, other_tenant, db
):
    """`tenant` is the record's tenant, `actorTenant` the caller's: auditors of either see the event,
    each as the entry of their own chain (same eventId, at and content; docs/audit.md#chains)."""
    await register(client, mint, other_tenant)
    async with db.acquire() as conn, conn.transaction():
        await enqueue_events(  # as a batch stores it: chained after what was stored before (its registration)
            conn,
            [
                AuditEvent(
                    type="detail.denied",
                    outcome="denied",
                    tenant=other_tenant,
                    actor_tenant=tenant,
                    actor="router",
                    ref=f"{other_tenant}/ledger/ledger.post@1.0.0",
                    scopes=["ledger:write"],
                    reason="insufficient_scope",
                )
            ],
        )
    ours = await events(client, mint(tenant, "sec", "audit:read"), type="detail.denied")
    theirs = await events(client, mint(other_tenant, "sec", "audit:read"), type="detail.denied")
    assert len(ours) == len(theirs) == 1
    place = {"seq", "chain", "chainSeq", "prevHash", "hash"}
    assert {k: v for k, v in ours[0].items() if k not in place} == {
        k: v for k, v in theirs[0].items() if k not in place
    }
    assert ours[0]["chain"] == tenant and ours[0]["chainSeq"] == 1
    assert theirs[0]["chain"] == other_tenant and theirs[0]["chainSeq"] == 4  # after its registration's three
    assert ours[0]["reason"] == "insufficient_scope" and ours[0]["outcome"] == "denied"
    assert await events(client, mint("x" + tenant, "sec", "audit:read"), type="detail.denied") == []


async def test_a_tenant_named_by_a_caller_but_unknown_gets_no_chain(client, mint, tenant, db):
    """A caller naming any tenant in a path cannot make chains (each would be a leaf of every
    checkpoint): the refusal stays in the caller's own chain."""
    ghost = "ghost" + tenant
    async with db.acquire() as conn, conn.transaction():
        await enqueue_events(
            conn,
            [
                AuditEvent(
                    type="request.refused",
                    outcome="denied",
                    tenant=ghost,
                    actor_tenant=tenant,
                    actor="probe",
                    ref=f"GET /v1/agents/{ghost}/x",
                    reason="insufficient_scope",
                )
            ],
        )
    assert await db.fetchval("SELECT count(*) FROM audit_chain_heads WHERE chain = $1", ghost) == 0
    mine = await events(client, mint(tenant, "sec", "audit:read"))
    assert [e["chain"] for e in mine] == [tenant] * len(mine) and len(mine) >= 1


async def test_filters_by_type_actor_skill_scope_and_time(client, mint, tenant):
    await register(client, mint, tenant)
    auditor = mint(tenant, "sec-team", "audit:read")
    everything = await events(client, auditor)

    assert [i["type"] for i in await events(client, auditor, type="agent.registered")] == ["agent.registered"]
    lookups = await events(client, auditor, skill="invoice.lookup")
    assert [i["ref"] for i in lookups] == [f"{tenant}/billing-agent/invoice.lookup@2.0.0"]
    assert [i["ref"] for i in await events(client, auditor, scope="invoice:read")] == [lookups[0]["ref"]]
    assert await events(client, auditor, skill="invoice.lookup", type="agent.registered") == []

    assert await events(client, auditor, actor="billing-agent") == everything
    assert await events(client, auditor, actor=f"{tenant}/billing-agent") == everything
    assert await events(client, auditor, actor="someone-else") == []
    assert await events(client, auditor, actor=f"x{tenant}/billing-agent") == []

    first = datetime.fromisoformat(everything[0]["at"])
    since = (first - timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    until = (first + timedelta(minutes=5)).isoformat()
    assert await events(client, auditor, since=since, until=until) == everything
    assert await events(client, auditor, since=until) == []
    assert await events(client, auditor, until=since) == []
    # `until` is exclusive, `since` inclusive.
    assert await events(client, auditor, until=everything[0]["at"]) == []
    assert await events(client, auditor, since=everything[-1]["at"]) != []


@pytest.mark.parametrize(
    "params",
    [
        {"since": "yesterday"},
        {"since": "2026-01-01"},
        {"since": "2026-01-01T00:00:00"},
        {"until": "2026-13-01T00:00:00Z"},
        {"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        {"limit": "1001"},
        {"limit": "0"},
        {"cursor": "not-a-cursor"},
        {"skill": "Not A Skill!"},
    ],
)
async def test_bad_parameters_are_400(client, mint, tenant, params):
    response = await client.get("/v1/audit/events", params=params, headers=mint(tenant, "sec", "audit:read"))
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_request"


async def test_pages_walk_oldest_first_by_cursor(client, mint, tenant):
    for minor in range(3):
        body = copy.deepcopy(BILLING)
        body["skills"][0]["version"] = f"2.{minor}.0"
        await register(client, mint, tenant, body=body)
    auditor = mint(tenant, "sec", "audit:read")
    everything = await events(client, auditor)
    assert len(everything) == 1 + 2 + 2  # agent.registered, the two first versions, two minor versions

    walked, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/audit/events", params=params, headers=auditor)).json()
        walked += page["items"]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert walked == everything and pages == 3


async def test_ndjson_export_streams_the_whole_filtered_result(client, mint, tenant, other_tenant):
    await register(client, mint, tenant)
    await register(client, mint, other_tenant)
    auditor = mint(tenant, "sec", "audit:read")
    expected = await events(client, auditor)
    response = await client.get(
        "/v1/audit/events",
        params={"limit": 1, "cursor": "ignored"},
        headers={**auditor, "Accept": "application/x-ndjson"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = response.text.splitlines()
    assert [json.loads(line) for line in lines] == expected

    filtered = await client.get(
        "/v1/audit/events", params={"type": "version.published"}, headers={**auditor, "Accept": "application/x-ndjson"}
    )
    assert [json.loads(line)["type"] for line in filtered.text.splitlines()] == ["version.published"] * 2

    refused = await client.get(
        "/v1/audit/events", headers={**mint(tenant, "dev", "registry:read"), "Accept": "application/x-ndjson"}
    )
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"


async def _jwks(client) -> dict:
    return (await client.get("/.well-known/jwks.json")).json()


def verify_with_jwks_only(checkpoint: dict, jwks: dict) -> dict:
    """What docs/audit.md tells a security engineer to do, with plain PyJWT."""
    header = jwt.get_unverified_header(checkpoint["signature"])
    assert header["typ"] == "capreg-checkpoint+jwt" and header["alg"] == "EdDSA"
    key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
    claims = jwt.decode(checkpoint["signature"], jwt.PyJWK(key).key, algorithms=["EdDSA"])
    assert (claims["seq"], claims["hash"], claims["at"]) == (checkpoint["seq"], checkpoint["hash"], checkpoint["at"])
    return claims


async def test_latest_checkpoint_is_public_and_verifies_with_the_jwks(client, db):
    response = await client.get("/v1/audit/checkpoints/latest")
    assert response.status_code == 200, response.text
    checkpoint = response.json()
    assert set(checkpoint) == {"seq", "hash", "at", "signature", "kid", "root", "chains"}
    assert len(checkpoint["root"]) == 64 and checkpoint["chains"] >= 0
    verify_with_jwks_only(checkpoint, await _jwks(client))
    assert await hash_at(db, checkpoint["seq"]) == checkpoint["hash"]
    bad_token = await client.get("/v1/audit/checkpoints/latest", headers={"Authorization": "Bearer not.a.token"})
    assert bad_token.status_code == 401 and bad_token.json()["code"] == "invalid_token"


async def test_checkpoints_show_the_log_only_grew(client, mint, tenant, db, database_url, tmp_path):
    earlier = (await client.get("/v1/audit/checkpoints/latest")).json()
    await register(client, mint, tenant)

    # Off the loop: the in-process app's sequencer steps go on meanwhile (the CLI waits for its turn).
    made = await asyncio.to_thread(capreg_cli, database_url, "audit", "checkpoint", home=tmp_path)
    assert made.returncode == 0, made.stderr
    later = (await client.get("/v1/audit/checkpoints/latest")).json()
    assert later == json.loads(made.stdout)
    jwks = await _jwks(client)
    verify_with_jwks_only(later, jwks)
    assert later["seq"] > earlier["seq"]
    # The earlier head is still in the log, unchanged: the log grew, nothing was rewritten.
    assert await hash_at(db, earlier["seq"]) == earlier["hash"]

    kept = tmp_path / "earlier-checkpoint.json"
    kept.write_text(json.dumps(earlier))
    verified = await asyncio.to_thread(
        capreg_cli, database_url, "audit", "verify", "--checkpoint", str(kept), home=tmp_path
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout and str(earlier["seq"]) in verified.stdout


async def test_a_checkpoint_with_changed_fields_or_another_token_type_does_not_verify(client, mint, tenant):
    checkpoint = msgspec.convert((await client.get("/v1/audit/checkpoints/latest")).json(), Checkpoint)
    keys = jwks_keys(await _jwks(client))
    verify_checkpoint(checkpoint, keys)
    for forged in (
        msgspec.structs.replace(checkpoint, seq=checkpoint.seq + 1),
        msgspec.structs.replace(checkpoint, hash="0" * 64),
        msgspec.structs.replace(checkpoint, at="2000-01-01T00:00:00.000000Z"),
        msgspec.structs.replace(checkpoint, root="0" * 64),
        msgspec.structs.replace(checkpoint, chains=(checkpoint.chains or 0) + 1),
        msgspec.structs.replace(checkpoint, root=None, chains=None),
        # A caller token signed by the same key is not a checkpoint.
        msgspec.structs.replace(checkpoint, signature=mint(tenant, "x", "audit:read")["Authorization"].split()[1]),
    ):
        with pytest.raises(CheckpointInvalid):
            verify_checkpoint(forged, keys)


# ---------------------------------------------------------------------------
# GET /v1/audit/grants: live delegation grants, from the tickets the registry minted

ROUTER_SCOPES = "invoice:read invoice:list ledger:read"


async def mint_ticket(client, headers: dict, body: dict) -> dict:
    response = await client.post("/v1/tickets", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def delegation_chain(client, mint, tenant: str) -> tuple[dict, dict]:
    """router -> billing-agent (invoice lookup for user-19) -> ledger-agent (ledger read)."""
    await register_finance(client, mint, tenant)
    root = await mint_ticket(
        client,
        mint(tenant, "router", ROUTER_SCOPES),
        ticket_body(
            tenant,
            scopes=["invoice:read", "invoice:list"],
            resources=["invoice:inv-1"],
            onBehalfOf="user-19",
            ttlSeconds=600,
            maxDepth=1,
        ),
    )
    child = await mint_ticket(
        client,
        mint(tenant, "billing-agent"),
        ticket_body(
            tenant,
            "ledger-agent",
            "ledger.read",
            scopes=["invoice:read"],
            resources=["invoice:inv-1"],
            ttlSeconds=300,
            maxDepth=0,
            parentTicket=root["ticket"],
        ),
    )
    return root, child


async def grants(client, headers, **params) -> list[dict]:
    response = await client.get("/v1/audit/grants", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_grant_report_names_holder_chain_scopes_and_capability(client, mint, tenant):
    root, child = await delegation_chain(client, mint, tenant)
    auditor = mint(tenant, "sec", "audit:read")
    items = await grants(client, auditor)
    assert [g["jti"] for g in items] == [root["jti"], child["jti"]]
    first, second = items
    assert set(first) >= {
        "actor",
        "onBehalfOf",
        "audience",
        "ref",
        "scopes",
        "resources",
        "jti",
        "issuedAt",
        "expiresAt",
        "depth",
        "act",
    }
    assert first["actor"] == f"{tenant}/router" and first["onBehalfOf"] == "user-19"
    assert (
        first["audience"] == f"{tenant}/billing-agent"
        and first["ref"] == f"{tenant}/billing-agent/invoice.lookup@2.0.0"
    )
    assert sorted(first["scopes"]) == ["invoice:list", "invoice:read"] and first["resources"] == ["invoice:inv-1"]
    assert first["depth"] == 0 and first["act"] == {"sub": f"{tenant}/router"} and first["active"] is True
    assert datetime.fromisoformat(first["expiresAt"]) == datetime.fromisoformat(root["expiresAt"])
    # The re-delegated grant: held through the whole chain, on behalf of the same user.
    assert second["actor"] == f"{tenant}/billing-agent" and second["onBehalfOf"] == "user-19"
    assert second["depth"] == 1 and second["parent"] == root["jti"]
    assert second["act"] == {"sub": f"{tenant}/billing-agent", "act": {"sub": f"{tenant}/router"}}
    assert second["ref"] == f"{tenant}/ledger-agent/ledger.read@1.0.0" and second["scopes"] == ["invoice:read"]

    assert [g["jti"] for g in await grants(client, auditor, actor=f"{tenant}/router")] == [root["jti"]]
    assert [g["jti"] for g in await grants(client, auditor, actor="billing-agent")] == [child["jti"]]
    assert [g["jti"] for g in await grants(client, auditor, skill="ledger.read")] == [child["jti"]]
    assert [g["jti"] for g in await grants(client, auditor, scope="invoice:list")] == [root["jti"]]
    assert await grants(client, auditor, scope="ledger:write") == []

    page = (await client.get("/v1/audit/grants", params={"limit": 1}, headers=auditor)).json()
    rest = (
        await client.get("/v1/audit/grants", params={"limit": 1, "cursor": page["nextCursor"]}, headers=auditor)
    ).json()
    assert [g["jti"] for g in page["items"] + rest["items"]] == [root["jti"], child["jti"]] and rest[
        "nextCursor"
    ] is None


async def test_grant_report_needs_audit_read_in_the_tenant(client, mint, tenant, other_tenant):
    await delegation_chain(client, mint, tenant)
    refused = await client.get("/v1/audit/grants", headers=mint(tenant, "router", ROUTER_SCOPES))
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
    assert await grants(client, mint(other_tenant, "sec", "audit:read")) == []
    bad = await client.get("/v1/audit/grants", params={"cursor": "nope"}, headers=mint(tenant, "sec", "audit:read"))
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"


async def test_revoked_expired_and_retired_grants_leave_the_live_report(client, mint, tenant, db):
    root, child = await delegation_chain(client, mint, tenant)
    auditor = mint(tenant, "sec", "audit:read")

    # An ancestor revoked on its own (not through the API, which revokes descendants too) still ends the child.
    await db.execute("UPDATE tickets SET revoked_at = now() WHERE jti = $1", root["jti"])
    assert await grants(client, auditor) == []
    inactive = await grants(client, auditor, active="false")
    assert {g["jti"] for g in inactive} == {root["jti"], child["jti"]} and not any(g["active"] for g in inactive)

    # Retiring the capability ends the grants on it.
    second = await mint_ticket(client, mint(tenant, "router", ROUTER_SCOPES), ticket_body(tenant, ttlSeconds=600))
    assert [g["jti"] for g in await grants(client, auditor)] == [second["jti"]]
    retired = await client.post(
        f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0/retire",
        headers=mint(tenant, "admin", "registry:admin"),
    )
    assert retired.status_code == 200, retired.text
    assert await grants(client, auditor) == []

    # So does expiry.
    short = await mint_ticket(
        client, mint(tenant, "router", ROUTER_SCOPES), ticket_body(tenant, "ledger-agent", "ledger.read", ttlSeconds=1)
    )
    assert [g["jti"] for g in await grants(client, auditor)] == [short["jti"]]
    await asyncio.sleep(1.2)
    assert await grants(client, auditor) == []


def docs_python(marker: str) -> str:
    """The docs/audit.md ```python block containing `marker` (the test runs what the guide shows)."""
    for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL):
        if marker in block:
            return block
    raise AssertionError(f"no python block with {marker!r} in docs/audit.md")


def test_the_guides_checkpoint_snippet_verifies_a_real_servers_checkpoint(live_server):
    base, _, _ = live_server
    namespace: dict = {}
    exec(docs_python("def verified_checkpoint"), namespace)  # noqa: S102 - our own documentation
    checkpoint = namespace["verified_checkpoint"](base)
    assert checkpoint["seq"] >= 0 and len(checkpoint["hash"]) == 64
