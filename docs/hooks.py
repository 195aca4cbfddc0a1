"""MkDocs hook: add the generated command-line reference (reference/cli.md) to the site."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.structure.files import File, Files

_spec = importlib.util.spec_from_file_location("gen_cli_reference", Path(__file__).with_name("gen_cli_reference.py"))
assert _spec is not None and _spec.loader is not None
_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gen)


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=_gen.cli_reference_markdown()))
    return files
