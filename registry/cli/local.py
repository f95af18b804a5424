"""The `capreg` command: serve, migrate, token mint, keys rotate, audit verify|checkpoint, openapi; the
commands that go through the HTTP API (register, discover, offers, detail, ticket, audit grants|events) are in
registry.cli.remote."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from registry.cli.cards import add_card_commands
from registry.cli.remote import add_http_commands, run_http
from registry.cli.remote import register as http_register
from registry.config import Settings, load_settings

OPENAPI_PATH = Path("openapi/openapi.json")


async def _with_database(settings: Settings, work):
    """Run `work(conn)` on a migrated database with a signing key (embedded or DATABASE_URL)."""
    from db.embedded import resolve_database_url
    from db.migrate import apply_migrations
    from db.pool import connect
    from registry.core.signing_keys import ensure_signing_key

    dsn, embedded = resolve_database_url(settings.database_url, settings.home)
    conn = await connect(dsn)
    try:
        await apply_migrations(conn)
        await ensure_signing_key(conn)
        return await work(conn)
    finally:
        await conn.close()
        del embedded


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from granian import Granian
    from granian.constants import Interfaces

    from db.embedded import resolve_database_url
    from db.migrate import apply_migrations
    from db.pool import connect
    from registry.core.signing_keys import ensure_signing_key

    dsn, embedded = resolve_database_url(settings.database_url, settings.home)

    async def prepare() -> None:
        conn = await connect(dsn)
        try:
            await apply_migrations(conn)
            await ensure_signing_key(conn)
        finally:
            await conn.close()

    asyncio.run(prepare())
    # Workers inherit the resolved URL, so they share this process's embedded server.
    os.environ["DATABASE_URL"] = dsn
    host = args.host or settings.host
    port = args.port or settings.port
    # Workers read their listen address from the environment: it is the registry's URL when
    # CAPREG_PUBLIC_URL is unset, and decides whether loopback endpoint URLs are allowed.
    os.environ["CAPREG_HOST"], os.environ["CAPREG_PORT"] = host, str(port)
    print(
        f"capreg serving on http://{host}:{port} ({'embedded PostgreSQL' if embedded else 'DATABASE_URL'})", flush=True
    )
    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1:
        raise SystemExit("--workers must be at least 1")
    metrics_dir = None
    if workers > 1:  # one scrape of /metrics sums every worker (registry.web.observability)
        metrics_dir = tempfile.mkdtemp(prefix="capreg-metrics-")
        os.environ["CAPREG_METRICS_DIR"] = metrics_dir
    try:
        Granian(
            "registry.app:create_app",
            address=host,
            port=port,
            interface=Interfaces.ASGI,
            factory=True,
            workers=workers,
            log_access=False,
        ).serve()
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    del embedded
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from db.migrate import apply_migrations

    async def work(conn):
        return await apply_migrations(conn)

    async def run():
        from db.embedded import resolve_database_url
        from db.pool import connect

        dsn, embedded = resolve_database_url(settings.database_url, settings.home)
        conn = await connect(dsn)
        try:
            applied = await work(conn)
            from registry.core.signing_keys import ensure_signing_key

            await ensure_signing_key(conn)
            return applied
        finally:
            await conn.close()
            del embedded

    applied = asyncio.run(run())
    print("applied: " + ", ".join(applied) if applied else "migrations are current")
    return 0


def cmd_token_mint(args: argparse.Namespace, settings: Settings) -> int:
    from auth.tokens import mint_caller_token
    from registry.core.signing_keys import load_keyring

    async def work(conn):
        keyring = await load_keyring(conn)
        return mint_caller_token(
            keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            tenant=args.tenant,
            sub=args.sub,
            scopes=args.scope.split(),
            ttl=args.ttl,
            regions=[r for r in args.regions.split(",") if r] if args.regions is not None else None,
        )

    print(asyncio.run(_with_database(settings, work)))
    return 0


def cmd_keys_rotate(args: argparse.Namespace, settings: Settings) -> int:
    from registry.core.signing_keys import rotate_key

    # The old key stays published for --keep-seconds (caller tokens it signed) and, whatever that is,
    # until the last ticket it signed has expired: the database knows those (db/keys.py), exactly.
    # --keep-seconds 0 removes it at once (a leaked key): every token and ticket it signed stops working.
    keep = timedelta(seconds=max(0, args.keep_seconds))

    async def work(conn):
        return await rotate_key(conn, keep)

    kid = asyncio.run(_with_database(settings, work))
    if not keep:
        print(f"new signing key {kid}; the previous key is removed: its tokens and tickets no longer verify")
    else:
        print(
            f"new signing key {kid}; the previous key stays in the JWKS for at least {int(keep.total_seconds())} s "
            "and until the last ticket it signed has expired"
        )
    return 0


def cmd_audit_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0: intact. 1: tampered (the first bad seq is named). 2: could not check (e.g. a bad file)."""
    if args.url:
        from registry.audit.remote_verify import verify_remote

        with _verify_progress() as progress:
            return verify_remote(args.url, os.environ.get("CAPREG_TOKEN"), state_file=args.state, progress=progress)
    if args.state is not None:
        print("--state goes with --url (the remote check of one tenant's chain)", file=sys.stderr)
        return 2
    from db.checkpoints import every_public_key
    from registry.audit.chain import verify_stored_chain
    from registry.audit.checkpoints import Checkpoint, jwks_keys

    try:
        external = [msgspec.json.decode(Path(f).read_bytes(), type=Checkpoint) for f in args.checkpoint]
    except (OSError, msgspec.DecodeError) as exc:
        print(f"cannot read checkpoint file: {exc}", file=sys.stderr)
        return 2

    with _verify_progress() as progress:

        async def work(conn):
            keys = jwks_keys(await every_public_key(conn))
            return await verify_stored_chain(conn, keys, external=external, progress=progress)

        try:
            report = asyncio.run(_with_database(settings, work))
        except Exception as exc:  # exit 1 means tampered: an unreachable database must not look like that
            print(f"cannot check the audit log: {exc!r}", file=sys.stderr)
            return 2
    if report.breach is not None:
        print(report.breach.describe())
        return 1
    from registry.audit.verify_summary import intact_summary

    print(
        intact_summary(
            report.events,
            report.head_seq,
            report.checkpoints,
            chains=report.chains,
            last_seq=report.last_seq,
            external=len(external),
        )
    )
    return 0


