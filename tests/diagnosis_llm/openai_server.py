"""A small OpenAI-compatible chat-completions server on loopback, for the judge backend's tests.

It speaks the real wire protocol (``POST /v1/chat/completions``, JSON bodies, HTTP status codes,
``Retry-After``), so the real ``openai`` client talks to it unchanged; what it answers is up to the test
(``respond(body, n)`` returns a :class:`Response`). It records every request (headers and JSON body) and
the most requests it had in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Response:
    content: str | None = None
    status: int = 200
    error: str = ""
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (100, 20)


class OpenAIServer:
    def __init__(self, respond: Callable[[dict[str, Any], int], Response]):
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    n = len(server.requests)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server.respond(body, n)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    if self.path != "/v1/chat/completions":
                        reply = Response(status=404, error=f"no route {self.path}")
                    self._send(reply, body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, reply: Response, body: dict[str, Any]) -> None:
                if reply.status != 200:
                    payload = {"error": {"message": reply.error or "error", "type": "test", "code": reply.status}}
                else:
                    prompt, completion = reply.usage
                    payload = {
                        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion},
                    }
                data = json.dumps(payload).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # serve_forever looks for shutdown() every poll_interval (0.5 s by default: half a second per test)
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
