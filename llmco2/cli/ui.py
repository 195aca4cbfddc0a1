"""``llmco2 ui``: the calculator page (:mod:`llmco2.ui`) on a local web server, in the command
line's words: an input error on the page reads as ``llmco2 compare`` would print it."""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
import webbrowser
from typing import Any

from llmco2.cli.flags import as_command_line, flag_of
from llmco2.errors import InvalidInputError


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("ui", help="the calculator page: choose hardware for a model in a web browser (needs the ui extra)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--no-browser", action="store_true", help="do not open the page in a web browser")
    handlers[("ui", None)] = cmd_ui


def describe(exc: InvalidInputError) -> tuple[str, str | None]:
    """The page's wording of an input error: the command line's message and flag."""
    return as_command_line(exc), flag_of(exc.field)


def build_app() -> Any:
    """The calculator app speaking the command line's words (a factory for ``uvicorn --factory``)."""
    from llmco2.ui.app import create_app

    return create_app(describe=describe)


def check_port(host: str, port: int) -> None:
    """Refuse a port outside 0-65535 or one that another program holds, before the server starts."""
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"must be from 0 to 65535, got {port}", field="--port")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise InvalidInputError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another with --port",
                                field="--port") from None


def open_when_up(server: Any, url: str, timeout_s: float = 30.0) -> None:
    """Open ``url`` in the user's browser once ``server`` (a ``uvicorn.Server``) has started."""
    deadline = time.monotonic() + timeout_s
    while not server.started and time.monotonic() < deadline and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        webbrowser.open(url)


def cmd_ui(args: argparse.Namespace) -> int:
    import uvicorn

    app = build_app()
    check_port(args.host, args.port)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else shown}:{args.port}/"
    sys.stderr.write(f"llmco2 calculator on {url} (Ctrl-C stops it)\n")
    if not args.no_browser:
        threading.Thread(target=open_when_up, args=(server, url), daemon=True).start()
    server.run()
    return 0
