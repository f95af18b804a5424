"""Ranked `q` (docs/api.md#ranked-search) through the app: inflections, one typing error, stop words,
relevance order, cursors in that order, hostile text, and the pure parts (words, relevance). The
engine itself is tested in tests/search/test_engine.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.discovery import ranking
from tests.housekeeping_support import tick_now
from tests.search_support import CORPUS, agent, count_query_work, publish, skill


async def search(client, tenant: str, q: str, headers=None, **params) -> list[str]:
    response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q, **params}, headers=headers or {})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def test_inflections_match(client, mint, tenant):
    await publish(client, mint, tenant, CORPUS)
    for q in ("invoices", "invoicing", "INVOICE"):
        found = await search(client, tenant, q)
        assert {"invoice.lookup", "invoice.list"} <= set(found), (q, found)
    assert {"calendar.book", "travel.search"} <= set(await search(client, tenant, "booked"))
    assert "calendar.book" in await search(client, tenant, "booking")


async def test_one_typing_error_in_words_of_five_letters_or_more(client, mint, tenant):
    await publish(client, mint, tenant, CORPUS)
    assert {"invoice.lookup", "invoice.list"} <= set(await search(client, tenant, "invocie"))  # transposition
    assert "calendar.book" in await search(client, tenant, "calender")  # substitution
    assert "refund.issue" in await search(client, tenant, "refnd")  # deletion
    assert "refund.issue" in await search(client, tenant, "reefund")  # insertion
    assert await search(client, tenant, "invcie") == []  # two errors
    assert await search(client, tenant, "bok") == []  # under five letters: exact words only
    assert await search(client, tenant, "bokk") == []


async def test_stop_words_are_ignored(client, mint, tenant):
    await publish(client, mint, tenant, CORPUS)
    assert await search(client, tenant, "the of an and") == []
    # "a" and "the" do not count as words: the refund skills match both remaining words.
    assert (await search(client, tenant, "the status of a refund"))[0] == "refund.status"


async def test_relevance_order(client, mint, tenant):
    await publish(client, mint, tenant, CORPUS)
    # both words in the name beats one word; "refund status" is not "issue a refund".
    assert (await search(client, tenant, "refund status"))[:2] == ["refund.status", "refund.issue"]
    assert (await search(client, tenant, "issue a refund"))[:2] == ["refund.issue", "refund.status"]
    # a match in id, name or tags ranks above a match only in the description (report.sales).
    found = await search(client, tenant, "invoice")
    assert found[-1] == "report.sales" and set(found[:2]) == {"invoice.lookup", "invoice.list"}
    # ties by ref
    assert found[:2] == sorted(found[:2], key=lambda s: f"{tenant}/billing/{s}@1.0.0")
    # tags weigh like the name
    assert (await search(client, tenant, "scheduling"))[0] == "calendar.book"


async def test_cursor_pages_in_rank_order(client, mint, tenant):
    skills = [
        skill(f"s.n{i:02d}", f"Thing {i}", "widget" if i % 2 else "gadget", ["widget"] if i % 3 == 0 else [])
        for i in range(12)
    ]
    await publish(client, mint, tenant, {"many": agent(*skills)})
    whole = await search(client, tenant, "widget gadget", limit=200)
    seen, cursor = [], None
    while True:
        params = {"tenant": tenant, "q": "widget gadget", "limit": 5, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/capabilities", params=params)).json()
        seen += [i["id"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == whole and len(seen) == 12
    # tagged "widget" and described "gadget" (i % 3 == 0, i even) first: two words, one in the tags
    assert set(whole[:2]) == {"s.n00", "s.n06"}
    # an unranked cursor is not a ranked one, nor the reverse
    unranked = (await client.get("/v1/capabilities", params={"tenant": tenant, "limit": 2})).json()["nextCursor"]
    assert (
        await client.get("/v1/capabilities", params={"tenant": tenant, "q": "widget", "cursor": unranked})
    ).status_code == 400
    ranked = (await client.get("/v1/capabilities", params={"tenant": tenant, "q": "widget", "limit": 2})).json()[
        "nextCursor"
    ]
    assert (await client.get("/v1/capabilities", params={"tenant": tenant, "cursor": ranked})).status_code == 400
    forged = ranking.encode_cursor(["ranked", 10**12, "x"])
    assert (
        await client.get("/v1/capabilities", params={"tenant": tenant, "q": "widget", "cursor": forged})
    ).status_code == 400


async def test_without_q_the_order_is_unchanged(client, mint, tenant):
    await publish(client, mint, tenant, CORPUS)
    response = await client.get("/v1/capabilities", params={"tenant": tenant})
    refs = [i["ref"] for i in response.json()["items"]]
    assert refs == sorted(refs, key=lambda r: tuple(r.split("@")[0].split("/")))


async def test_ranked_search_keeps_visibility_and_filters(client, mint, tenant, other_tenant):
    await publish(
        client,
        mint,
        tenant,
        {
            **CORPUS,
            "private": agent(
                skill("invoice.secret", "Secret invoice", "hidden"), visibility="tenant", sharedWith=[other_tenant]
            ),
        },
    )
    assert "invoice.secret" not in await search(client, tenant, "invoice")
    assert "invoice.secret" not in await search(client, tenant, "invoice", mint("x" + tenant, "r", "registry:read"))
    assert "invoice.secret" in await search(client, tenant, "invoice", mint(other_tenant, "r", "registry:read"))
    assert "invoice.secret" in await search(client, tenant, "invoice", mint(tenant, "r", "registry:read"))
    assert await search(client, tenant, "invoice", skill="invoice.list") == ["invoice.list"]
    assert sorted(await search(client, tenant, "refund", tag="payments", agent="refunds")) == [
        "refund.issue",
        "refund.status",
    ]
    assert await search(client, tenant, "refund", agent="billing") == []


async def test_latest_version_only_if_it_matches(client, mint, tenant):
    old = skill("doc.find", "Find receipts", "old wording", version="1.0.0")
    new = skill("doc.find", "Find documents", "new wording", version="1.1.0")
    await publish(client, mint, tenant, {"d": agent(old, new)})
    assert await search(client, tenant, "receipts") == []
    assert await search(client, tenant, "receipts", versions="all") == ["doc.find"]
    assert await search(client, tenant, "documents") == ["doc.find"]


HOSTILE = [
    "invoice & | ! ( ) : * refund",
    "!!!",
    "&|!():*" * 73,
    "'; DROP TABLE agents; --",
    "invoice:*",
    "a:b",
    "(",
    "x" * 500,
    "invoice " + "y" * 500,
    "<-> <1> !invoice",
    "\\",
    "日本語 invoice",
    "½ ² ⅷ",
    "\u0000",
    "AND OR NOT",
    "invoice~2 refund^3",
    '"look up" +invoice -refund',
    "title:invoice",
    "发送消息 to 团队",
    "a" * 250 + " " + "b" * 250,
]


async def test_hostile_q_is_plain_text(client, mint, tenant, monkeypatch):
    await publish(client, mint, tenant, CORPUS)
    work = count_query_work(monkeypatch)
    for q in HOSTILE:
        response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q})
        assert work.bounded(), (q, work.proposals, work.checked_pages)
        assert response.status_code in (200, 400), (q, response.text)
        if "\x00" in q:
            assert response.status_code == 400 and response.json()["code"] == "invalid_request"
        else:
            assert response.status_code == 200, (q, response.text)
    assert work.proposals and work.checked_pages, "the counters saw no ranked question"
    assert set(await search(client, tenant, "invoice & | ! ( ) : * refund")) >= {"invoice.lookup", "refund.issue"}
    assert (await client.get("/v1/capabilities", params={"q": "a" * 512})).status_code == 200
    too_long = await client.get("/v1/capabilities", params={"q": "a" * 513})
    assert too_long.status_code == 400 and too_long.json()["code"] == "invalid_request"


async def test_new_words_are_found_at_once_even_misspelt(client, mint, tenant):
    """A registration's words reach this process's engine before its answer does (read your writes)."""
    await publish(client, mint, tenant, {"z": agent(skill("zebra.count", "Count zebras", "Counts striped horses"))})
    assert await search(client, tenant, "zebras") == ["zebra.count"]
    assert await search(client, tenant, "stripde") == ["zebra.count"]


# --- pure parts ------------------------------------------------------------------------------------


def test_query_words_are_letters_and_digits_only():
    assert ranking.query_words("Invoice & |(refund):* v2 invoice") == ["invoice", "refund", "v2"]
    assert ranking.query_words("&|!():*'\"\\") == []
    assert len(ranking.query_words(" ".join(f"w{i}" for i in range(100)))) == ranking.MAX_WORDS


@given(st.text(max_size=200))
@settings(max_examples=200)
def test_words_never_carry_tsquery_syntax(text):
    for word in ranking.query_words(text):
        assert word and not set(word) & set("&|!():*<>'\\ \t\n\x00-_")
        assert word == word.lower()


@given(st.integers(0, 2 * ranking.MAX_SCORE), st.integers(0, 2 * ranking.MAX_SCORE))
def test_relevance_is_in_unit_interval_and_follows_the_order(s1, s2):
    r1, r2 = ranking.relevance(s1), ranking.relevance(s2)
    assert 0 <= r1 <= 1 and 0 <= r2 <= 1
    if s1 > s2:
        assert r1 >= r2
    assert ranking.relevance(ranking.MAX_SCORE) == 1.0


async def test_latest_marker_follows_the_clock_and_lifecycle(client, mint, db, tenant, clock):
    """Ranked `q` reads the latest version through the marker (db.capabilities.latest_in_force): a
    version whose effectiveAt arrives becomes the latest at the housekeeping tick, with no write, and
    retiring it brings the one before back; the answer always equals the one without `q` (the same
    marker)."""
    from datetime import timedelta

    first = skill("widget.make", "Make widget", "makes a widget")
    await publish(client, mint, tenant, {"maker": agent(first)})
    soon = (clock.now() + timedelta(seconds=1.5)).isoformat()
    later = (clock.now() + timedelta(seconds=3.0)).isoformat()
    await publish(
        client,
        mint,
        tenant,
        {
            "maker": agent(
                first,
                {**first, "version": "1.1.0", "effectiveAt": soon},
                {**first, "version": "1.2.0", "effectiveAt": later},
            )
        },
    )

    async def versions(**params) -> list[str]:
        response = await client.get("/v1/capabilities", params={"tenant": tenant, **params})
        assert response.status_code == 200, response.text
        return [item["version"] for item in response.json()["items"]]

    assert await versions(q="widget") == await versions() == ["1.0.0"]
    clock.advance(1.7)
    await tick_now(db, clock)
    assert await versions(q="widget") == await versions() == ["1.1.0"]
    clock.advance(1.5)
    await tick_now(db, clock)
    assert await versions(q="widget") == await versions() == ["1.2.0"]
    admin = mint(tenant, "admin", "registry:admin")
    base = f"/v1/agents/{tenant}/maker/skills/widget.make/versions"
    assert (await client.post(f"{base}/1.2.0/retire", headers=admin)).status_code == 200
    assert await versions(q="widget") == await versions() == ["1.1.0"]
    # a pre-release is never the latest while a release is in force
    await publish(
        client,
        mint,
        tenant,
        {"maker": agent(first, {**first, "version": "1.1.0", "effectiveAt": soon}, {**first, "version": "1.3.0-rc.1"})},
    )
    assert await versions(q="widget") == await versions() == ["1.1.0"]
    ard = await client.post("/ard/search", json={"query": {"text": "widget"}})
    assert ard.status_code == 200 and len(ard.json()["results"]) >= 1


async def test_builds_of_one_precedence_are_one_version_named_alike_everywhere(client, mint, tenant):
    """`1.0.0+a` and `1.0.0+b` share a precedence, so they are one version (registry.versions.semver): the
    second build is refused, and discovery, ranked search and a detail release name the first alike."""
    first = agent(skill("widget.build", "Build widgets", "Builds a widget", version="1.0.0+a"))
    second = agent(skill("widget.build", "Build widgets", "Builds a widget", version="1.0.0+b"))
    headers = mint(tenant, "publisher", "registry:publish")
    created = await client.put(f"/v1/agents/{tenant}/widgets", json=first, headers=headers)
    assert created.status_code == 201, created.text
    again = await client.put(f"/v1/agents/{tenant}/widgets", json=second, headers=headers)
    assert again.status_code == 409 and again.json()["code"] == "version_conflict", again.text
    listed = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    ranked = (await client.get("/v1/capabilities", params={"tenant": tenant, "q": "widget"})).json()["items"]
    assert [i["version"] for i in listed if i["id"] == "widget.build"] == ["1.0.0+a"]
    assert [i["version"] for i in ranked if i["id"] == "widget.build"] == ["1.0.0+a"]
    reader = mint(tenant, "router", "registry:read")
    for spec in ("latest", "1.0.0", "1.0.0+a"):
        detail = await client.get(f"/v1/agents/{tenant}/widgets/skills/widget.build/versions/{spec}", headers=reader)
        assert detail.status_code == 200, detail.text
        assert detail.json()["version"] == "1.0.0+a"
