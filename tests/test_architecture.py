"""The layering docs/architecture.md claims, checked on the source: no import cycle among capreg's
modules, route modules never import db/, auth/ never imports database code, db/ never imports
registry/. Static (the AST of every module, imports inside functions included, so a lazy import
cannot hide a cycle; imports under `if TYPE_CHECKING:` are for annotations and never run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("registry", "auth", "db")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for top in PACKAGES for p in (ROOT / top).rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path], top_level_only: bool = False) -> set[str]:
    """The capreg modules (and third-party top-level names) a module imports anywhere in its body
    (with `top_level_only`, outside function bodies only)."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path)), top_level_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in modules else node.module)
    return found


def _runtime_nodes(tree: ast.AST, top_level_only: bool = False):
    """Every node but those under `if TYPE_CHECKING:` (imports for annotations only, never run)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                pending.extend(child.orelse)
                continue
            pending.append(child)


def graph(top_level_only: bool = False) -> dict[str, set[str]]:
    modules = all_modules()
    return {
        name: {t for t in imports_of(path, modules, top_level_only) if t in modules and t != name}
        for name, path in modules.items()
    }


def context_of(module: str) -> str:
    """`registry.tickets.service` -> `registry.tickets`; `auth.policy` -> `auth`; `registry.app` stays."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "registry" else parts[0]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as the list of its modules, else None (iterative DFS, three colours)."""
    colour = dict.fromkeys(edges, 0)
    for start in sorted(edges):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(edges[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[child] == 1:
                return path[path.index(child) :] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(edges[child]))))
    return None


def _without_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    # package __init__ modules only document their package; an edge to one is not a dependency
    return {n: {t for t in ts if not (ROOT / t.replace(".", "/") / "__init__.py").exists()} for n, ts in edges.items()}


def test_no_import_cycle_between_modules():
    edges = _without_packages(graph(top_level_only=True))
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])


def test_no_import_cycle_between_contexts():
    """Contexts (folders of registry/, auth, db) form a DAG, counting imports inside functions too: a
    lazy import cannot hide a context that calls back into one that calls it. Lazy imports inside
    one context (the client's optional a2a-sdk parts) are that context's own business. The composition
    root (`registry.app`, `registry.config`, `registry.state`: the app, its settings and the state
    that holds one part of each context) is left out: it is there to know every context; module
    cycles through it are still refused by test_no_import_cycle_between_modules."""
    root = {"registry.app", "registry.config", "registry.state"}
    contexts: dict[str, set[str]] = {}
    for name, targets in _without_packages(graph()).items():
        if name in root:
            continue
        contexts.setdefault(context_of(name), set()).update(
            context_of(t) for t in targets if context_of(t) != context_of(name) and t not in root
        )
    assert not cycle_edges(contexts), sorted(cycle_edges(contexts))


def cycle_edges(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The edges a -> b that lie on a cycle (b reaches a)."""

    def reaches(start: str) -> set[str]:
        seen, pending = {start}, [start]
        while pending:
            for nxt in edges.get(pending.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    pending.append(nxt)
        return seen

    return {(a, b) for a, targets in edges.items() for b in targets if a in reaches(b)}


def test_cycle_edges_finds_them():
    assert cycle_edges({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == {("a", "b"), ("b", "a")}


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_route_modules_never_import_db():
    modules = all_modules()
    offenders = {
        name: sorted(t for t in imports_of(path, modules) if t == "db" or t.startswith("db.") or t == "asyncpg")
        for name, path in modules.items()
        if name.endswith("routes") or name.endswith("_routes")
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_auth_never_imports_database_code_and_db_never_imports_registry():
    modules = all_modules()
    for name, path in modules.items():
        targets = imports_of(path, modules)
        if name.startswith("auth"):
            assert not [t for t in targets if t.split(".")[0] in ("db", "asyncpg", "registry")], name
        if name.startswith("db"):
            assert not [t for t in targets if t.split(".")[0] == "registry"], name


def test_every_context_is_one_folder():
    # the flat registry/ of before the layout move is gone: only the composition root stays at the top
    # (the app, its settings and its state, which hold every context's parts)
    assert sorted(p.name for p in (ROOT / "registry").glob("*.py")) == [
        "__init__.py",
        "app.py",
        "config.py",
        "state.py",
    ]


def test_layers_never_climb():
    """core/ is below every context: it imports none of them, nor the composition root; the HTTP shell
    (web/) and the operation boundary (operations/) import no context but each other; the settings
    import no context; the server imports nothing from the client SDK (the client and the CLI that
    uses it are the SDK's side)."""
    modules = all_modules()
    contexts = {context_of(m) for m in modules if m.startswith("registry.")} - {
        "registry.core",
        "registry.app",
        "registry.config",
        "registry.state",
        "registry",
    }
    climbs = {}
    for name, path in modules.items():
        targets = imports_of(path, modules)
        if name.startswith("registry.core"):
            bad = {t for t in targets if context_of(t) in contexts or t in ("registry.state", "registry.app")}
        elif name.startswith(("registry.web", "registry.operations")):
            # the shell and the boundary serve every context and know none of them
            shell = ("registry.web", "registry.operations")
            bad = {t for t in targets if context_of(t) in contexts and not t.startswith(shell)} | (
                {"registry.app"} & targets
            )
        elif name == "registry.config":
            bad = {t for t in targets if context_of(t) in contexts}
        elif not name.startswith(("registry.client", "registry.cli")):
            bad = {t for t in targets if t.startswith("registry.client")}
        else:
            bad = set()
        if bad:
            climbs[name] = sorted(bad)
    assert not climbs


def test_ticket_services_raise_refusals_and_never_record_them():
    """The walk of a ticket mint enters the refusal path once, at the operation boundary: the ticket
    service (every module of its steps) and the offers that mint through it raise refusals (ProblemError.about), they never call
    the recorder (registry.operations.refusals)."""
    modules = all_modules()
    walk = (
        "registry.tickets.service",
        "registry.tickets.request",
        "registry.tickets.idempotency",
        "registry.tickets.evaluation",
        "registry.tickets.redelegation",
        "registry.tickets.verification",
        "registry.tickets.minting",
        "registry.tickets.approval_requests",
        "registry.tickets.introspection",
        "registry.tickets.revocation",
        "registry.offers.service",
    )
    for name in walk:
        assert "registry.operations.refusals" not in imports_of(modules[name], modules), name


def test_db_answers_typed_rows_never_records():
    """One typed read model (issue 36): no query function of db/ answers asyncpg records, which
    callers would read by string key; rows are Structs (db/rows.py). A record may still be read
    inside db/ itself, where the query and its columns are."""
    offenders = []
    for path in sorted((ROOT / "db").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                returns = ast.unparse(node.returns) if node.returns is not None else ""
                if re.search(r"\bRecord\b", returns):
                    offenders.append(f"{path.name}:{node.lineno} {node.name} -> {returns}")
    assert not offenders, offenders
