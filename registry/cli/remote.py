"""The `capreg` commands for people that go through the HTTP API (CAPREG_URL, CAPREG_TOKEN):
register, discover, detail, replay, withdraw, ticket mint|introspect|revoke, audit grants|events.

Readable rich tables on a terminal, shown only when every word of every cell fits whole (an id or a
ref is never cut, folded or ellipsised, no column squeezed): a terminal too narrow for that gets one
`key: value` block per item instead, each value on one line; when stdout is not a terminal (a pipe,
a file), plain rows of tab-separated cells with a header row, one item a line and never wrapped, for
grep, cut and awk;
`--json` (one document) or `--ndjson` (one object a line) for programs. A failure is one line on stderr and a non-zero exit (2 when the registry cannot be
reached or a local file cannot be read, 1 for the registry's refusals), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from registry.client import CapregError, Registry
from registry.client.results import Result

LOCAL_ERRORS = {"unreachable", "invalid_card", "invalid_ref"}


def _registry(settings: Any) -> Registry:
    url = os.environ.get("CAPREG_URL") or f"http://{settings.host}:{settings.port}"
    # A person waits at the terminal: fewer, shorter retries than a service would use.
    return Registry(url, token=os.environ.get("CAPREG_TOKEN") or None, retries=2, backoff=0.2, max_retry_wait=10)


def run_http(command: Callable[[Registry, argparse.Namespace], int]) -> Callable[[argparse.Namespace, Any], int]:
    """Wrap a command: a client for CAPREG_URL/CAPREG_TOKEN, and CapregError as one line."""

    def run(args: argparse.Namespace, settings: Any) -> int:
        registry = _registry(settings)
        try:
            return command(registry, args)
        except CapregError as error:
            print(f"capreg {args.command}: {_describe(error, registry)}", file=sys.stderr)
            return 2 if error.code in LOCAL_ERRORS else 1
        finally:
            registry.close()

    return run


def _describe(error: CapregError, registry: Registry) -> str:
    if error.code == "unreachable":
        return f"cannot reach capreg at {registry.base_url} ({error.message.rpartition(': ')[2] or 'no answer'})"
    text = str(error)
    if error.status == 401 and not os.environ.get("CAPREG_TOKEN"):
        text += " (CAPREG_TOKEN is not set; mint one with: capreg token mint ...)"
    if error.trace_id:
        text += f" [trace {error.trace_id}]"
    return text


# ---------------------------------------------------------------------------
# Output


def _console():
    from rich.console import Console

    return Console(soft_wrap=False)


def _to_terminal() -> bool:
    return sys.stdout.isatty()


R = TypeVar("R", bound=Result)


class Rows:
    """A table's title, columns and rows: a rich table on a terminal, plain rows otherwise."""

    def __init__(self, title: str, columns: list[str], rows: Iterable[list[Any]]):
        self.title, self.columns, self.rows = title, columns, [list(row) for row in rows]


