"""Rules over one stored row, written once and read two ways: evaluated in Python on rows already
read, and rendered as the SQL condition of the queries that list them (issue 19: a rule spelt once in
SQL and once in Python drifts); and orders of rows, read as an SQL `ORDER BY` and as the first of a
list. auth.policy defines them (who may see a record, which version is in force, which is latest);
db/ renders them into its queries; nothing here reads a clock or a database.

A rule is a small expression: comparisons of a row's fields with constants and with named
parameters (`VIEWER`, `NOW`; `<` and `<=` for times and numbers only: text order is the database's
collation in SQL and code points in Python), membership in an array field, `IS NULL`, and
`all_of`/`any_of`. There is no negation, so both readings agree on missing values: in SQL a
comparison with NULL is unknown, which a WHERE clause (or `all_of`/`any_of` of such) treats as false;
in Python a comparison with None is false. A parameter whose value is None (an anonymous viewer) is
folded out when rendering, so the planner never sees a `NULL` comparison it cannot prove false.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cmp_to_key
from typing import Any, Literal

import msgspec

CompareOp = Literal["=", "<>", "<=", "<"]


class Field(msgspec.Struct, frozen=True):
    """A column of the row (`alias.name` in SQL; `row[name]` or `row.name` in Python)."""

    name: str


class Param(msgspec.Struct, frozen=True):
    """A value given with each use: the viewer's tenant, the moment `now`. `sql_type` is its SQL cast."""

    name: str
    sql_type: str


Operand = Field | Param | str


class Compare(msgspec.Struct, frozen=True):
    op: CompareOp
    left: Operand
    right: Operand


class Member(msgspec.Struct, frozen=True):
    """`item` is one of the array field `array` (SQL `item = ANY (array)`)."""

    item: Operand
    array: Field


class IsNull(msgspec.Struct, frozen=True):
    operand: Field


class AllOf(msgspec.Struct, frozen=True):
    parts: tuple[Expr, ...]


class AnyOf(msgspec.Struct, frozen=True):
    parts: tuple[Expr, ...]


Expr = Compare | Member | IsNull | AllOf | AnyOf


def eq(left: Operand, right: Operand) -> Compare:
    return Compare("=", left, right)


def ne(left: Operand, right: Operand) -> Compare:
    return Compare("<>", left, right)


def le(left: Operand, right: Operand) -> Compare:
    return Compare("<=", left, right)


def lt(left: Operand, right: Operand) -> Compare:
    return Compare("<", left, right)


def all_of(*parts: Expr) -> AllOf:
    return AllOf(parts)


def any_of(*parts: Expr) -> AnyOf:
    return AnyOf(parts)


# --- Python ----------------------------------------------------------------------------------------

Row = Any  # a Mapping (asyncpg.Record, dict) or an object with the fields as attributes (a Struct)
Values = Mapping[str, Any]


# Whether rows of a type are read by key (a Mapping, an asyncpg.Record) or by attribute, per type.
_BY_KEY: dict[type, bool] = {}


def _by_key(row: Row) -> bool:
    kind = type(row)
    by_key = _BY_KEY.get(kind)
    if by_key is None:
        by_key = _BY_KEY[kind] = not isinstance(row, msgspec.Struct) and hasattr(row, "keys")
    return by_key


def _reader(operand: Operand) -> Callable[[Row, Values], Any]:
    if isinstance(operand, Field):
        name = operand.name

        def field(row: Row, _: Values) -> Any:
            return row[name] if _by_key(row) else getattr(row, name)

        return field
    if isinstance(operand, Param):
        key = operand.name
        return lambda _, values: values[key]
    constant = operand
    return lambda _, __: constant


_PYTHON_OPS = {"=": "==", "<>": "!=", "<=": "<=", "<": "<"}


