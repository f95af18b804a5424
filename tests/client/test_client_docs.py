"""docs/client.md works as pasted: every Python block of the page, extracted from it (so the page
cannot drift from what runs), run in order in one Python process from a scratch checkout against a
real `capreg serve` on a fresh database, with the token the page says to mint; each `# -> ` output
it shows is what its block printed (tests/docs_support.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tests.conftest import ROOT, capreg, scratch_checkout
from tests.docs_support import code_blocks, shown_outputs, unmatched_outputs

MARK = "@@@ client.md block "
TOKEN_COMMAND = re.compile(r"export CAPREG_TOKEN=\$\(capreg (token mint [^)]*)\)")


def test_client_docs_run_as_pasted(fresh_server, tmp_path):
    base, env, _ = fresh_server
    page = (ROOT / "docs" / "client.md").read_text()
    # The token the page tells its reader to mint, minted the same way.
    [command] = TOKEN_COMMAND.findall(page.replace("\\\n", " "))
    token = capreg(env, *shlex.split(command)).stdout.strip()
    blocks = code_blocks(ROOT / "docs" / "client.md", None, ("python",))
    assert len(blocks) >= 8
    script = "\n".join(f"print({MARK + str(i)!r}, flush=True)\n{text}" for i, (_, _, text) in enumerate(blocks))
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=scratch_checkout(tmp_path),
        env={**env, "CAPREG_URL": base, "CAPREG_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
    )
    parts = re.split(rf"^{re.escape(MARK)}(\d+)$", result.stdout, flags=re.M)
    outputs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}
    report = "\n".join(f"--- block {i}:\n{outputs.get(i, '(not reached)')}" for i in range(len(blocks)))
    report += "\n--- stderr:\n" + result.stderr[-4000:]
    assert result.returncode == 0, report
    wrong = {
        i: missing
        for i, (_, _, text) in enumerate(blocks)
        if (missing := unmatched_outputs(shown_outputs(text), outputs.get(i, "")))
    }
    assert not wrong, f"shown but not printed: {wrong}\n{report}"
    assert sum(bool(shown_outputs(text)) for _, _, text in blocks) >= 6
