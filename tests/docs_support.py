"""Running the documentation's examples as a reader pastes them: the code blocks of a Markdown file
by section, and the outputs a block shows (`# -> ...` comment lines) compared with what it printed.

A shown output is a `# -> ` comment line, continued by the comment lines right after it that start
with `#    ` (four spaces). In it, `...` stands for anything on one line (ids, times, signatures,
fields left out) and a run of spaces for any white space (so `{"a": 1}` shows the compact `{"a":1}`); the rest
must be printed as written, each shown output after the previous one in the block's output.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

_SECTION = re.compile(r"^## (.+)$", re.M)
_FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```$", re.M | re.S)
SHOWN = "# -> "
CONTINUED = "#    "


def code_blocks(path: Path, sections: tuple[str, ...] | None, languages: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(section, language, text) of every block in `languages` under the `## ` headings `sections`
    (every heading: None), in file order; a block indented under a list item is dedented."""
    text = path.read_text()
    heads = [(m.start(), m.group(1).strip()) for m in _SECTION.finditer(text)]
    blocks = []
    for match in _FENCE.finditer(text):
        section = next((name for start, name in reversed(heads) if start < match.start()), "")
        if (sections is None or section in sections) and match.group(2) in languages:
            blocks.append((section, match.group(2), textwrap.dedent(match.group(3))))
    return blocks


def shown_outputs(block: str) -> list[str]:
    """The outputs a block shows, in order, each as written after `# -> ` (continuations joined by
    a newline)."""
    shown: list[str] = []
    open_one = False
    for line in block.splitlines():
        stripped = line.strip()
        if stripped.startswith(SHOWN):
            shown.append(stripped[len(SHOWN) :])
            open_one = True
        elif open_one and stripped.startswith(CONTINUED):
            shown[-1] += "\n" + stripped[len(CONTINUED) :]
        else:
            open_one = False
    return shown


def plain_comments(block: str) -> list[str]:
    """The block's whole-line comments that are not shown outputs (an answer written there would
    never be compared)."""
    plain: list[str] = []
    open_one = False
    for line in block.splitlines():
        stripped = line.strip()
        if stripped.startswith(SHOWN) or (open_one and stripped.startswith(CONTINUED)):
            open_one = True
        else:
            open_one = False
            if stripped.startswith("#"):
                plain.append(stripped)
    return plain


def output_pattern(shown: str) -> re.Pattern[str]:
    """`shown` as a pattern: `...` any text, white space any white space (or none), the rest literal."""
    parts = []
    for piece in shown.split("..."):
        words = piece.split()
        literal = r"\s*".join(re.escape(word) for word in words)
        # White space next to `...` stays on its line, so `...` never reaches into another line.
        if piece[:1].isspace():
            literal = r"[ \t]*" + literal
        if piece[-1:].isspace() and words:
            literal += r"[ \t]*"
        parts.append(literal)
    return re.compile("[^\n]*?".join(parts))


def unmatched_outputs(shown: list[str], printed: str) -> list[str]:
    """The shown outputs not found in `printed`, each looked for after the previous one found."""
    missing, position = [], 0
    for one in shown:
        found = output_pattern(one).search(printed, position)
        if found is None:
            missing.append(one)
        else:
            position = found.end()
    return missing
