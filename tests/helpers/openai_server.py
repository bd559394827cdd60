"""A scripted OpenAI Chat Completions server on loopback, for tests of the LLM client.

It is a real HTTP server (``ThreadingHTTPServer`` in a background thread, bound to 127.0.0.1 on a
free port), so the real ``openai`` package talks to it over TCP. What it answers is scripted:
either a list of :class:`Reply` consumed one per HTTP request (retries included), or a callable
that decides per :class:`Request`.

    with OpenAIServer([Reply(text=kernel_answer(src))]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        ...
        assert server.requests[0].model == "some-model"
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_ID = "scripted"

# HTTP status -> (OpenAI error type, OpenAI error code)
_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", "service_unavailable"),
}


@dataclass
class Reply:
    """One scripted answer to one HTTP request."""

    text: str = ""  # assistant message content
    status: int = 200  # HTTP status; >= 400 produces an OpenAI-style error JSON body
    delay_s: float = 0.0  # sleep before answering (to trigger client timeouts)
    retry_after: float | None = None  # Retry-After header (seconds) on error replies
    garbage: bool = False  # a 200 whose body is not valid JSON
    content_type: str = "application/json"  # Content-Type of the reply (e.g. "text/html" with garbage)
    prompt_tokens: int | None = None  # default: len(all message text) // 4
    completion_tokens: int | None = None  # default: len(text) // 4


@dataclass
class Request:
    """One HTTP request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    method: str = "POST"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def prompt(self) -> str:
        return "\n".join(_content_text(m.get("content")) for m in self.messages)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    def header(self, name: str, default: str | None = None) -> str | None:
        """A header by case-insensitive name (``headers`` keeps the case the client sent)."""
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), default)


Script = Callable[[Request], Reply] | list[Reply]


def _content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def error_body(status: int, message: str) -> dict[str, Any]:
    """The OpenAI error shape: {"error": {"message", "type", "param", "code"}}."""
    default = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, code = _ERROR_KINDS.get(status, default)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def kernel_answer(source: str, prose: str = "Here is the kernel.") -> str:
    """A markdown answer carrying CUDA source in a ```cuda fenced block."""
    return f"{prose}\n\n```cuda\n{source.strip(chr(10))}\n```\n"


def diff_answer(blocks: list[tuple[str, str]], prose: str = "Here is the change.") -> str:
    """A markdown answer carrying SEARCH/REPLACE blocks in one ``` fenced block (no language)."""
    body = "\n\n".join(
        f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE" for search, replace in blocks
    )
    return f"{prose}\n\n```\n{body}\n```\n"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects

    def log_message(self, format: str, *args: Any) -> None:
        pass  # log nothing

    # -- plumbing -------------------------------------------------------------------------------
    def _send(
        self,
        status: int,
        payload: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def _send_json(
        self,
        status: int,
        obj: Any,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self._send(status, json.dumps(obj).encode(), headers, content_type)

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send_json(status, error_body(status, message), headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _record(self, body: dict[str, Any]) -> Request:
        request = Request(
            path=self.path, headers={k: v for k, v in self.headers.items()}, body=body, method=self.command
        )
        self.server.owner._record(request)
        return request

    # -- endpoints ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._guard(self._get)

    def do_POST(self) -> None:
        self._guard(self._post)

    def _guard(self, handler: Callable[[], None]) -> None:
        try:
            handler()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def _get(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            self._record({})
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "tests"}],
                },
            )
        else:
            self._send_error(404, f"no such endpoint: GET {self.path}")

    def _post(self) -> None:
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._send_error(404, f"no such endpoint: POST {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            self._send_error(400, f"invalid JSON body: {exc}")
            return
        request = self._record(body)
        if body.get("stream"):
            self._send_error(400, "streaming is not supported by the scripted server")
            return
        reply = self.server.owner._next_reply(request)
        if reply.delay_s > 0:
            self.server.owner._sleep(reply.delay_s)
        if reply.status >= 400:
            headers = {}
            if reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            message = reply.text or f"scripted error {reply.status}"
            self._send_json(reply.status, error_body(reply.status, message), headers, reply.content_type)
            return
        if reply.garbage:
            self._send(reply.status, b"<html>this is not JSON {", None, reply.content_type)
            return
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else len(request.prompt) // 4
        completion_tokens = (
            reply.completion_tokens if reply.completion_tokens is not None else len(reply.text) // 4
        )
        self._send_json(
            reply.status,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.model or MODEL_ID,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            content_type=reply.content_type,
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: OpenAIServer

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open (keep-alive) connection, so that no handler thread outlives stop()."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # client disconnects and the like: nothing on stdout/stderr


class OpenAIServer:
    """A scripted Chat Completions server on 127.0.0.1 (a free port); see the module docstring."""

    def __init__(self, script: Script | None = None) -> None:
        self._script: Script = list(script) if isinstance(script, list) else (script or [])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._served = 0
        self.requests: list[Request] = []
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> OpenAIServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0))
        httpd.owner = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a scripted delay
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if thread is not None:
            thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- script ---------------------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        """Replies left in a list script (0 for a callable)."""
        with self._lock:
            return len(self._script) - self._served if isinstance(self._script, list) else 0

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_reply(self, request: Request) -> Reply:
        if callable(self._script):
            try:
                return self._script(request)
            except Exception as exc:  # a broken script shows up in the client, not as a hung test
                return Reply(status=500, text=f"script raised {type(exc).__name__}: {exc}")
        with self._lock:
            if self._served >= len(self._script):
                self._served += 1
                return Reply(
                    status=500,
                    text=f"scripted server ran out of replies (request {self._served}, "
                    f"script had {len(self._script)})",
                )
            reply = self._script[self._served]
            self._served += 1
            return reply

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)