def _python_source(expr: Expr, by_key: bool) -> str:
    """The rule as one Python expression over `row` and the parameters (compiled once per rule: a
    rule is read for every row a request decides on, e.g. each version of a skill). Names come from
    the rule's own definition (identifiers, checked) and constants are `repr`s: nothing from a row."""
    counter = iter(range(1_000_000))

    def operand(o: Operand) -> tuple[str, bool]:  # (source, may be None)
        if isinstance(o, Field):
            if not o.name.isidentifier():
                raise ValueError(f"not a field name: {o.name!r}")
            return (f"row[{o.name!r}]" if by_key else f"row.{o.name}"), True
        if isinstance(o, Param):
            if not o.name.isidentifier():
                raise ValueError(f"not a parameter name: {o.name!r}")
            return o.name, True
        return repr(o), False

    def known(source: str, nullable: bool) -> tuple[str, list[str]]:
        """A name for the operand's value, and the checks that it is not None."""
        if not nullable:
            return source, []
        name = f"_v{next(counter)}"
        return name, [f"({name} := {source}) is not None"]

    def render(e: Expr) -> str:
        if isinstance(e, Compare):
            left, left_checks = known(*operand(e.left))
            right, right_checks = known(*operand(e.right))
            return "(" + " and ".join([*left_checks, *right_checks, f"{left} {_PYTHON_OPS[e.op]} {right}"]) + ")"
        if isinstance(e, Member):
            item, item_checks = known(*operand(e.item))
            array, array_checks = known(*operand(e.array))
            return "(" + " and ".join([*item_checks, *array_checks, f"{item} in {array}"]) + ")"
        if isinstance(e, IsNull):
            return f"({operand(e.operand)[0]} is None)"
        joiner = " and " if isinstance(e, AllOf) else " or "
        return "(" + joiner.join(render(part) for part in e.parts) + ")"

    return render(expr)


def _tester(expr: Expr, params: frozenset[str]) -> Callable[..., bool]:
    """`holds(row, <params>)`, reading the row by key or by attribute as its type needs."""
    arguments = "".join(f", {name}" for name in sorted(params))
    source = (
        f"def holds(row{arguments}):\n"
        "    by_key = _BY_KEY.get(type(row))\n"
        "    if by_key is None:\n"
        "        by_key = _by_key(row)\n"
        "    if by_key:\n"
        f"        return bool({_python_source(expr, by_key=True)})\n"
        f"    return bool({_python_source(expr, by_key=False)})\n"
    )
    namespace: dict[str, Any] = {}
    scope = {"__builtins__": {"bool": bool, "type": type}, "_BY_KEY": _BY_KEY, "_by_key": _by_key}
    exec(compile(source, "<auth.predicates rule>", "exec"), scope, namespace)  # noqa: S102
    return namespace["holds"]


# --- SQL -------------------------------------------------------------------------------------------

_TRUE, _FALSE = "true", "false"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _render(expr: Expr, alias: str, placeholders: Mapping[str, str | None]) -> str:
    def operand(o: Operand) -> str | None:
        if isinstance(o, Field):
            return f"{alias}.{o.name}"
        if isinstance(o, Param):
            placeholder = placeholders[o.name]
            return None if placeholder is None else f"{placeholder}::{o.sql_type}"
        return _literal(o)

    if isinstance(expr, Compare):
        left, right = operand(expr.left), operand(expr.right)
        return _FALSE if left is None or right is None else f"{left} {expr.op} {right}"
    if isinstance(expr, Member):
        item = operand(expr.item)
        return _FALSE if item is None else f"{item} = ANY ({operand(expr.array)})"
    if isinstance(expr, IsNull):
        return f"{operand(expr.operand)} IS NULL"
    parts = [_render(part, alias, placeholders) for part in expr.parts]
    if isinstance(expr, AllOf):
        if _FALSE in parts:
            return _FALSE
        kept = [p for p in parts if p != _TRUE]
        return "(" + " AND ".join(kept) + ")" if kept else _TRUE
    if _TRUE in parts:
        return _TRUE
    kept = [p for p in parts if p != _FALSE]
    return "(" + " OR ".join(kept) + ")" if kept else _FALSE


