"""Endpoint URLs a registrant gives (contract section 19, docs/api.md#endpoint-urls): one validator
for heartbeat `url` and every interface URL of a card, and the client's `Detail.urls()` offering
only absolute http(s) URLs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from registry.agents.endpoint_urls import MAX_URL_LENGTH, loopback_urls_allowed, url_problem
from registry.client.results import CapabilityDetail, Endpoints, Instance, Interface, callable_url
from registry.config import Settings
from tests.conftest import example

BILLING = example("billing-agent.json")

HOSTILE = [
    "javascript:alert(1)",
    "file:///etc/passwd",
    "gopher://evil.example:70/_x",
    "data:text/html,<b>x</b>",
    "ftp://files.example/x",
    "mailto:a@b.example",
    "ws://a.example/",
    "//a.example/path",
    "a.example/path",
    "/relative",
    "",
    " https://a.example/",
    "https://a.example/ ",
    "https://a.example/\t",
    "https:// a.example/",
    "https://user:secret@a.example/",
    "https://user@a.example/",
    "https://a.example\\@b.example/",
    "\\\\server\\share\\x",
    "https:\\\\a.example\\x",
    "https://a.example/\u202egnp.exe",
    "https://a\u200b.example/",
    "https://a.example/\x00",
    "https://a.example/\x7f",
    "https://a.example/\n",
    "https://a.example\u2028/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.1.1:8080/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://0.0.0.0/",
    "http://0.0.0.0:8080/",
    "http://0/",
    "http://[::]/",
    "http://0.1.2.3/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://255.255.255.255/",
    "http://[::ffff:169.254.169.254]/",
    "http://0xa9fea9fe/",
    "http://2852039166/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://127.0.0.1/",
    "http://127.1/",
    "http://0x7f000001/",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://a.example:99999/",
    "http://a.example:x/",
    "http://a.example:0/",
    "https://bücher.example/",
    "https://a_b.example/",
    "https://%61.example/",
    "http://[not-an-ip]/",
    "http://99999999999/",
    "https://a.example/" + "x" * MAX_URL_LENGTH,
]
LOOPBACK = [
    "http://127.0.0.1/",
    "http://127.1/",
    "http://0x7f000001/",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
]
FINE = [
    "https://a.example/",
    "http://billing.acme.internal:8443/a2a?x=1#f",
    "https://10.0.0.7/",
    "https://[2001:db8::1]:443/",
    "https://xn--bcher-kva.example/",
    "HTTPS://A.EXAMPLE/",
    "https://a.example./x",
    "http://8.8.8.8/",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_urls_are_refused(url):
    assert url_problem(url, allow_loopback=False) is not None
    if url not in LOOPBACK:
        assert url_problem(url, allow_loopback=True) is not None


@pytest.mark.parametrize("url", HOSTILE[: HOSTILE.index("http://169.254.169.254/latest/meta-data/")])
def test_the_client_skips_what_is_not_a_plain_absolute_http_url(url):
    assert not callable_url(url)


@pytest.mark.parametrize("url", FINE)
def test_plain_urls_pass(url):
    assert url_problem(url, allow_loopback=False) is None
    assert callable_url(url)


_host = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,3}\Z")
_path = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="\\"), max_size=40)


@hsettings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "file", "javascript", "gopher", "data", ""]),
    host=_host,
    path=_path,
    noise=st.sampled_from(["", " ", "\t", "\u202e", "\u2066", "\u200b", "\ufeff", "\x00", "\x1b", "\x85", "\\"]),
    where=st.floats(0, 1),
)
def test_only_plain_http_urls_pass_whatever_noise_they_carry(scheme, host, path, noise, where):
    url = f"{scheme}://{host}/{path}"
    cut = round(where * len(url))
    url = url[:cut] + noise + url[cut:]
    problem = url_problem(url, allow_loopback=True)
    if noise or scheme.lower() not in ("http", "https"):
        assert problem is not None, url
    if problem is None:
        assert callable_url(url)


@given(st.text(max_size=60))
def test_whatever_passes_the_validator_is_callable_by_the_client(url):
    if url_problem(url, allow_loopback=True) is None:
        assert callable_url(url)


def test_loopback_default_follows_the_listen_address():
    assert loopback_urls_allowed(Settings(host="127.0.0.1"))
    assert loopback_urls_allowed(Settings(host="::1"))
    assert loopback_urls_allowed(Settings(host="localhost"))
    assert not loopback_urls_allowed(Settings(host="0.0.0.0"))
    assert not loopback_urls_allowed(Settings(host="10.1.2.3"))
    assert not loopback_urls_allowed(Settings(host="127.0.0.1", allow_loopback_urls=False))
    assert loopback_urls_allowed(Settings(host="0.0.0.0", allow_loopback_urls=True))


def test_client_urls_offer_only_absolute_http_urls():
    detail = CapabilityDetail(
        ref="t/a/s@1.0.0",
        tenant="t",
        agent_id="a",
        id="s",
        version="1.0.0",
        endpoints=Endpoints(
            instances=[
                Instance(instance_id=str(i), url=u)
                for i, u in enumerate(
                    [
                        "javascript:alert(1)",
                        " https://lead.example/",
                        "https://user:pw@x.example/",
                        "file:///etc/passwd",
                        "https://a.example/\u202e",
                        "\\\\srv\\share",
                        "https://ok.example/a2a",
                        None,
                        "/relative",
                    ]
                )
            ],
            interfaces=[
                Interface(url="gopher://x.example/", protocol_binding="JSONRPC"),
                Interface(url="http://ok2.example/rpc", protocol_binding="JSONRPC"),
            ],
        ),
    )
    assert detail.urls() == ["https://ok.example/a2a", "http://ok2.example/rpc"]


async def _put(client, mint, tenant, body):
    return await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=body, headers=mint(tenant, "p", "registry:publish")
    )


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "http://169.254.169.254/",
        "https://u:p@a.example/",
        " https://a.example/",
        "https://a.example/\u202e",
        "\\\\srv\\share",
        "http://0.0.0.0/",
    ],
)
async def test_heartbeat_with_a_refused_url_renews_nothing(client, mint, tenant, db, url):
    assert (await _put(client, mint, tenant, BILLING)).status_code == 201
    response = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": "i-1", "url": url},
        headers=mint(tenant, "p", "registry:publish"),
    )
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request" and [e["path"] for e in problem["errors"]] == ["/url"]
    assert await db.fetchval("SELECT count(*) FROM agent_instances WHERE tenant = $1", tenant) == 0


async def test_loopback_heartbeat_urls_are_allowed_while_listening_on_loopback(client, mint, tenant):
    assert (await _put(client, mint, tenant, BILLING)).status_code == 201
    response = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": "i-1", "url": "http://127.0.0.1:9/a2a"},
        headers=mint(tenant, "p", "registry:publish"),
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("field", "pointer"),
    [
        (
            {
                "supportedInterfaces": [
                    {"url": "https://ok.example/", "protocolBinding": "JSONRPC"},
                    {"url": "file:///etc/passwd", "protocolBinding": "JSONRPC"},
                ]
            },
            "/supportedInterfaces/1/url",
        ),
        ({"supportedInterfaces": [], "url": "http://169.254.169.254/", "preferredTransport": "JSONRPC"}, "/url"),
        (
            {
                "supportedInterfaces": [],
                "url": "https://ok.example/",
                "additionalInterfaces": [{"url": "gopher://x.example/", "transport": "JSONRPC"}],
            },
            "/additionalInterfaces/0/url",
        ),
        ({"iconUrl": "javascript:alert(1)"}, "/iconUrl"),
        ({"provider": {"organization": "x", "url": "https://u:p@x.example"}}, "/provider/url"),
    ],
)
async def test_registration_with_a_refused_url_applies_nothing(client, mint, tenant, db, field, pointer):
    response = await _put(client, mint, tenant, {**BILLING, **field})
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request" and pointer in [e["path"] for e in problem["errors"]]
    assert await db.fetchval("SELECT count(*) FROM agents WHERE tenant = $1", tenant) == 0


def test_the_settings_are_read_and_checked():
    from registry.config import load_settings

    settings = load_settings(
        {"CAPREG_ALLOW_LOOPBACK_URLS": "0", "CAPREG_MAX_INSTANCES": "7", "CAPREG_CACHE_BUDGET": "1048576"}
    )
    assert (settings.allow_loopback_urls, settings.max_instances, settings.cache_budget) == (False, 7, 1048576)
    assert not loopback_urls_allowed(settings)
    defaults = load_settings({})
    assert (defaults.allow_loopback_urls, defaults.max_instances, defaults.cache_budget) == (
        None,
        1000,
        64 * 1024 * 1024,
    )
    with pytest.raises(SystemExit, match="CAPREG_ALLOW_LOOPBACK_URLS"):
        load_settings({"CAPREG_ALLOW_LOOPBACK_URLS": "yes"})
