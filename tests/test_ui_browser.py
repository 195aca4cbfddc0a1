"""The calculator page in a real headless browser: the distribution's Chromium (``/usr/bin/chromium``,
Debian's ``chromium`` package, installed by ``.ci/run``) driven by Playwright, against the app served
by uvicorn on a free port of this machine.

The page loads in under 2 s; the form filled as a user would (llama3.1-8b on h100 and l4, 8
concurrent requests, a TPOT target of 50 ms) shows the same numbers as ``llmco2.compare`` for the same inputs; a bad input
shows the message ``llmco2 compare`` prints. A screenshot of each state is kept in
``tests/artifacts/ui/`` (ignored by git); ``LLMCO2_UPDATE_FIGURES=1`` also copies the results'
screenshot to ``docs/figures/ui.png``.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the ui extra is not installed (pip install 'llmco2[ui]')")
uvicorn = pytest.importorskip("uvicorn", reason="the ui extra is not installed (pip install 'llmco2[ui]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

import llmco2  # noqa: E402
from llmco2.cli.ui import build_app  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("LLMCO2_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts" / "ui"
#: Flags for a root, offline, headless Chromium (no sandbox as root; no calls home that this
#: machine's closed network would refuse).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
#: The request the form is filled with, as ``llmco2.compare`` takes it.
INPUTS = dict(gpus="h100,l4", concurrency=8, max_gpus=2, serving_requests=60, seed=0, slo_tpot_s=0.05)

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """The app (with the command line's wording of errors) on a free port, in a thread."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the server did not start"
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, url: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot -> {path}")
    return path


def open_form(page: Any, url: str) -> float:
    """Load the page and wait until its pickers are filled; the seconds it took."""
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return time.perf_counter() - started


def fill(page: Any, gpus: str, load: str, kind: str = "concurrency") -> None:
    """The form as a user fills it: model, a GPU list, the load, the simulation's size."""
    page.fill("#model", "llama3.1-8b")
    page.check("input[name=gpus-mode][value=list]")
    page.fill("#gpus", gpus)
    page.select_option("#max_gpus", str(INPUTS["max_gpus"]))
    page.check(f"input[name=load-kind][value={kind}]")
    page.fill("#load", load)
    page.fill("#slo_tpot_s", str(INPUTS["slo_tpot_s"]))
    page.click("details summary")
    page.fill("#serving_requests", str(INPUTS["serving_requests"]))


def submit(page: Any) -> str:
    """Press Compare and wait for the answer; the page's state (``done`` or ``error``)."""
    page.click("#submit")
    page.wait_for_selector("body[data-state=done], body[data-state=error]", timeout=180_000)
    return str(page.get_attribute("body", "data-state"))


def cli_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The message ``llmco2 ARGS`` prints after ``llmco2: error:``."""
    code, _, err = run_cli(args, capsys)
    assert code == 2
    return err.strip().removeprefix("llmco2: error: ")


def test_the_page_loads_in_under_two_seconds(page: Any, url: str) -> None:
    seconds = open_form(page, url)
    shot(page, "1-form")
    assert seconds < 2.0, f"the page took {seconds:.2f} s to load"
    assert page.locator("#models option").count() > 50
    assert page.locator("#gpu-chips input").count() > 10


def test_the_table_shows_the_numbers_of_llmco2_compare(page: Any, url: str) -> None:
    open_form(page, url)
    fill(page, INPUTS["gpus"], str(INPUTS["concurrency"]))
    assert submit(page) == "done", page.inner_text("#error")
    path = shot(page, "2-results")
    if os.environ.get("LLMCO2_UPDATE_FIGURES") == "1":
        shutil.copyfile(path, ROOT / "docs" / "figures" / "ui.png")
    expected = llmco2.compare("llama3.1-8b", **INPUTS)
    rows = page.locator("#table tbody tr")
    assert rows.count() == len(expected)
    for i, want in expected.iterrows():
        row = rows.nth(int(i))
        assert row.get_attribute("data-label") == want["label"]
        cells = {c.get_attribute("data-col"): c for c in row.locator("td[data-col]").all()}
        for column in ("rank", "g_per_output_token", "j_per_output_token", "server_j_per_output_token", "server_power_w", "ttft_p90_s", "tpot_p90_s"):
            assert float(cells[column].get_attribute("data-value")) == pytest.approx(float(want[column]), rel=1e-12), column
        assert cells["g_per_output_token"].inner_text() == f"{1e3 * want['g_per_output_token']:.3g}"
        assert cells["j_per_output_token"].inner_text() == f"{want['j_per_output_token']:.3g}"
        assert cells["ok"].get_attribute("data-value") == ("meets" if want["meets_slo"] else
                                                           "behind" if not want["stable"] else "misses")
    assert page.is_hidden("#spinner") and page.is_hidden("#error")
    assert page.inner_text("#verdict") == f"Verdict: {expected.attrs['verdict']}"
    assert page.locator("#chart svg .point circle").count() >= len(expected)
    assert page.locator("#chart svg line.slo").count() == 1
    assert "grid 484.4 g CO2eq/kWh" in page.inner_text("#notes")


@pytest.mark.parametrize(("name", "gpus", "load", "kind", "flags"), [
    ("3-error-rate", "h100,l4", "-1", "rate", ["--rate", "-1"]),
    ("4-error-gpu", "h100,nosuch", "8", "concurrency", ["--concurrency", "8"]),
])
def test_a_bad_input_shows_the_command_lines_message(page: Any, url: str, capsys: pytest.CaptureFixture[str], name: str,
                                                     gpus: str, load: str, kind: str, flags: list[str]) -> None:
    open_form(page, url)
    fill(page, gpus, load, kind)
    assert submit(page) == "error"
    shot(page, name)
    expected = cli_error(["compare", "--model", "llama3.1-8b", "--gpus", gpus, "--max-gpus", "2", *flags,
                          "--slo-tpot", "0.05", "--serving-requests", "60"], capsys)
    assert page.inner_text("#error") == expected
    assert page.is_hidden("#output") and page.is_hidden("#spinner")
    assert page.get_attribute("#load" if kind == "rate" else "#gpus", "aria-invalid") == "true"
