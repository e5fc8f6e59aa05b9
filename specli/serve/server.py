"""Running the app: bind the socket first (a busy port fails before any model loads; --port 0 picks a
free one), then uvicorn on it. SIGINT and SIGTERM cancel the running and waiting generations, let
uvicorn close the connections and return normally (exit 0): uvicorn's own handler would re-raise the
signal after shutting down, which turns SIGTERM into exit 143. Then `exit_now`: once the server has
closed, nothing is left to finish, and the interpreter's teardown of torch, transformers and the loaded
models would hold the exit 1-4 s."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import uvicorn

from specli.errors import SpecliError

GRACE_S = 5  # how long open connections may take to finish after a signal


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; SpecliError (one line) when the address cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        raise SpecliError(f"cannot listen on {host}:{port}: {e.strerror or e}.") from None
    return sock


def url(sock: socket.socket) -> str:
    """http://host:port of a bound socket (the port the system chose for --port 0)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server with signal handling of our own: `on_signal` runs first (cancel work), and the
    signal is not raised again once the server has stopped."""

    def __init__(
        self, config: uvicorn.Config, on_signal: Callable[[int], Any], on_ready: Callable[[], Any]
    ) -> None:
        super().__init__(config)
        self.on_signal = on_signal
        self.on_ready = on_ready
        self.signals: list[int] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup (lifespan, then accepting), then `on_ready`: our signal handlers are in
        place by then, so a client that waits for the ready line can stop the server cleanly."""
        await super().startup(sockets=sockets)
        if not self.should_exit:
            self.on_ready()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        self.on_signal(sig)
        super().handle_exit(sig, frame)


def run(
    app: Any, sock: socket.socket, on_signal: Callable[[int], Any], on_ready: Callable[[], Any]
) -> str | None:
    """Serve `app` on `sock` until SIGINT/SIGTERM; the name of the signal that stopped it. `on_ready()`
    once it accepts requests and handles signals; `on_signal(sig)` first thing on a signal."""
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACE_S, lifespan="on"
    )
    server = _Server(config, on_signal, on_ready)
    server.run(sockets=[sock])
    return signal.Signals(server.signals[0]).name if server.signals else None


def exit_now(code: int = 0) -> None:
    """Flush stdout and stderr and end the process at once (no interpreter teardown): for after the
    server has stopped, its worker joined and its last line printed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