def _plain_cell(value: Any) -> str:
    """One cell of a plain row: lists joined by commas without spaces, nothing empty (`-`), no tab or
    line break inside, so that every row is one line with a fixed number of fields."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        value = ",".join(map(str, value))
    elif isinstance(value, dict):
        value = json.dumps(value, separators=(",", ":"))
    return " ".join(str(value).split()) or "-"


def print_plain(columns: list[str], rows: Iterable[list[Any]]) -> None:
    """A header row (column names in capitals, spaces as `_`), then one line per row, tab-separated."""
    print("\t".join(column.upper().replace(" ", "_") for column in columns))
    for row in rows:
        print("\t".join(_plain_cell(value) for value in row))


def _emit(args: argparse.Namespace, items: Iterable[R], table: Callable[[list[R]], Rows]) -> int:
    """Items as NDJSON (streamed), JSON, a table on a terminal, or plain rows."""
    if getattr(args, "ndjson", False):
        for item in items:
            print(json.dumps(item.to_dict(), default=str), flush=True)
        return 0
    collected = list(items)
    if getattr(args, "json", False):
        print(json.dumps([item.to_dict() for item in collected], indent=2, default=str))
        return 0
    if not _to_terminal():
        rows = table(collected)
        print_plain(rows.columns, rows.rows)
        return 0
    console = _console()
    if not collected:
        console.print("[dim]nothing matched[/dim]")
        return 0
    print_table(console, table(collected))
    return 0


def _emit_one(args: argparse.Namespace, item: Result, title: str, extra: Callable[[Any], None] | None = None) -> int:
    if getattr(args, "json", False) or getattr(args, "ndjson", False):
        print(json.dumps(item.to_dict(), indent=None if args.ndjson else 2, default=str))
        return 0
    if not _to_terminal():  # one `field<TAB>value` line per field
        fields = [(key, value) for key, value in item.to_dict().items() if value not in (None, [], {})]
        print_plain(["field", "value"], ([key, value] for key, value in fields))
        return 0
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    fields = [
        (key, value)
        for key, value in item.to_dict().items()
        if key not in ("inputSchema", "outputSchema", "endpoints") and value not in (None, [], {})
    ]
    for key, value in fields:
        table.add_row(key, _cell(value))
    console = _console()
    if _fits(console, table, [[key, value] for key, value in fields]):
        console.print(table)
    else:  # a long ticket or URL: one `key: value` line each, never folded
        _print_blocks(console, Rows(title, ["field", "value"], []), [[key, value] for key, value in fields], keyed=True)
    if extra is not None:
        extra(console)
    return 0


def _cell(value: Any) -> str:
    from rich.markup import escape

    if isinstance(value, list):
        return escape(", ".join(map(str, value)))
    if isinstance(value, dict):
        return escape(json.dumps(value))
    return escape(str(value))


# Identifiers are never broken across lines: a ref cut in two cannot be copied or searched.
_UNBROKEN = {
    "ref",
    "jti",
    "seq",
    "at",
    "type",
    "outcome",
    "actor",
    "expires",
    "depth",
    "side effect",
    "status",
    "health",
    "instance",
}


def _words(value: Any) -> list[str]:
    """The words of a cell as shown: what must appear whole in a rendered table."""
    if value is None:
        return []
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    elif isinstance(value, dict):
        value = json.dumps(value)
    return str(value).split()


def _fits(console: Any, table: Any, rows: list[list[Any]], headers: Iterable[str] = ()) -> bool:
    """Whether `table`, rendered at the console's width, shows every word of every cell and header
    whole: nothing cut with `…`, folded mid-word or squeezed out."""
    import io

    from rich.console import Console

    probe = Console(file=io.StringIO(), width=console.width, color_system=None, soft_wrap=False, emoji=False)
    probe.print(table)
    shown = probe.file.getvalue()  # type: ignore[attr-defined]
    words = [word for row in rows for value in row for word in _words(value)]
    words += [word for header in headers for word in header.split()]
    if "…" in shown and not any("…" in word for word in words):
        return False
    return all(word in shown for word in words)


def _print_blocks(console: Any, rows: Rows, items: list[list[Any]] | None = None, keyed: bool = False) -> None:
    """One `column: value` block per row (blank line between), each value on one line however long,
    so that the terminal's own line wrap is the only break and an id copies whole. `keyed`: each row
    is a (key, value) pair, shown as one `key: value` line."""
    console.print(rows.title, soft_wrap=True, markup=False, highlight=False)
    for number, row in enumerate(rows.rows if items is None else items):
        if keyed:
            console.print(f"{row[0]}: {_plain_cell(row[1])}", soft_wrap=True, markup=False, highlight=False)
            continue
        if number:
            console.print("", soft_wrap=True)
        for column, value in zip(rows.columns, row, strict=False):
            console.print(f"{column}: {_plain_cell(value)}", soft_wrap=True, markup=False, highlight=False)


def print_table(console: Any, rows: Rows) -> None:
    """`rows` as a table on a terminal when every word of it fits whole at the console's width, else
    as `column: value` blocks (a terminal too narrow for its ids)."""
    table = _table(rows)
    if _fits(console, table, rows.rows, rows.columns):
        console.print(table)
    else:
        _print_blocks(console, rows)


def _table(rows: Rows):
    from rich.table import Table

    table = Table(title=rows.title, title_justify="left")
    for column in rows.columns:
        if column in _UNBROKEN:
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, overflow="fold")
    for row in rows.rows:
        table.add_row(*[_cell(v) if v is not None else "" for v in row])
    return table


def _output_flags(parser: argparse.ArgumentParser, ndjson: bool = True) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print JSON")
    if ndjson:
        group.add_argument("--ndjson", action="store_true", help="print one JSON object a line")
    else:
        parser.set_defaults(ndjson=False)


# ---------------------------------------------------------------------------
# Commands


def register(registry: Registry, args: argparse.Namespace) -> int:
    result = registry.register(args.tenant, args.agent_id, args.file)
    if getattr(args, "json", False):
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return 0
    print(registration_summary(result))
    return 0


def registration_summary(result: Any) -> str:
    """One line: what the registration changed, in the words of the registry's answer."""
    agent = f"{result.agent.tenant}/{result.agent.agent_id}"

    def versions(refs: list) -> str:
        return ", ".join(f"{v.id}@{v.version}" for v in refs) or "none"

    verdict = "registered (201, something new)" if result.created else "unchanged (200, nothing new)"
    return (
        f"{agent} {verdict}: published {versions(result.published)}; unchanged {versions(result.unchanged)}; "
        f"visibility {result.agent.visibility}"
    )


