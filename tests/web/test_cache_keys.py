"""Cache keys built by one helper (registry.core.response_cache.cache_key, issue 36) that names the
viewer dimension each answer depends on: two viewers who differ in it never share an entry, and
every per-process cache (responses, release rows, offers, ARD) keys its entries through it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from auth.policy import release_profile
from auth.principal import Caller
from registry.core.response_cache import EVERYONE, cache_key, decided_for, seen_by_tenant
from registry.offers import service as offers
from registry.offers.service import OfferRequest

ROOT = Path(__file__).parent.parent.parent


def caller(tenant="acme", sub="router", scopes=("invoice:read",), regions=("eu",)) -> Caller:
    return Caller(tenant=tenant, sub=sub, scopes=frozenset(scopes), regions=regions)


def test_viewers_that_differ_in_the_dimension_get_different_keys():
    assert cache_key("discover", seen_by_tenant("acme"), "q") != cache_key("discover", seen_by_tenant("globex"), "q")
    assert cache_key("discover", seen_by_tenant(None), "q") != cache_key("discover", seen_by_tenant("acme"), "q")
    assert cache_key("leases", EVERYONE, "acme", "a") != cache_key("leases", seen_by_tenant(None), "acme", "a")
    profiles = [
        release_profile(c) for c in (caller(), caller(tenant="globex"), caller(scopes=()), caller(regions=None))
    ]
    keys = {cache_key("offers", decided_for(p), "need") for p in profiles}
    assert len(keys) == len(profiles)
    with pytest.raises(TypeError):
        cache_key("discover", "acme", "q")  # type: ignore[arg-type]  # a viewer without its dimension


def test_offers_keys_follow_the_release_profile():
    body = OfferRequest(need="look up an invoice")
    key = offers._cache_key("offers", caller(), body, None)
    assert key == offers._cache_key("offers", caller(sub="other-router"), body, None)  # same profile, same decision
    for other in (caller(tenant="globex"), caller(scopes=("invoice:read", "x:y")), caller(regions=("us",))):
        assert offers._cache_key("offers", other, body, None) != key
    assert offers._cache_key("offers-placed", caller(), body, None, 5) != key


CACHES = {"responses", "release_cache"}


def _key_argument(call: ast.Call) -> ast.expr | None:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("get", "put"):
        owner = func.value
        if isinstance(owner, ast.Attribute) and owner.attr in CACHES and call.args:
            return call.args[0]
    if isinstance(func, ast.Attribute) and func.attr == "cached_answer" and len(call.args) > 1:
        return call.args[1]
    return None


def _made_by_helper(node: ast.expr | None, functions: dict[str, ast.AST]) -> bool:
    """A call of cache_key, or of a function of the module that returns one."""
    if not isinstance(node, ast.Call):
        return False
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
    if name == "cache_key":
        return True
    helper = functions.get(name)
    returns = [n for n in ast.walk(helper) if isinstance(n, ast.Return)] if helper is not None else []
    return bool(returns) and all(_made_by_helper(r.value, {}) for r in returns)


def test_every_cache_key_is_made_by_the_helper():
    bad = []
    for path in sorted((ROOT / "registry").rglob("*.py")):
        if path.is_relative_to(ROOT / "registry" / "client"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        module_names = {
            target.id: node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for f in functions.values():
            assert isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            params = {a.arg for a in [*f.args.args, *f.args.kwonlyargs]}
            local = {
                target.id: node.value
                for node in ast.walk(f)
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for node in ast.walk(f):
                key = _key_argument(node) if isinstance(node, ast.Call) else None
                if key is None:
                    continue
                if isinstance(key, ast.Name):
                    if key.id in params:
                        continue  # handed in: checked where its callers build it
                    key = local.get(key.id, module_names.get(key.id))
                if not _made_by_helper(key, functions):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, sorted(set(bad))