def _params_of(expr: Expr) -> set[str]:
    if isinstance(expr, Compare):
        return {o.name for o in (expr.left, expr.right) if isinstance(o, Param)}
    if isinstance(expr, Member):
        return {expr.item.name} if isinstance(expr.item, Param) else set()
    if isinstance(expr, IsNull):
        return set()
    return set().union(*(_params_of(part) for part in expr.parts))


class Rule:
    """One rule over one row, with its two readings generated from `expr`."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr
        self.params = frozenset(_params_of(expr))
        # holds(row, **values) -> bool: whether `row` satisfies the rule, given every parameter's
        # value (None: absent, e.g. anonymous) and no other (a TypeError otherwise). Compiled from
        # `expr` (_python_source), so a rule costs what the same expression written by hand costs.
        self.holds: Callable[..., bool] = _tester(expr, self.params)

    def sql(self, alias: str, **placeholders: str | None) -> str:
        """The SQL condition on row `alias`, each parameter given as its bound placeholder (`$3`), or
        None when its value is None (the parts needing it are then false, as in SQL, and folded away;
        with a rule of two parameters, a part holding the other may then go too, and its placeholder
        with it: bind a value only for a rule that still names it)."""
        if placeholders.keys() != self.params:
            raise TypeError(f"the rule takes exactly the parameters {sorted(self.params)}, not {sorted(placeholders)}")
        return _render(self.expr, alias, placeholders)


def member(item: Operand, array: Field) -> Member:
    return Member(item, array)


def is_null(operand: Field) -> IsNull:
    return IsNull(operand)


# --- Orders ----------------------------------------------------------------------------------------


class OrderKey(msgspec.Struct, frozen=True):
    """One key of an order. Text compares bytewise in both readings: its column is declared
    `COLLATE "C"`, or `bytewise` says so in the query. Keys are never NULL."""

    field: Field
    descending: bool = False
    bytewise: bool = False


def ascending(field: Field) -> OrderKey:
    return OrderKey(field)


def descending(field: Field, *, bytewise: bool = False) -> OrderKey:
    return OrderKey(field, descending=True, bytewise=bytewise)


class Order:
    """An order of rows, read two ways: an SQL `ORDER BY` list, and the first row of a list in Python."""

    def __init__(self, *keys: OrderKey) -> None:
        self.keys = keys
        self._readers = [(_reader(key.field), key.descending) for key in keys]

    def sql(self, alias: str) -> str:
        return ", ".join(
            f"{alias}.{key.field.name}" + (' COLLATE "C"' if key.bytewise else "") + (" DESC" if key.descending else "")
            for key in self.keys
        )

    def before_sql(self, a: str, b: str) -> str:
        """The SQL condition: row `a` comes strictly before row `b` in this order."""

        def term(alias: str, key: OrderKey) -> str:
            return f"{alias}.{key.field.name}" + (' COLLATE "C"' if key.bytewise else "")

        parts = []
        for i, key in enumerate(self.keys):
            ties = [f"{term(a, k)} = {term(b, k)}" for k in self.keys[:i]]
            ties.append(f"{term(a, key)} {'>' if key.descending else '<'} {term(b, key)}")
            parts.append(ties[0] if len(ties) == 1 else "(" + " AND ".join(ties) + ")")
        return "(" + " OR ".join(parts) + ")"

    def _before(self, a: Row, b: Row) -> bool:
        for read, desc in self._readers:
            x, y = read(a, {}), read(b, {})
            if x != y:
                return x > y if desc else x < y
        return False

    def sorted(self, rows: Iterable[Row]) -> list[Row]:
        """`rows` in this order (the SQL `ORDER BY` of `sql`)."""
        return sorted(rows, key=cmp_to_key(lambda a, b: -1 if self._before(a, b) else 1 if self._before(b, a) else 0))

    def first(self, rows: Iterable[Row]) -> Row | None:
        """The row that comes first in this order (None for no rows)."""
        best = None
        for row in rows:
            if best is None or self._before(row, best):
                best = row
        return best