def discover(registry: Registry, args: argparse.Namespace) -> int:
    items = registry.discover(
        args.q,
        tag=args.tag or None,
        skill=args.skill,
        side_effect_max=args.side_effect_max,
        region=args.region,
        health=args.health,
        agent=args.agent,
        tenant=args.tenant,
        status=args.status,
        versions=args.versions,
    )
    return _emit(
        args,
        items,
        lambda caps: Rows(
            f"{len(caps)} capabilities",
            ["ref", "side effect", "scopes", "regions", "status", "health", "name"],
            ([c.ref, c.side_effect, c.scopes, c.data_regions or "any", c.status, c.health, c.name] for c in caps),
        ),
    )


def offers(registry: Registry, args: argparse.Namespace) -> int:
    ticket = None
    if args.ticket_scope:
        ticket = {"scopes": [s for value in args.ticket_scope for s in value.split()], "ttlSeconds": args.ticket_ttl}
        if args.on_behalf_of:
            ticket["onBehalfOf"] = args.on_behalf_of
    answer = registry.offers(
        args.need,
        skill=args.skill,
        tags=args.tag or None,
        region=args.region,
        side_effect_max=args.side_effect_max,
        limit=args.limit,
        ticket=ticket,
    )
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2, default=str))
        return 0
    console = _console()
    excluded = answer.excluded
    note = f"excluded: scope {excluded.scope}, region {excluded.region}, unhealthy {excluded.unhealthy}"
    if not answer.offers:
        console.print(f"[dim]no offer ({note})[/dim]")
        return 1
    rows = Rows(
        f"{len(answer.offers)} offer{'' if len(answer.offers) == 1 else 's'} ({note})",
        ["ref", "score", "relevance", "side effect", "instance", "load", "url", "ticket"],
        (
            [
                o.ref,
                f"{o.score:.3f}",
                f"{o.why.relevance:.3f}",
                o.side_effect,
                o.instance.instance_id if o.instance else "",
                o.instance.load if o.instance else "",
                o.instance.url if o.instance else "",
                _ticket_cell(o),
            ]
            for o in answer.offers
        ),
    )
    if not _to_terminal():
        print(rows.title)
        print_plain(rows.columns, rows.rows)
    else:
        print_table(console, rows)
    return 0