@contextlib.contextmanager
def _verify_progress():
    """A rich progress bar on stderr when it is a terminal (long logs take a while), else nothing;
    yields the callback verify_stored_chain reports to."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("checking the audit chain"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("verify", total=None)

        def progress(seq: int, head: int) -> None:
            bar.update(task, completed=seq, total=head)

        yield progress


def cmd_audit_checkpoint(args: argparse.Namespace, settings: Settings) -> int:
    from registry.audit.chain import ChainBroken, make_checkpoint
    from registry.core.signing_keys import load_keyring

    async def work(conn):
        return await make_checkpoint(conn, await load_keyring(conn), settings.issuer, at=datetime.now(UTC))

    try:
        checkpoint = asyncio.run(_with_database(settings, work))
    except ChainBroken as exc:
        print(f"no checkpoint signed: {exc}")
        return 1
    print(msgspec.json.encode(checkpoint).decode())
    return 0


def openapi_document() -> bytes:
    from registry.app import create_app
    from registry.web.openapi_strict import document_bytes

    return document_bytes(create_app(Settings()).openapi_schema.to_schema())


def cmd_openapi(args: argparse.Namespace, settings: Settings) -> int:
    document = openapi_document()
    path = Path(args.output)
    if args.check:
        current = path.read_bytes() if path.exists() else b""
        if current != document:
            print(f"{path} is out of date: run `capreg openapi` and commit it", file=sys.stderr)
            return 1
        print(f"{path} is current")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(document)
    print(f"wrote {path}")
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """An MCP stdio server forwarding to a registry's /mcp (for clients that only launch local servers)."""
    from registry.mcp.bridge import run_bridge

    url = args.url or os.environ.get("CAPREG_URL") or f"http://{settings.host}:{settings.port}"
    token = args.token or os.environ.get("CAPREG_TOKEN") or None
    try:
        return asyncio.run(run_bridge(url, token))
    except KeyboardInterrupt:
        return 0


