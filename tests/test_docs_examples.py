"""Every example of README.md and the docs runs, and prints what the page shows (conventions: tests/docs_examples.py).

Fast examples run with the suite. Slow ones (more than about 5 s) and those that read ../shared run with
``LLMCO2_DOCS_SLOW=1 .venv/bin/python -m pytest -q tests/test_docs_examples.py``.
The site itself is built with ``mkdocs build --strict`` (warnings are errors) by ``test_site_builds_strictly``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_examples import ROOT, SHARED, Block, doc_pages, make_workspace, matches, normalise, parse_blocks, run_page

PAGES = doc_pages()
SLOW = os.environ.get("LLMCO2_DOCS_SLOW") == "1"


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _blocks(path: Path, tags: set[str]) -> list[Block]:
    return [block for block in parse_blocks(path) if block.runnable and block.tag in tags]


def test_every_example_is_runnable_or_skipped_with_a_reason() -> None:
    problems = [f"{block.where}: {problem}" for page in PAGES for block in parse_blocks(page) for problem in block.problems]
    assert not problems, "\n".join(problems)
    assert sum(len(_blocks(page, {"fast"})) for page in PAGES) >= 10


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p, {"fast"})], ids=_page_id)
def test_fast_examples(page: Path, tmp_path: Path) -> None:
    failures = run_page(_blocks(page, {"fast"}), make_workspace(tmp_path))
    assert not failures, "\n\n".join(failures)


@pytest.mark.skipif(not SLOW, reason="slow and ../shared examples run with LLMCO2_DOCS_SLOW=1")
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p, {"slow", "needs-shared"})], ids=_page_id)
def test_slow_examples(page: Path, tmp_path: Path) -> None:
    blocks = _blocks(page, {"fast", "slow", "needs-shared"})  # in page order: later blocks may use earlier files
    if any(block.tag == "needs-shared" for block in blocks) and not SHARED.exists():
        pytest.skip(f"needs the shared data folder {SHARED}")
    failures = run_page(blocks, make_workspace(tmp_path))
    assert not failures, "\n\n".join(failures)


def test_output_comparison_rules() -> None:
    assert matches(normalise("a  \nb\n\n"), ["a", "b"])
    assert matches(["took ... s"], ["took 0.31 s"]) and not matches(["took 1 s"], ["took 2 s"])
    assert matches(["x", "...", "z"], ["x", "y1", "y2", "z"]) and not matches(["x", "z"], ["x", "y", "z"])
    assert normalise("wrote /tmp/w/repo/out.csv", Path("/tmp/w/repo")) == ["wrote out.csv"]


def _code_text(page: Path) -> str:
    """The fenced blocks and inline code spans of a page (where commands are written)."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    return "\n".join(blocks + spans)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def test_documented_commands_exist() -> None:
    """Every `llmco2 COMMAND [SUBCOMMAND]` and `python -m MODULE` written in the README and the docs exists,
    skipped examples included (they are not run, so this is what keeps their names current)."""
    from llmco2.cli import build_parser

    parser, _ = build_parser()
    groups = {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
              for name, sub in action.choices.items()}
    unknown, modules = [], set()
    for page in PAGES:
        code = _code_text(page)
        modules |= set(re.findall(r"python -m ([a-zA-Z_][\w.]*)", code))
        for command, what in re.findall(r"(?:^|[\s(;&|]|\$ )llmco2 ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", code, flags=re.M):
            if command not in groups:
                unknown.append(f"{_page_id(page)}: llmco2 {command}")
                continue
            subs = [a for a in groups[command]._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and what and what not in subs[0].choices:
                unknown.append(f"{_page_id(page)}: llmco2 {command} {what}")
    assert not unknown, f"commands in the docs that the parser does not have: {sorted(set(unknown))}"
    missing = sorted(m for m in modules - {"pytest", "mkdocs", "pip", "venv"} if not _module_exists(m))
    assert not missing, f"modules run with python -m in the docs that do not exist: {missing}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_site_builds_strictly(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()


def test_readme_ranking_table_is_the_benchmark_result() -> None:
    """Each row of the README's ranking table is the row of experiments/results/ranking.md for that
    source (pairs, tau, share right), so neither changes alone."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    result = (root / "experiments" / "results" / "ranking.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and line.count("|") == 6 and "Kendall" not in line]
    assert len(rows) == 6  # Argonne twice: predicted at its readings' scope and at GPU scope
    measured = [[c.strip() for c in line.strip().strip("|").split("|")] for line in result.splitlines() if line.startswith("| ")]
    for row in rows:
        source, gpus, pairs, tau, right = (c.strip() for c in row.strip().strip("|").split("|"))
        assert any(cells[:2] == [source, gpus] and cells[3:6] == [pairs, tau, right] for cells in measured), row