def _ticket_cell(offer: Any) -> str:
    if offer.ticket is not None:
        return f"granted (jti {offer.ticket.jti})"
    if offer.approval is not None:
        return f"approval pending ({offer.approval.approval_id})"
    if offer.ticket_error is not None:
        return f"refused: {offer.ticket_error.get('reason') or offer.ticket_error.get('code')}"
    return ""


def detail(registry: Registry, args: argparse.Namespace) -> int:
    found = registry.detail(args.ref)

    def schemas(console) -> None:
        from rich.json import JSON

        console.print("[bold]where[/bold]: " + (", ".join(found.urls()) or "no endpoint declared"))
        console.print("[bold]input schema[/bold]")
        console.print(JSON.from_data(found.input_schema))
        if found.output_schema:
            console.print("[bold]output schema[/bold]")
            console.print(JSON.from_data(found.output_schema))

    return _emit_one(args, found, found.ref, schemas)


def ticket_mint(registry: Registry, args: argparse.Namespace) -> int:
    scopes = [s for value in args.scope for s in value.split()]
    result = registry.mint_ticket(
        args.ref,
        scopes=scopes,
        ttl=args.ttl,
        on_behalf_of=args.on_behalf_of,
        resources=args.resource or None,
        parent_ticket=_read_value(args.parent_ticket),
        idempotency_key=args.idempotency_key,
        max_depth=args.max_depth,
    )
    if args.ticket_only:
        print(getattr(result, "ticket", None) or "")
        return 0 if getattr(result, "ticket", None) else 1
    return _emit_one(args, result, "ticket" if hasattr(result, "jti") else "approval pending")


def ticket_introspect(registry: Registry, args: argparse.Namespace) -> int:
    result = registry.introspect(_read_value(args.ticket))
    code = _emit_one(args, result, "active ticket" if result.active else "inactive ticket")
    return code if result.active else 1


def ticket_revoke(registry: Registry, args: argparse.Namespace) -> int:
    result = registry.revoke(args.jti)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"revoked {len(result.revoked)} ticket(s): {', '.join(result.revoked)}")
    return 0


def withdraw(registry: Registry, args: argparse.Namespace) -> int:
    tenant, _, agent_id = args.agent.partition("/")
    if not tenant or not agent_id or "/" in agent_id:
        print(f"capreg withdraw: {args.agent!r} is not tenant/agentId", file=sys.stderr)
        return 2
    result = registry.withdraw(tenant, agent_id)
    if args.json:
        print(json.dumps(result.to_dict()))
    elif result.retired:
        print(
            f"withdrew {args.agent}: retired {len(result.retired)} version(s), ended {result.instances_ended} lease(s)"
        )
        for ref in result.retired:
            print(f"  {ref}")
    else:
        print(f"{args.agent} was withdrawn already (at {result.withdrawn_at.isoformat()}): nothing changed")
    return 0


def audit_grants(registry: Registry, args: argparse.Namespace) -> int:
    items = registry.grants(actor=args.actor, skill=args.skill, scope=args.scope, active=not args.inactive)
    return _emit(
        args,
        items,
        lambda grants: Rows(
            f"{len(grants)} {'inactive' if args.inactive else 'active'} grants",
            ["jti", "actor", "on behalf of", "ref", "scopes", "resources", "expires", "depth"],
            (
                [
                    g.jti,
                    g.actor,
                    g.on_behalf_of,
                    g.ref,
                    g.scopes,
                    g.resources or "all",
                    g.expires_at.isoformat(timespec="seconds") if g.expires_at else "",
                    f"{g.depth}/{g.max_depth}",
                ]
                for g in grants
            ),
        ),
    )


