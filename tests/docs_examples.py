"""Run the examples of README.md and docs/**/*.md and compare their shown output with what they print.

The conventions (also on the docs' contributing page):

* A ```` ```console ```` block holds commands and their output. A line that starts with ``$ `` is a
  command (a trailing ``\\`` continues it on the next line); the lines after it, up to the next
  command, are what it prints (stdout and stderr together). ``llmco2`` and ``python`` are the
  repository's: ``python -m llmco2.cli`` and the interpreter running the tests.
* A ```` ```python ```` block is doctest style: ``>>> `` (and ``... ``) lines are code, the lines after
  them what it prints.
* Commands run in a scratch folder that links every top-level entry of the repository, so paths
  such as ``llmco2/carbon/data/...`` or ``experiments/...`` work and files a command writes land in
  the scratch folder; ``../shared`` is the shared data folder beside the repository. All the blocks
  of one page share one folder, in page order. Rich tables are printed ``COLUMNS=100`` wide.
* Compared as printed, except: spaces at line ends and blank lines at the end are ignored, the
  scratch folder's path is removed, and ``...`` in a shown line stands for any text on that line (a
  line that is only ``...`` for any number of lines). Use ``...`` only for what changes from run to
  run (timings), never for a number the example is about.
* A command may exit non-zero only when its shown output says ``error``.
* An HTML comment on the line just before a block tags it:
  ``<!-- example: slow -->`` (more than about 5 s), ``<!-- example: needs-shared -->`` (reads
  ``../shared``), ``<!-- example: skip: REASON -->`` (never run: needs a GPU, hours, or writes into
  the repository). Slow and needs-shared blocks run only with ``LLMCO2_DOCS_SLOW=1``.
* Every ``console``, ``python``, ``bash``, ``sh`` or ``shell`` block is an example: it must be runnable
  in the forms above or tagged ``skip`` with a reason. Blocks in other languages (``text``,
  ``json``, ``toml``, none) are shown, not run.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
EXAMPLE_LANGS = {"console", "python", "pycon", "bash", "sh", "shell"}
TAGS = {"fast", "slow", "needs-shared", "skip"}
COLUMNS = "100"
COMMAND_TIMEOUT_S = 900

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`]*)$")
_TAG = re.compile(r"^<!--\s*example:\s*(?P<tag>[a-z-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    tag: str = "fast"
    reason: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.tag != "skip" and self.lang in EXAMPLE_LANGS


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the docs, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the tag of the comment just above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        lang = match["info"].strip().split(" ")[0].strip("{}.").lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,{indent + 3}}}{fence}`*\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1  # the closing fence
        block = Block(path, start + 1, lang, "\n".join(body) + "\n")
        above = lines[start - 1].strip() if start > 0 else ""
        tag = _TAG.match(above)
        if tag:
            block.tag, block.reason = tag["tag"], (tag["reason"] or "").strip()
            if block.tag not in TAGS:
                block.problems.append(f"unknown tag {block.tag!r} (use one of {sorted(TAGS)})")
            if block.tag == "skip" and not block.reason:
                block.problems.append("a skip tag needs a reason: <!-- example: skip: REASON -->")
        elif above.startswith("<!--") and "example" in above:
            block.problems.append(f"unreadable tag comment: {above}")
        if block.lang in EXAMPLE_LANGS and block.tag != "skip":
            if block.lang in {"bash", "sh", "shell"}:
                block.problems.append(f"a ```{block.lang} block is not checked: write it as ```console with "
                                      "'$ ' commands and their output, or tag it skip with a reason")
            elif block.lang == "console" and not any(line.startswith("$ ") for line in body):
                block.problems.append("a ```console block needs '$ ' command lines")
            elif block.lang in {"python", "pycon"} and not any(line.startswith(">>> ") for line in body):
                block.problems.append("a ```python block must be doctest style ('>>> ' lines and their output)")
        blocks.append(block)
    return blocks


def console_commands(block: Block) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(line)
        i += 1
    return [(command, "\n".join(out)) for command, out in pairs]


def normalise(text: str, workspace: Path | None = None) -> list[str]:
    """Lines without trailing spaces or trailing blank lines, and without the scratch folder's path."""
    if workspace is not None:
        for spelling in (f"{workspace}/", str(workspace), f"{workspace.parent}/", str(workspace.parent)):
            text = text.replace(spelling, "")
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile("^" + ".*?".join(re.escape(part) for part in expected.split("...")) + "$")


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the printed lines match the shown ones (``...``: any text; a lone ``...``: any lines)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and bool(_line_pattern(head).match(actual[0])) and matches(rest, actual[1:])


def make_workspace(tmp: Path) -> Path:
    """A scratch folder that links the repository's top-level entries (and ../shared), plus a bin folder."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name in {"outputs", "site"} or entry.name.endswith(".egg-info"):
            continue
        (repo / entry.name).symlink_to(entry)
    if SHARED.exists():
        (tmp / "shared").symlink_to(SHARED)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "llmco2").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m llmco2.cli "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    return repo


def command_env(workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "CLICOLOR_FORCE", "PYTHONSTARTUP"}}
    env.update({"PATH": f"{workspace.parent / 'bin'}{os.pathsep}{env.get('PATH', '')}", "PYTHONPATH": str(ROOT),
                "COLUMNS": COLUMNS, "LINES": "50", "NO_COLOR": "1", "TERM": "dumb", "LLMCO2_CACHE_DIR": str(workspace.parent / "cache")})
    return env


def run_console(block: Block, workspace: Path) -> list[str]:
    """Run a console block's commands; the list of mismatches (empty when every output matches)."""
    failures = []
    for command, shown in console_commands(block):
        proc = subprocess.run(["bash", "-c", command], cwd=workspace, env=command_env(workspace), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
        expected, actual = normalise(shown), normalise(proc.stdout, workspace)
        if not matches(expected, actual):
            failures.append(f"{block.where}: $ {command}\n--- shown\n" + "\n".join(expected)
                            + "\n--- printed\n" + "\n".join(actual))
        elif proc.returncode != 0 and "error" not in shown:
            failures.append(f"{block.where}: $ {command}\nexit code {proc.returncode}; only an example whose "
                            "shown output says 'error' may fail\n" + "\n".join(actual))
    return failures


def run_python(block: Block, workspace: Path, globs: dict[str, object]) -> list[str]:
    """Run a doctest block in the page's namespace ``globs``, with the workspace as working folder."""
    failures = []
    parser = doctest.DocTestParser()
    old_cwd, old_columns = Path.cwd(), os.environ.get("COLUMNS")
    os.chdir(workspace)
    os.environ["COLUMNS"] = COLUMNS
    try:
        test = parser.get_doctest(block.text, globs, block.where, str(block.path), block.line)
        report: list[str] = []
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
        runner.run(test, out=report.append, clear_globs=False)
        globs.update(test.globs)  # DocTest runs on a copy; later blocks of the page see these names
        if runner.failures:
            failures.append(f"{block.where}:\n" + "".join(report))
    finally:
        os.chdir(old_cwd)
        if old_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_columns
    return failures


def run_page(blocks: list[Block], workspace: Path) -> list[str]:
    """Run the given blocks of one page in order: console blocks as commands, python blocks as doctests."""
    failures: list[str] = []
    globs: dict[str, object] = {"__name__": "__docs__"}
    for block in blocks:
        if block.lang == "console":
            failures += run_console(block, workspace)
        elif block.lang in {"python", "pycon"}:
            failures += run_python(block, workspace, globs)
    return failures
