"""A scripted HTTP stub for client tests: answers each request from a queue of canned answers per
(method, path prefix) and records what it was sent. Runs in a thread on a free port."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubServer:
    def __init__(self):
        self.requests: list[dict] = []
        self._script: dict[tuple[str, str], list[tuple[int, dict, object]]] = {}
        self._default: dict[tuple[str, str], tuple[int, dict, object]] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(body) if body else None,
                    }
                )
                status, headers, payload = stub._next(self.command, self.path)
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                content_type = "application/problem+json" if status >= 400 else "application/json"
                self.send_header("Content-Type", headers.pop("Content-Type", content_type))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def script(self, method: str, path: str, *answers: tuple[int, dict, object], then: tuple | None = None) -> None:
        """Answer `method path*` with `answers` in order, then with `then` (default: the last one)."""
        self._script[(method, path)] = list(answers)
        self._default[(method, path)] = then or answers[-1]

    def _next(self, method: str, path: str) -> tuple[int, dict, object]:
        for (m, prefix), queue in self._script.items():
            if m == method and path.startswith(prefix):
                answer = queue.pop(0) if queue else self._default[(m, prefix)]
                return answer[0], dict(answer[1]), answer[2]
        return (
            404,
            {},
            {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no script", "code": "not_found"},
        )

    def count(self, method: str, prefix: str) -> int:
        return sum(1 for r in self.requests if r["method"] == method and r["path"].startswith(prefix))

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def problem(status: int, code: str, detail: str = "", **extra) -> dict:
    return {
        "type": "about:blank",
        "title": code,
        "status": status,
        "detail": detail or code,
        "code": code,
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        **extra,
    }
