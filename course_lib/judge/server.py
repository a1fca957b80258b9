"""A small OpenAI-compatible chat-completions server that answers from a local model.

    python -m course_lib.judge.server --port 8011            # the embedded SmolLM2-135M
    COURSE_JUDGE_BASE_URL=http://127.0.0.1:8011/v1 ...        # then OpenAIJudge() talks to it

It serves ``POST /v1/chat/completions`` (messages, max_tokens, temperature; no streaming),
``POST /v1/completions`` (a raw-text prompt, max_tokens, temperature, and ``logprobs``: the top tokens
of each new token with their log-probabilities, as vLLM answers; what forced-position group judging
reads) and ``GET /v1/models``, enough for the `openai` client, so the course can exercise the same HTTP
path a real judge (vLLM, Ollama, a hosted API) would take. Requests are answered one at a time. Like a real
server, it answers 400 to a prompt that cannot fit the model's budget (``--max-prompt-tokens``), and says
``finish_reason: "length"`` when the answer stopped at max_tokens. One difference: a request without
``temperature`` is answered greedily (temperature 0), where OpenAI's default is 1 (a judge wants greedy).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from course_lib.judge.backends import LocalJudge
from course_lib.judge.errors import JudgeRequestRejected


def _error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "invalid_request_error"}}


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_answer(judge, model_name: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for a chat-completions request: the judge's greedy answer to the messages."""
    try:
        messages = [{"role": m["role"], "content": m.get("content") or ""} for m in request["messages"]]
    except (KeyError, TypeError, AttributeError) as exc:
        return _error(400, f"the body must be JSON with a 'messages' list of {{role, content}}: {exc!r}")
    if request.get("stream"):
        return _error(400, "streaming is not supported by this server")
    max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 256)
    # This request's own counts, whatever other requests the judge answers meanwhile.
    try:
        text, prompt_tokens, completion_tokens = judge.complete_with_usage(
            messages, max_tokens=max_tokens, temperature=float(request.get("temperature") or 0))
    except JudgeRequestRejected as exc:  # a prompt too long: the client's fault, as in vLLM
        return _error(400, str(exc))
    except Exception as exc:  # the model failed: say so, instead of dropping the connection
        return _error(500, f"the judge failed on this request: {exc!r}")
    return 200, {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
        "model": model_name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "length" if completion_tokens >= max_tokens else "stop"}],
        "usage": _usage(prompt_tokens, completion_tokens),
    }


def completion_answer(judge, model_name: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for a completions request on a raw-text prompt; ``logprobs: k`` (at most 20)
    adds each new token's top k tokens, in the legacy ``{"tokens", "token_logprobs", "top_logprobs"}``
    shape. A backend without raw-text completion (`complete_text`) answers 404, as a chat-only server does."""
    if not hasattr(judge, "complete_text"):
        return _error(404, "this model serves /v1/chat/completions only")
    prompt = request.get("prompt")
    prompt = prompt[0] if isinstance(prompt, list) and len(prompt) == 1 else prompt
    top = request.get("logprobs") or 0
    if not isinstance(prompt, str) or not isinstance(top, int) or not 0 <= top <= 20:
        return _error(400, "the body must be JSON with one 'prompt' string and 'logprobs' in [0, 20]")
    if request.get("stream") or request.get("echo"):
        return _error(400, "streaming and echo are not supported by this server")
    max_tokens = int(request.get("max_tokens") or 16)
    try:
        out = judge.complete_text(prompt, max_tokens=max_tokens,
                                  temperature=float(request.get("temperature") or 0), top=top)
    except JudgeRequestRejected as exc:
        return _error(400, str(exc))
    except Exception as exc:
        return _error(500, f"the judge failed on this request: {exc!r}")
    logprobs = {"tokens": out.tokens, "token_logprobs": out.token_logprobs, "top_logprobs": out.top_logprobs,
                "text_offset": []} if top else None
    return 200, {
        "id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
        "model": model_name,
        "choices": [{"index": 0, "text": out.text, "logprobs": logprobs,
                     "finish_reason": "length" if out.completion_tokens >= max_tokens else "stop"}],
        "usage": _usage(out.prompt_tokens, out.completion_tokens),
    }


ROUTES = {"/v1/chat/completions": chat_answer, "/chat/completions": chat_answer,
          "/v1/completions": completion_answer, "/completions": completion_answer}


def make_handler(judge: LocalJudge, model_name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: the notebooks print enough
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model",
                                                             "owned_by": "course_lib"}]})
            else:
                self._send(*_error(404, f"no route {self.path}; try /v1/models or /v1/chat/completions"))

        def do_POST(self) -> None:
            answer = ROUTES.get(self.path.rstrip("/"))
            if answer is None:
                self._send(*_error(404, f"no route {self.path}; try /v1/chat/completions or /v1/completions"))
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not isinstance(request, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                self._send(*_error(400, f"the body must be a JSON object: {exc}"))
                return
            self._send(*answer(judge, model_name, request))

    return Handler


def make_server(port: int = 8011, host: str = "127.0.0.1", name: str = "smollm2-135m", model=None,
                tokenizer=None, max_prompt_tokens: int = 6000) -> ThreadingHTTPServer:
    """A server bound to (host, port), not yet serving; port 0 picks a free port (see
    `server.server_port`)."""
    judge = LocalJudge(name, model=model, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens)
    return ThreadingHTTPServer((host, port), make_handler(judge, name))


def serve_in_thread(port: int = 0, host: str = "127.0.0.1", name: str = "smollm2-135m", model=None,
                    tokenizer=None, max_prompt_tokens: int = 6000) -> tuple[ThreadingHTTPServer, str]:
    """Start a server in a daemon thread: (server, base_url). Stop it with `server.shutdown()`."""
    server = make_server(port, host, name, model, tokenizer, max_prompt_tokens)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="smollm2-135m", help="a load_policy name or checkpoint folder")
    parser.add_argument("--max-prompt-tokens", type=int, default=6000,
                        help="longer prompts lose trajectory text in the middle; "
                             "400 when the rest cannot fit")
    args = parser.parse_args()
    server = make_server(args.port, args.host, args.model, max_prompt_tokens=args.max_prompt_tokens)
    print(f"judge server: http://{args.host}:{server.server_port}/v1 (model {args.model}); Ctrl+C stops it",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
