"""``predict --cluster tcp://HOST:PORT`` at a port that accepts connections and never answers (or
answers something other than Dask) is refused within the connect deadline with exit 2 and one line,
leaving nothing behind; hermetic: the "schedulers" are socket servers in threads of this process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_fuzz_boundary import _cli

pytest.importorskip("distributed")

#: Seconds the test gives a refusal before calling it a hang (the deadline is set to 1 s below).
HANG_S = 30.0


def _server(reply: bytes | None) -> Iterator[int]:
    """A TCP server on a free local port: it accepts every connection and never answers (``reply``
    None) or answers ``reply`` to the first bytes it gets; yields the port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.1)  # accept() wakes up to see the stop event
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            held.append(conn)
            if reply is not None:
                conn.recv(65536)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        srv.close()
        for conn in held:
            conn.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    yield from _server(None)


@pytest.fixture
def http_port() -> Iterator[int]:
    yield from _server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@pytest.fixture
def requests_file(tmp_path: Path) -> Path:
    src = tmp_path / "in" / "r.csv"
    src.parent.mkdir()
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\nqwen2-0.5b,h100,1,64,8\n")
    return src


def _predict_on(port: int, src: Path, out: Path) -> tuple[int, str, float]:
    """Exit code, stderr and seconds of ``predict --cluster tcp://127.0.0.1:PORT``, run in a thread
    so that a hang fails the test instead of stopping the suite."""
    result: dict[str, object] = {}

    def run() -> None:
        code, _, err = _cli(["predict", "--requests", str(src), "--out", str(out), "--cluster", f"tcp://127.0.0.1:{port}"])
        result.update(code=code, err=err)

    start = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"predict --cluster did not return within {HANG_S:g} s"
    return int(result["code"]), str(result["err"]), time.perf_counter() - start  # type: ignore[call-overload]


@pytest.mark.parametrize("server, words", [("silent_port", "the port accepts connections but sends no Dask handshake"),
                                           ("http_port", "the port answers, but not as a Dask scheduler")])
def test_a_port_that_does_not_answer_as_dask_is_refused_in_time(server: str, words: str, requests_file: Path,
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                request: pytest.FixtureRequest) -> None:
    import llmco2.api.cluster as cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    port = request.getfixturevalue(server)
    out = tmp_path / "parts"
    code, err, seconds = _predict_on(port, requests_file, out)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"cannot reach a Dask scheduler at 'tcp://127.0.0.1:{port}' within 1 s ({words})" in lines[0], err
    assert not out.exists()
    assert seconds < HANG_S


def test_the_probe_keeps_to_its_deadline(silent_port: int) -> None:
    from llmco2.api.cluster_connect import HANDSHAKE_GRACE_S, check_scheduler_answers

    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="sends no Dask handshake"):
        check_scheduler_answers(f"tcp://127.0.0.1:{silent_port}", 0.5)
    assert time.perf_counter() - start < 0.5 + HANDSHAKE_GRACE_S + 5  # the deadline, and slack for a loaded machine
    with pytest.raises(ValueError, match="unknown address scheme"):
        check_scheduler_answers("nonsense://127.0.0.1:1", 0.5)
