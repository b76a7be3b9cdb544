"""A scripted HTTP server on a thread of its own, for fixtures that stand in for an HTTP service
(stub_upstream.py's registry, token_issuer.py's token realm): binds port 0 on `host`, hands every
request of the given methods to `handle(request_handler, method)`, and stops cleanly.

Clients hanging up mid-request (a daemon refusing a body, a test closing its connection) are part
of a script, not errors worth a traceback. `log` receives http.server's access lines (dropped
when None).
"""
from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Sequence


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver API
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class StubServer:
    def __init__(self, handle: Callable[[BaseHTTPRequestHandler, str], None], *, methods: Sequence[str],
                 host: str = "127.0.0.1", name: str = "stub", log: Callable[[str], None] | None = None) -> None:
        self._handle = handle
        self._methods = tuple(methods)
        self._host = host
        self._name = name
        self._log = log
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "StubServer":
        handle, log = self._handle, self._log
        attrs: dict[str, object] = {"protocol_version": "HTTP/1.1"}
        for m in self._methods:
            attrs[f"do_{m}"] = (lambda method: lambda req: handle(req, method))(m)

        def log_message(req: BaseHTTPRequestHandler, fmt: str, *args: object) -> None:
            if log is not None:
                log("%s %s" % (req.address_string(), fmt % args))
        attrs["log_message"] = log_message
        handler = type(f"{self._name}_handler", (BaseHTTPRequestHandler,), attrs)
        self._server = _Server((self._host, 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_address[1]
