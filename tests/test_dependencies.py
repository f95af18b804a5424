"""Every third-party module that capreg's installed packages (registry/, auth/, db/) import is
declared in pyproject.toml: a module that merely arrives with another package (protobuf with
a2a-sdk, cryptography with pyjwt[crypto]) can leave with that package's next release and stop
`capreg serve` from starting. Static: the AST of every module, imports inside functions included.

An import inside `try: ... except ImportError` is optional by construction (the caller gets a
message naming what to install), so it needs no declaration. A module that needs an extra names
it in EXTRA_MODULES, and its imports may then come from that extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("registry", "auth", "db")
# Modules documented as needing an extra ("Needs the a2a extra"), and that extra.
EXTRA_MODULES = {"registry/client/a2a.py": "a2a"}


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(requirements: list[str]) -> set[str]:
    """The distribution names of pyproject requirement strings ("a2a-sdk[http-server]>=1.3")."""
    names = set()
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        assert match, requirement
        names.add(normalized(match.group(1)))
    return names


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(isinstance(name, ast.Name) and name.id in {"ImportError", "ModuleNotFoundError"} for name in names):
            return True
    return False


def imported_modules(tree: ast.AST) -> set[str]:
    """Dotted names of the absolute imports in `tree`, except those guarded by `except ImportError`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child)
            return  # the guarded body is optional
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # reads every installed distribution's files


@functools.cache
def distribution_of(module: str) -> str:
    """The installed distribution that provides `module`. A namespace package's top-level name
    (google) is shared by several distributions: the one that holds the module's own file wins."""
    top = module.split(".")[0]
    candidates = sorted(set(_providers().get(top, [])))
    assert candidates, f"{module} is imported but no installed distribution provides it"
    if len(candidates) == 1:
        return normalized(candidates[0])
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    origin = Path(spec.origin).resolve()
    for name in candidates:
        files = importlib.metadata.distribution(name).files or []
        if any(Path(str(file.locate())).resolve() == origin for file in files):
            return normalized(name)
    raise AssertionError(f"none of {candidates} holds {origin}")


def third_party_imports() -> dict[str, set[str]]:
    """File (relative to the repository) -> third-party modules it imports."""
    ours = set(PACKAGES)
    result = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            modules = {
                module
                for module in imported_modules(ast.parse(path.read_text(), str(path)))
                if module.split(".")[0] not in ours and module.split(".")[0] not in sys.stdlib_module_names
            }
            result[path.relative_to(ROOT).as_posix()] = modules
    return result


def test_every_direct_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = declared(project["dependencies"])
    extras = {extra: declared(requirements) for extra, requirements in project["optional-dependencies"].items()}
    undeclared = []
    for file, modules in third_party_imports().items():
        allowed = required | extras.get(EXTRA_MODULES.get(file, ""), set())
        undeclared += [
            f"{file}: {module} ({distribution_of(module)})"
            for module in sorted(modules)
            if distribution_of(module) not in allowed
        ]
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(undeclared)


def test_the_check_sees_a_namespace_package_and_skips_guarded_imports():
    """The two cases the check resolves by more than a top-level name."""
    assert distribution_of("google.protobuf.json_format") == "protobuf"
    tree = ast.parse(
        "import a.b\nfrom c.d import e\ndef f():\n    try:\n        import g\n    except ImportError:\n        import h\n"
    )
    assert imported_modules(tree) == {"a.b", "c.d", "h"}


def test_constraints_pin_every_declared_dependency_exactly():
    """constraints.txt (README, Contributing) is what CI installs: a dependency added to pyproject.toml
    without rerunning .ci/update-constraints would resolve afresh on every run, unpinned."""
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")]
    pins = {}
    for line in lines:
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        assert match, f"not an exact pin: {line!r}"
        pins[normalized(match.group(1))] = match.group(2)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = declared(project["dependencies"]).union(*map(declared, project["optional-dependencies"].values()))
    missing = sorted(wanted - set(pins))
    assert not missing, f"declared but not in constraints.txt (run .ci/update-constraints): {missing}"
