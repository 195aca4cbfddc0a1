"""Rewrite the shown output of the console examples of README.md and docs/**/*.md with what their
commands print now (the runner of ``tests/test_docs_examples.py`` checks them; this brings them up
to date after a change of output, for review with ``git diff``).

    python docs/update_examples.py [PAGE ...]          # default: every page; slow blocks with --slow

A shown line holding ``...`` is kept when the printed line still matches it (timings). Python
(doctest) blocks are not rewritten: the test names their differences.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.docs_examples import (  # noqa: E402
    COMMAND_TIMEOUT_S,
    _line_pattern,
    command_env,
    console_commands,
    doc_pages,
    make_workspace,
    normalise,
    parse_blocks,
)


def printed(command: str, workspace: Path) -> list[str]:
    proc = subprocess.run(["bash", "-c", command], cwd=workspace, env=command_env(workspace), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    return normalise(proc.stdout, workspace)


def command_lines(block: object) -> list[list[str]]:
    """The lines of each command of a console block as typed (``$ `` and its ``\\`` continuations)."""
    out: list[list[str]] = []
    continuing = False
    for line in block.text.splitlines():  # type: ignore[attr-defined]
        if line.startswith("$ ") or continuing:
            if line.startswith("$ ") and not continuing:
                out.append([])
            out[-1].append(line)
            continuing = line.endswith("\\")
    return out


def keep_ellipses(shown: list[str], actual: list[str]) -> list[str]:
    """``actual``, with each line that a shown ``...`` line at the same place still matches kept as shown."""
    return [s if i < len(shown) and "..." in s and _line_pattern(s).match(a) else a
            for i, (s, a) in enumerate(zip(shown + [""] * len(actual), actual, strict=False))]


def update_page(path: Path, slow: bool) -> int:
    """Rewrite ``path``'s console outputs; the number of commands whose output changed."""
    blocks = [b for b in parse_blocks(path) if b.lang == "console" and (b.tag == "fast" or (slow and b.tag != "skip"))]
    if not blocks:
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = 0
    rewrites: list[tuple[int, int, list[str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp))
        for block in sorted(blocks, key=lambda b: b.line):  # in page order: later commands may use earlier files
            out: list[str] = []
            for (command, shown), typed in zip(console_commands(block), command_lines(block), strict=True):
                expected = normalise(shown)
                actual = keep_ellipses(expected, printed(command, workspace))
                changed += actual != expected
                out += [*typed, *actual]
            rewrites.append((block.line, block.line + len(block.text.splitlines()), out))
    for start, end, out in reversed(rewrites):  # later blocks first: earlier line numbers hold
        lines[start:end] = out
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", type=Path)
    ap.add_argument("--slow", action="store_true", help="also the slow and needs-shared blocks")
    args = ap.parse_args()
    for page in args.pages or doc_pages():
        n = update_page(page.resolve(), args.slow)
        if n:
            print(f"{page}: {n} outputs rewritten")


if __name__ == "__main__":
    main()
