"""ARD names (registry/ard/names.py): publisher domains both ways, one tenant per domain, the SQL
spelling in db/ard.py equal to the Python one, identifiers, and CAPREG_PUBLISHER_DOMAINS checks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db.ard import Query, publisher_sql
from registry.ard.names import Publishers, agent_urn, default_domain, parse_agent_urn
from registry.ard.service import registry_identifier
from registry.config import load_settings
from registry.core.publisher_domains import PublisherDomainError, parse_publisher_domains

tenants = st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,63}\Z")
CONFIGURED = {"acme": "acme.example", "beta_co": "beta.example.org"}


@given(tenants)
def test_a_domain_names_its_tenant_back(tenant):
    publishers = Publishers(configured=CONFIGURED)
    domain = publishers.domain_of(tenant)
    assert publishers.tenant_of(domain) == tenant
    assert publishers.tenant_of(domain.upper()) == tenant
    assert parse_agent_urn(agent_urn(domain, "billing-agent")).publisher == domain
    assert len(domain) <= 253 and all(1 <= len(label) <= 63 for label in domain.split("."))


@given(tenants, tenants)
def test_two_tenants_never_share_a_domain(a, b):
    publishers = Publishers(configured=CONFIGURED)
    if a != b:
        assert publishers.domain_of(a) != publishers.domain_of(b)


def test_default_domains():
    assert default_domain("acme") == "acme.capreg.invalid"
    assert default_domain("a.b-c") == "a.b-c.capreg.invalid"
    assert default_domain("a_b") == "xq--615f62.capreg.invalid"
    # a tenant named like an encoded one is encoded too, so it cannot take another's domain
    assert default_domain("xq--615f62") != "xq--615f62.capreg.invalid"
    publishers = Publishers(configured=CONFIGURED)
    assert publishers.domain_of("acme") == "acme.example" and publishers.is_configured("acme")
    assert publishers.tenant_of("acme.capreg.invalid") is None  # configured tenants answer to their domain only
    for domain in (
        "nobody.example",
        "capreg.invalid",
        "xq--zz.capreg.invalid",
        "xq--ff.capreg.invalid",
        "a_b.capreg.invalid",
        "xq--61.5f62.capreg.invalid",
    ):
        assert publishers.tenant_of(domain) is None, domain


@pytest.mark.asyncio(loop_scope="session")
@settings(max_examples=1)
@given(st.lists(tenants, min_size=50, max_size=50, unique=True))
async def test_sql_spells_domains_as_python_does(db, sample):
    sample += ["acme", "beta_co", "a_b", "x" * 64, "xq--a", "a..b", "a-", "-a"[1:]]
    query = Query()
    column = query.bind(sample)
    sql = f"SELECT t, {publisher_sql('t', query.bind, CONFIGURED)} AS d FROM unnest({column}::text[]) AS t"
    rows = await db.fetch(sql, *query.params)
    publishers = Publishers(configured=CONFIGURED)
    assert {r["t"]: r["d"] for r in rows} == {t: publishers.domain_of(t) for t in sample}


def test_identifiers():
    assert parse_agent_urn("urn:air:acme.example:billing-agent").agent_id == "billing-agent"
    assert parse_agent_urn("URN:AIR:Acme.Example:billing-agent").publisher == "acme.example"
    for bad in (
        "urn:air:acme.example",
        "urn:air:acme:billing",
        "urn:air:acme.example:ns:billing",
        "urn:air:acme.example:Billing",
        "urn:air:-acme.example:b",
        "urn:air:acme.example:",
        "urn:x:acme.example:b",
        "",
    ):
        assert parse_agent_urn(bad) is None, bad


def test_registry_identifier_needs_a_dns_name():
    assert registry_identifier("https://Registry.Example.com:8443") == "urn:air:registry.example.com:registry:capreg"
    for url in ("http://127.0.0.1:8080", "http://[::1]:8080", "http://localhost:8080"):
        assert registry_identifier(url) == "urn:air:capreg.invalid:registry:capreg"


def test_publisher_domains_are_checked_at_start_up():
    assert parse_publisher_domains('{"acme": "acme.example"}') == {"acme": "acme.example"}
    assert load_settings({"CAPREG_PUBLISHER_DOMAINS": '{"acme": "acme.example"}'}).publisher_domains == {
        "acme": "acme.example"
    }
    for raw, words in (
        ("[1]", "JSON object"),
        ("{", "not valid JSON"),
        ('{"Acme": "acme.example"}', "not a tenant"),
        ('{"acme": "Acme.Example"}', "lowercase FQDN"),
        ('{"acme": "localhost"}', "lowercase FQDN"),
        ('{"acme": 7}', "lowercase FQDN"),
        ('{"a": "x.example", "b": "x.example"}', "both"),
        ('{"a": "b.capreg.invalid"}', "reserved"),
    ):
        with pytest.raises(PublisherDomainError, match=words):
            parse_publisher_domains(raw)
        with pytest.raises(SystemExit):
            load_settings({"CAPREG_PUBLISHER_DOMAINS": raw})
