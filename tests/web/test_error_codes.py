"""registry.core.error_codes: the one table of error codes and statuses, equal to the documented
one (docs/api.md#error-codes), refusing a row twice, and the only place an error's status is said
(no literal status where an error is raised)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from auth.policy import REFUSAL_CODES, Refusal
from registry.core import error_codes
from registry.core.error_codes import TABLE, ErrorKind, _Table

ROOT = Path(__file__).parent.parent.parent
_ROW = re.compile(r"^\| (\d{3}) \| `([a-z_]+)` \|", re.M)


def documented_rows() -> list[ErrorKind]:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("### Error codes", 1)[1].split("\n## ", 1)[0]
    return [ErrorKind(code, int(status)) for status, code in _ROW.findall(section)]


def test_the_table_is_the_documented_one_row_for_row():
    assert TABLE.rows == documented_rows()


def test_a_row_twice_or_an_undeclared_second_status_fails():
    table = _Table()
    table.row("x", 400)
    with pytest.raises(RuntimeError, match="twice"):
        table.row("x", 400, variant=True)
    with pytest.raises(RuntimeError, match="variant"):
        table.row("x", 409)
    with pytest.raises(RuntimeError, match="variant"):
        table.row("y", 400, variant=True)
    assert table.of("x") == ErrorKind("x", 400)


def test_every_refusal_code_has_a_row_and_no_other_code_makes_a_refusal():
    assert REFUSAL_CODES <= TABLE.codes()
    with pytest.raises(ValueError, match="not a refusal code"):
        Refusal(code="payload_too_large", message="no")


def _literal_statuses(path: Path) -> list[int]:
    """Lines where a ProblemError gets a number, or where an error module names one, outside the table."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ProblemError":
            if node.args and isinstance(node.args[0], ast.Constant):
                found.append(node.lineno)
            found += [kw.value.lineno for kw in node.keywords if kw.arg == "status"]
    return found


def test_no_literal_status_where_an_error_is_raised():
    offenders = {
        str(path.relative_to(ROOT)): lines
        for top in ("registry", "auth", "db")
        for path in (ROOT / top).rglob("*.py")
        if (lines := _literal_statuses(path))
    }
    assert not offenders


def test_each_kind_is_exported_once_by_name():
    kinds = [value for name, value in vars(error_codes).items() if isinstance(value, ErrorKind) and name.isupper()]
    assert sorted(kinds, key=TABLE.rows.index) == TABLE.rows
