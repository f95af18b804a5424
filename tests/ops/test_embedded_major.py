"""The embedded PostgreSQL refuses a data directory created by another PostgreSQL major, before any
server starts, with the way to upgrade (docs/deployment.md). No PostgreSQL is started here: the
refusal must come from reading PG_VERSION, and an unchanged data directory shows it came first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from db.embedded import EMBEDDED_PG_MAJOR, UPGRADE_DOC, start_embedded
from tests.conftest import ROOT


def old_data_directory(home, major: int):
    pgdata = home / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text(f"{major}\n")
    return pgdata


def test_a_data_directory_of_another_major_is_refused_with_the_way_to_upgrade(tmp_path):
    old_major = EMBEDDED_PG_MAJOR - 2
    pgdata = old_data_directory(tmp_path, old_major)
    with pytest.raises(SystemExit) as refused:
        start_embedded(tmp_path)
    message = str(refused.value.code)
    assert f"created by PostgreSQL {old_major}" in message
    assert f"runs PostgreSQL {EMBEDDED_PG_MAJOR}" in message
    assert "dump" in message and "restore" in message and UPGRADE_DOC in message
    assert sorted(path.name for path in pgdata.iterdir()) == ["PG_VERSION"]  # nothing started or written


def test_capreg_migrate_says_so_and_exits_non_zero(tmp_path):
    """What an operator sees: the message on stderr and exit status 1, not a traceback."""
    old_data_directory(tmp_path, EMBEDDED_PG_MAJOR + 1)
    env = {"PATH": "/usr/bin:/bin", "CAPREG_HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "registry.cli.local", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert f"created by PostgreSQL {EMBEDDED_PG_MAJOR + 1}" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_doc_the_message_names_has_that_section():
    path, _, anchor = UPGRADE_DOC.partition("#")
    headings = [line.lstrip("#").strip() for line in (ROOT / path).read_text().splitlines() if line.startswith("#")]
    # GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
    anchors = {"".join(c for c in h.lower() if c.isalnum() or c in " -").replace(" ", "-") for h in headings}
    assert anchor in anchors
