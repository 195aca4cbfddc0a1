"""Whether a Dask scheduler given by address answers, within a deadline.

``distributed.Client(address, timeout=...)`` bounds the TCP connection only: its handshake then
waits for ever on a port that accepts connections and never answers (distributed leaves the
handshake out of its connect timeout), and a port that answers something else (a web server, the
dashboard's port) makes it raise whatever the bytes decode to. :func:`check_scheduler_answers`
connects and completes Dask's handshake once, on a deadline, before the client is made.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

#: Seconds of the deadline kept for Dask's handshake once the TCP connection is made (so that a
#: host that never connects is named as such).
HANDSHAKE_GRACE_S = 0.5


def check_scheduler_answers(address: str, timeout_s: float) -> None:
    """Connect to the Dask scheduler at ``address`` and complete Dask's handshake within
    ``timeout_s`` seconds, or raise ``OSError``/``TimeoutError`` (``ValueError``: not an address).
    The probe runs in a thread of its own with its own event loop, so it works under a running loop
    too (a notebook), and the wait is abandoned at the deadline whatever the thread does."""
    import asyncio

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend
    from distributed.security import Security

    get_backend(parse_address(address)[0])  # ValueError: an unknown scheme
    connect_s = max(timeout_s - HANDSHAKE_GRACE_S, HANDSHAKE_GRACE_S)  # a host that never connects is named as such

    async def handshake() -> None:
        comm = await connect(address, timeout=connect_s, **Security().get_connection_args("client"))
        await comm.close()

    silent = "the port accepts connections but sends no Dask handshake"
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            asyncio.run(asyncio.wait_for(handshake(), timeout_s))
        except TimeoutError:
            failed.append(TimeoutError(silent))
        except OSError as exc:
            failed.append(exc)
        except Exception as exc:  # noqa: BLE001 - bytes that are no Dask message (an HTTP port, say)
            log.debug("%s answered bytes that are no Dask message: %r", address, exc)
            failed.append(OSError("the port answers, but not as a Dask scheduler"))

    thread = threading.Thread(target=probe, name="llmco2-scheduler-probe", daemon=True)
    thread.start()
    thread.join(timeout_s + HANDSHAKE_GRACE_S)
    if thread.is_alive():
        raise TimeoutError(silent)
    if failed:
        raise failed[0]
