"""The catalog cache is an optimisation that cannot change a number: an edited or damaged copy is
ignored (the TOML file is parsed again), an intact one is used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmco2.specs.toml_cache import loads_toml

TEXT = 'world = 484.4\n[region.fra]\ng = 55.3\n'


def _entry(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "toml-v2").glob("grid-*.json")
    return found


def test_intact_cache_is_used_and_edited_one_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMCO2_CACHE_DIR", str(tmp_path))
    first = loads_toml(TEXT, "grid")
    assert first == {"world": 484.4, "region": {"fra": {"g": 55.3}}}
    path = _entry(tmp_path)
    assert loads_toml(TEXT, "grid") == first
    entry = json.loads(path.read_text())
    entry["doc"] = entry["doc"].replace("484.4", "4844")  # edited without its digest
    path.write_text(json.dumps(entry))
    assert loads_toml(TEXT, "grid")["world"] == 484.4
    path.write_text(json.dumps({"world": 4844}))  # a bare document, as an earlier cache held
    assert loads_toml(TEXT, "grid")["world"] == 484.4
    path.write_text("not json")
    assert loads_toml(TEXT, "grid")["world"] == 484.4