def add_mcp_command(commands) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="MCP stdio server forwarding to a registry's /mcp endpoint (CAPREG_URL, CAPREG_TOKEN)",
    )
    mcp.add_argument("--url", help="registry base URL (default: CAPREG_URL, else this machine's capreg serve)")
    mcp.add_argument("--token", help="bearer token sent to the registry (default: CAPREG_TOKEN; none: anonymous)")
    mcp.set_defaults(run=cmd_mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capreg", description="Capability registry for AI agents")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP server (embedded PostgreSQL unless DATABASE_URL)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers", type=int, help="worker processes (default: CAPREG_WORKERS, else one per core, at most 8)"
    )
    serve.set_defaults(run=cmd_serve)

    commands.add_parser("migrate", help="apply database migrations").set_defaults(run=cmd_migrate)

    token = commands.add_parser("token", help="caller tokens").add_subparsers(dest="token_command", required=True)
    mint = token.add_parser("mint", help="print a caller token signed by capreg")
    mint.add_argument("--tenant", required=True)
    mint.add_argument("--sub", required=True)
    mint.add_argument("--scope", default="", help='space-separated scopes, e.g. "registry:read invoice:read"')
    mint.add_argument("--regions", help="comma-separated data regions, e.g. eu,us")
    mint.add_argument("--ttl", type=int, default=3600, help="seconds; negative gives an expired token")
    mint.set_defaults(run=cmd_token_mint)

    keys = commands.add_parser("keys", help="signing keys").add_subparsers(dest="keys_command", required=True)
    rotate = keys.add_parser("rotate", help="make a new signing key current")
    rotate.add_argument(
        "--keep-seconds",
        type=int,
        default=3600,
        help="keep the previous key published at least this long, for the caller tokens it "
        "signed (default 3600); it also stays until the last ticket it signed has expired. "
        "0 removes it at once, with every token and ticket it signed",
    )
    rotate.set_defaults(run=cmd_keys_rotate)

    register = commands.add_parser("register", help="register an agent card file (CAPREG_URL, CAPREG_TOKEN)")
    register.add_argument("file")
    register.add_argument("--tenant", required=True)
    register.add_argument("--agent-id", required=True)
    register.add_argument("--json", action="store_true", help="print the registry's answer as JSON")
    register.set_defaults(run=run_http(http_register))

    audit = commands.add_parser("audit", help="audit log").add_subparsers(dest="audit_command", required=True)
    verify = audit.add_parser(
        "verify",
        help="recompute every hash chain (or, with --url, your tenant's over HTTP); exit 1 names the first bad entry",
    )
    verify.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="FILE",
        help="also check against a signed checkpoint kept outside the database (repeatable)",
    )
    verify.add_argument(
        "--url", metavar="URL", help="verify the chain of CAPREG_TOKEN's tenant over HTTP alone (an audit:read token)"
    )
    verify.add_argument(
        "--state",
        metavar="FILE",
        type=Path,
        help="with --url: check that the chain only grew since the run that wrote FILE, then update it",
    )
    verify.set_defaults(run=cmd_audit_verify)
    audit.add_parser("checkpoint", help="sign the chain head now; prints the checkpoint").set_defaults(
        run=cmd_audit_checkpoint
    )

    add_http_commands(commands, audit)
    add_card_commands(commands)

    openapi = commands.add_parser("openapi", help="write (or --check) openapi/openapi.json")
    openapi.add_argument("--check", action="store_true")
    openapi.add_argument("--output", default=str(OPENAPI_PATH))
    openapi.set_defaults(run=cmd_openapi)
    add_mcp_command(commands)
    return parser


# The exit status of a command whose reader went away (`capreg ... | head -1`): 128 + SIGPIPE, what the
# shell reports for a program the signal ended.
EXIT_CLOSED_PIPE = 141


def _closed_pipe(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from or during, is a write to a closed pipe (EPIPE)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _end_quietly() -> int:
    """The reader of stdout is gone: point stdout at /dev/null so that Python's final flush of what is
    still buffered cannot fail again at exit (docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_CLOSED_PIPE


def main(argv: list[str] | None = None) -> int:
    """Run one command. A closed stdout (a pipe into `head`) ends it quietly with exit 141; its other
    errors are one line on stderr."""
    import asyncpg

    args = build_parser().parse_args(argv)
    try:
        code = args.run(args, load_settings())
        sys.stdout.flush()  # here, not at exit: a reader gone meanwhile is seen below
        return code
    except Exception as exc:
        if _closed_pipe(exc):
            return _end_quietly()
        if isinstance(exc, (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
            # A command-line user gets the reason, not a traceback: usually DATABASE_URL or CAPREG_HOME.
            print(f"capreg {args.command}: cannot use the database: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