def audit_events(registry: Registry, args: argparse.Namespace) -> int:
    items = registry.audit_events(
        type=args.type, actor=args.actor, skill=args.skill, scope=args.scope, since=args.since, until=args.until
    )
    return _emit(
        args,
        items,
        lambda events: Rows(
            f"{len(events)} events",
            ["seq", "at", "type", "outcome", "actor", "ref", "scopes", "reason"],
            (
                [
                    e.seq,
                    e.at.isoformat(timespec="seconds"),
                    e.type,
                    e.outcome,
                    f"{e.actor_tenant}/{e.actor}" if e.actor_tenant and e.actor else e.actor,
                    e.ref,
                    e.scopes,
                    e.reason,
                ]
                for e in events
            ),
        ),
    )


def replay(registry: Registry, args: argparse.Namespace) -> int:
    """Run the baseline's fixtures against the candidate's instance, submit the report, print the
    verdict: exit 0 when it passed (the candidate is active), 1 when it failed."""
    try:
        verdict = registry.replay(args.ref, args.instance_url, ticket=args.ticket, instance=args.instance)
    except ImportError:
        print("capreg replay: needs a2a-sdk: pip install 'capreg[a2a]'", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2, default=str))
    elif verdict.passed:
        print(f"passed: {verdict.version.ref if verdict.version else args.ref} is active")
    else:
        print(f"failed: {len(verdict.errors)} fixture(s) failed; {args.ref} stays a candidate")
        for error in verdict.errors:
            print(f"  {error.get('fixture')}: {error.get('kind')}: {error.get('message')}")
    return 0 if verdict.passed else 1


@overload
def _read_value(value: str) -> str: ...
@overload
def _read_value(value: None) -> None: ...
def _read_value(value: str | None) -> str | None:
    """`-` reads the value from stdin (a ticket is long and secret: keep it off the command line)."""
    if value == "-":
        return sys.stdin.read().strip()
    return value


