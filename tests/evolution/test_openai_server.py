"""The scripted OpenAI server, exercised by the real ``openai`` client over loopback TCP."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.helpers.openai_server import OpenAIServer, Reply, Request, diff_answer, kernel_answer

MESSAGES = [
    {"role": "system", "content": "You write CUDA kernels."},
    {"role": "user", "content": "Make it faster."},
]


def client(server: OpenAIServer, timeout: float = 2.0, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url, api_key="test-key", max_retries=max_retries, timeout=timeout
    )


def ask(c: openai.OpenAI, model: str = "gpt-test", messages: list[dict] | None = None):
    return c.chat.completions.create(model=model, messages=messages or MESSAGES)


@pytest.fixture
def serve() -> Iterator[list[OpenAIServer]]:
    """Servers started through this fixture are stopped even when the test fails."""
    servers: list[OpenAIServer] = []
    yield servers
    for server in servers:
        server.stop()


def started(serve: list[OpenAIServer], script) -> OpenAIServer:
    server = OpenAIServer(script).start()
    serve.append(server)
    return server


def test_reply_parses_with_content_and_usage(serve) -> None:
    server = started(serve, [Reply(text="Hello, kernel.", prompt_tokens=11, completion_tokens=7)])
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    with client(server) as c:
        r = ask(c, model="gpt-test")
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == "gpt-test"  # echoed
    assert len(r.choices) == 1
    assert r.choices[0].index == 0 and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello, kernel."
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (11, 7, 18)


def test_default_usage_is_a_rough_character_count(serve) -> None:
    text = "x" * 40
    server = started(serve, [Reply(text=text)])
    with client(server) as c:
        r = ask(c)
    prompt = "You write CUDA kernels.\nMake it faster."
    assert server.requests[0].prompt == prompt
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(prompt) // 4
    assert r.usage.completion_tokens == len(text) // 4 == 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_list_script_is_consumed_in_order_then_runs_out(serve) -> None:
    server = started(serve, [Reply(text="first"), Reply(text="second"), Reply(text="third")])
    with client(server) as c:
        assert [ask(c).choices[0].message.content for _ in range(3)] == ["first", "second", "third"]
        assert server.remaining == 0
        with pytest.raises(openai.InternalServerError) as info:
            ask(c)
    assert info.value.status_code == 500
    assert "ran out" in info.value.message
    assert len(server.requests) == 4


def test_callable_script_decides_per_request(serve) -> None:
    def script(request: Request) -> Reply:
        return Reply(text=f"{request.model}: {request.messages[-1]['content']}")

    server = started(serve, script)
    with client(server) as c:
        assert ask(c, model="a").choices[0].message.content == "a: Make it faster."
        msgs = [{"role": "user", "content": "again"}]
        assert ask(c, model="b", messages=msgs).choices[0].message.content == "b: again"


def test_a_raising_script_becomes_a_500(serve) -> None:
    def script(request: Request) -> Reply:
        raise KeyError("oops")

    server = started(serve, script)
    with client(server) as c, pytest.raises(openai.InternalServerError, match="script raised KeyError"):
        ask(c)


def test_429_raises_rate_limit_error_with_retry_after(serve) -> None:
    server = started(serve, [Reply(status=429, text="slow down", retry_after=2.5)])
    with client(server) as c, pytest.raises(openai.RateLimitError) as info:
        ask(c)
    err = info.value
    assert type(err) is openai.RateLimitError
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == "2.5"
    assert err.message.startswith("Error code: 429")
    assert err.body == {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert err.code == "rate_limit_exceeded" and err.type == "requests"


def test_retries_consume_the_script(serve) -> None:
    # The client's own retry honours Retry-After and takes the next scripted reply.
    server = started(
        serve, [Reply(status=429, retry_after=0.01), Reply(status=503, retry_after=0.01), Reply(text="ok")]
    )
    with client(server, max_retries=2) as c:
        r = ask(c)
    assert r.choices[0].message.content == "ok"
    assert len(server.requests) == 3
    assert [q.header("X-Stainless-Retry-Count") for q in server.requests] == ["0", "1", "2"]


def test_500_and_503_raise_internal_server_error(serve) -> None:
    server = started(serve, [Reply(status=500, text="boom"), Reply(status=503, retry_after=1)])
    with client(server) as c:
        with pytest.raises(openai.InternalServerError) as info:
            ask(c)
        assert type(info.value) is openai.InternalServerError and info.value.status_code == 500
        assert info.value.body == {"message": "boom", "type": "server_error", "param": None, "code": None}
        with pytest.raises(openai.InternalServerError) as info:
            ask(c)
        assert info.value.status_code == 503
        assert info.value.response.headers["retry-after"] == "1"


def test_delay_past_the_client_timeout_raises_api_timeout_error(serve) -> None:
    server = started(serve, [Reply(text="too late", delay_s=1.5)])
    t0 = time.monotonic()
    with client(server, timeout=0.2) as c, pytest.raises(openai.APITimeoutError) as info:
        ask(c)
    assert time.monotonic() - t0 < 1.0
    assert type(info.value) is openai.APITimeoutError
    assert isinstance(info.value, openai.APIConnectionError)
    assert isinstance(info.value.__cause__, httpx.TimeoutException)
    t0 = time.monotonic()
    server.stop()  # wakes the handler sleeping on the delay
    assert time.monotonic() - t0 < 1.0


def test_delay_within_the_timeout_is_answered(serve) -> None:
    server = started(serve, [Reply(text="slow but fine", delay_s=0.2)])
    with client(server, timeout=2.0) as c:
        assert ask(c).choices[0].message.content == "slow but fine"


def test_garbage_json_raises_json_decode_error(serve) -> None:
    # Content-Type says JSON, the body is not: the client calls response.json() unguarded, so the
    # error is the stdlib JSONDecodeError, not an openai.APIError.
    server = started(serve, [Reply(garbage=True)])
    with client(server) as c, pytest.raises(json.JSONDecodeError) as info:
        ask(c)
    assert type(info.value) is json.JSONDecodeError
    assert not isinstance(info.value, openai.OpenAIError)


def test_garbage_html_is_returned_as_text_or_rejected_when_strict(serve) -> None:
    # With a non-JSON Content-Type the default client returns the raw text (not a ChatCompletion);
    # only a client built with _strict_response_validation=True raises APIResponseValidationError.
    server = started(serve, [Reply(garbage=True, content_type="text/html")] * 2)
    with client(server) as c:
        r = ask(c)
    assert isinstance(r, str) and r.startswith("<html>")
    with (
        openai.OpenAI(
            base_url=server.base_url,
            api_key="test-key",
            max_retries=0,
            timeout=2.0,
            _strict_response_validation=True,
        ) as strict,
        pytest.raises(openai.APIResponseValidationError) as info,
    ):
        ask(strict)
    assert info.value.status_code == 200


def test_stream_true_is_refused_with_400(serve) -> None:
    server = started(serve, [Reply(text="unused")])
    with client(server) as c, pytest.raises(openai.BadRequestError, match="streaming"):
        c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert server.remaining == 1  # a refused stream does not consume the script


def test_models_lists_one_scripted_model(serve) -> None:
    server = started(serve, [])
    with client(server) as c:
        assert [m.id for m in c.models.list()] == ["scripted"]


def test_requests_record_messages_model_and_authorization(serve) -> None:
    server = started(serve, [Reply(text="a"), Reply(text="b")])
    with client(server) as c:
        ask(c, model="m1")
        ask(c, model="m2", messages=[{"role": "user", "content": [{"type": "text", "text": "parts"}]}])
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["Authorization"] == "Bearer test-key"
    assert first.header("authorization") == "Bearer test-key" and first.header("X-Missing") is None
    assert first.model == "m1" and second.model == "m2"
    assert first.messages == MESSAGES
    assert first.body["messages"] == MESSAGES
    assert second.prompt == "parts"


def test_concurrent_requests(serve) -> None:
    def script(request: Request) -> Reply:
        return Reply(text=request.messages[0]["content"], delay_s=0.2)

    server = started(serve, script)
    results: dict[int, str | None] = {}
    with client(server) as c:

        def worker(i: int) -> None:
            results[i] = ask(c, messages=[{"role": "user", "content": str(i)}]).choices[0].message.content

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert time.monotonic() - t0 < 1.2  # served in parallel, not 8 x 0.2 s
    assert results == {i: str(i) for i in range(8)}
    assert len(server.requests) == 8


def test_stop_frees_the_port_and_cuts_connections(serve) -> None:
    server = OpenAIServer([Reply(text="a"), Reply(text="b")])
    with server:
        port = server.port
        c = client(server, timeout=1.0)
        assert ask(c).choices[0].message.content == "a"  # leaves a keep-alive connection open
    # Nothing answers any more, not even on the pooled connection.
    with pytest.raises(openai.APIConnectionError):
        ask(c)
    c.close()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))  # the port is free again
    server.stop()  # idempotent


def test_context_manager_and_restart() -> None:
    server = OpenAIServer([Reply(text="one"), Reply(text="two")])
    with server as s:
        assert s is server
        with client(s) as c:
            assert ask(c).choices[0].message.content == "one"
    # A stopped server starts again (on a new port), keeping its script position.
    with server, client(server) as c:
        assert ask(c).choices[0].message.content == "two"


def test_unknown_endpoint_is_404(serve) -> None:
    server = started(serve, [])
    r = httpx.post(server.base_url + "/completions", json={"model": "m", "prompt": "x"}, timeout=2)
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_client_disconnect_is_silent(serve, capfd) -> None:
    server = started(serve, [Reply(text="never read " * 10_000, delay_s=0.3)])
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=1) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    time.sleep(0.5)  # the handler wakes and writes into the reset connection
    server.stop()
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_kernel_answer_format() -> None:
    src = "__global__ void k(float* x) { x[0] = 1.0f; }\n"
    assert kernel_answer(src) == f"Here is the kernel.\n\n```cuda\n{src}```\n"
    assert kernel_answer(src, prose="Faster.").startswith("Faster.\n\n```cuda\n__global__")


def test_diff_answer_format() -> None:
    answer = diff_answer([("int a = 1;", "int a = 2;"), ("x\ny", "z")])
    assert answer == (
        "Here is the change.\n\n```\n"
        "<<<<<<< SEARCH\nint a = 1;\n=======\nint a = 2;\n>>>>>>> REPLACE\n"
        "\n"
        "<<<<<<< SEARCH\nx\ny\n=======\nz\n>>>>>>> REPLACE\n"
        "```\n"
    )


def test_answers_travel_through_the_server(serve) -> None:
    answer = kernel_answer("__global__ void k() {}")
    server = started(serve, [Reply(text=answer)])
    with client(server) as c:
        assert ask(c).choices[0].message.content == answer