def add_http_commands(commands: argparse._SubParsersAction, audit: argparse._SubParsersAction) -> None:
    """The HTTP commands, added to the `capreg` parser (`audit` is the audit subcommand group)."""
    discover_parser = commands.add_parser("discover", help="list capabilities (CAPREG_URL; CAPREG_TOKEN optional)")
    discover_parser.add_argument("q", nargs="?", help="words over id, name, description and tags (ranked, best first)")
    discover_parser.add_argument("--tag", action="append", help="repeatable; all must match")
    discover_parser.add_argument("--skill", help="exact id, or a prefix ending in *")
    discover_parser.add_argument("--side-effect-max", choices=["none", "idempotent", "write", "destructive"])
    discover_parser.add_argument("--region")
    discover_parser.add_argument("--health", choices=["healthy"])
    discover_parser.add_argument("--agent")
    discover_parser.add_argument("--tenant")
    discover_parser.add_argument("--status", choices=["active", "deprecated"])
    discover_parser.add_argument("--versions", choices=["latest", "all"])
    _output_flags(discover_parser)
    discover_parser.set_defaults(run=run_http(discover))

    offers_parser = commands.add_parser(
        "offers",
        help="ranked offers for NEED: capabilities you may call now, with an instance (CAPREG_URL, CAPREG_TOKEN)",
    )
    offers_parser.add_argument("need", nargs="?", help="what you need done, in words")
    offers_parser.add_argument("--skill", help="exact id, or a prefix ending in * (with or instead of NEED)")
    offers_parser.add_argument("--tag", action="append", help="repeatable; all must match")
    offers_parser.add_argument("--region", help="the data region the work must stay in")
    offers_parser.add_argument("--side-effect-max", choices=["none", "idempotent", "write", "destructive"])
    offers_parser.add_argument("--limit", type=int, help="1 to 20 (default 5)")
    offers_parser.add_argument(
        "--ticket-scope", action="append", help="also mint a ticket for the first offer with these scopes (repeatable)"
    )
    offers_parser.add_argument("--ticket-ttl", type=int, default=300, help="seconds (default 300)")
    offers_parser.add_argument("--on-behalf-of")
    _output_flags(offers_parser, ndjson=False)
    offers_parser.set_defaults(run=run_http(offers))

    detail_parser = commands.add_parser(
        "detail", help="schemas, examples and endpoints of REF (tenant/agent/skill@version)"
    )
    detail_parser.add_argument("ref")
    _output_flags(detail_parser, ndjson=False)
    detail_parser.set_defaults(run=run_http(detail))

    withdraw_parser = commands.add_parser(
        "withdraw",
        help="withdraw AGENT (tenant/agentId; registry:admin): every version retired, gone from discovery at once",
    )
    withdraw_parser.add_argument("agent")
    _output_flags(withdraw_parser, ndjson=False)
    withdraw_parser.set_defaults(run=run_http(withdraw))

    replay_parser = commands.add_parser(
        "replay",
        help="run a candidate's baseline fixtures against its A2A instance and submit the report (registry:attest)",
    )
    replay_parser.add_argument("ref", help="the candidate, tenant/agent/skill@version (exact)")
    replay_parser.add_argument("--instance-url", required=True, help="the candidate's A2A JSON-RPC endpoint")
    replay_parser.add_argument("--instance", help="the instance id, recorded with the report")
    replay_parser.add_argument("--ticket", action="store_true", help="present a capreg ticket for REF on each call")
    _output_flags(replay_parser, ndjson=False)
    replay_parser.set_defaults(run=run_http(replay))

    ticket = commands.add_parser("ticket", help="delegation tickets").add_subparsers(
        dest="ticket_command", required=True
    )
    mint = ticket.add_parser("mint", help="mint a ticket for REF (tenant/agent/skill@version-or-range)")
    mint.add_argument("ref")
    mint.add_argument(
        "--scope", action="append", required=True, help="scopes to delegate (repeatable, or space-separated)"
    )
    mint.add_argument("--ttl", type=int, default=300, help="seconds (default 300)")
    mint.add_argument("--on-behalf-of")
    mint.add_argument("--resource", action="append", help="repeatable; none means every resource")
    mint.add_argument("--parent-ticket", help="re-delegate from this ticket ('-' reads it from stdin)")
    mint.add_argument("--max-depth", type=int, default=0)
    mint.add_argument("--idempotency-key")
    mint.add_argument("--ticket-only", action="store_true", help="print only the ticket JWT")
    _output_flags(mint, ndjson=False)
    mint.set_defaults(run=run_http(ticket_mint))
    introspect = ticket.add_parser("introspect", help="ask the registry whether a ticket is active (exit 1 if not)")
    introspect.add_argument("ticket", help="the ticket JWT, or '-' to read it from stdin")
    _output_flags(introspect, ndjson=False)
    introspect.set_defaults(run=run_http(ticket_introspect))
    revoke = ticket.add_parser("revoke", help="revoke a ticket (by jti) and every ticket delegated from it")
    revoke.add_argument("jti")
    _output_flags(revoke, ndjson=False)
    revoke.set_defaults(run=run_http(ticket_revoke))

    grants = audit.add_parser("grants", help="who holds which scopes through tickets (audit:read)")
    grants.add_argument("--actor", help="minting caller: tenant/sub or sub")
    grants.add_argument("--skill")
    grants.add_argument("--scope")
    grants.add_argument("--inactive", action="store_true", help="expired, revoked or retired grants instead")
    _output_flags(grants)
    grants.set_defaults(run=run_http(audit_grants))
    events = audit.add_parser("events", help="audit events of your tenant, oldest first (audit:read)")
    events.add_argument("--type", help="e.g. ticket.denied")
    events.add_argument("--actor")
    events.add_argument("--skill")
    events.add_argument("--scope")
    events.add_argument("--since", help="RFC 3339, inclusive")
    events.add_argument("--until", help="RFC 3339, exclusive")
    _output_flags(events)
    events.set_defaults(run=run_http(audit_events))
