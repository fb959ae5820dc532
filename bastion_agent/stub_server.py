"""A loopback model server for tests and benchmarks: both wire formats, no model.

It embeds text as a deterministic bag of words (each lowercase ``\\w+`` word
adds 1 to a bucket chosen by its sha256), so a query shares score with the
windows that share its words, and every run gives the same vectors. It
speaks Ollama's ``POST /api/embed`` and the OpenAI-style ``POST
/v1/embeddings`` (float and base64), each of which can be switched off to
test detection, and records every request it gets.

``python3 -m bastion_agent.stub_server --port 11434 --dim 64`` runs it by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler

from .httpthread import ServesInBackground, make_server
from .vectorstore import pack_base64

WORD_RE = re.compile(r"\w+")


def bag_of_words(text: str, dim: int) -> list[float]:
    """The stub's embedding of ``text``.

    A text without words gets 1 in bucket 0 rather than an all-zero vector,
    which the embed stage rightly refuses (llama.cpp's sign of a failure).
    """
    vector = [0.0] * dim
    for word in WORD_RE.findall(text.lower()):
        bucket = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") % dim
        vector[bucket] += 1.0
    if dim and not any(vector):
        vector[0] = 1.0
    return vector


class StubServer(ServesInBackground):
    """``with StubServer(dim=64) as stub:`` a server on ``stub.url`` until the block ends.

    ``apis`` lists the wire formats it answers (the others get 404);
    ``models``, when given, lists the model names it knows (others get the
    server's "model not found"); ``requests`` holds ``(path, body)`` pairs.
    """

    def __init__(self, dim: int = 64, apis=("ollama", "openai"), models=None, host: str = "127.0.0.1", port: int = 0):
        self.dim = dim
        self.apis = tuple(apis)
        self.models = None if models is None else set(models)
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.httpd = make_server(host, port, _handler_for(self))

    def inputs(self) -> list[str]:
        """Every text embedded so far, in arrival order."""
        with self.lock:
            return [text for _, body in self.requests for text in _as_list(body.get("input"))]

    def record(self, path: str, body: dict) -> None:
        with self.lock:
            self.requests.append((path, body))

    def intercept(self, handler, api: str, body: dict) -> bool:
        """A hook for subclasses: answer this request through ``handler`` and return True,
        or return False to let the stub answer it."""
        return False


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _handler_for(stub: StubServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: tests read stderr
            pass

        def do_GET(self) -> None:
            names = sorted(stub.models or [])
            if self.path == "/api/tags" and "ollama" in stub.apis:  # Ollama's list of local models
                self._send(200, {"models": [{"name": name, "model": name, "details": {"family": "stub"}} for name in names]})
            elif self.path == "/v1/models" and "openai" in stub.apis:
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in names]})
            elif self.path in ("/", "/health"):
                self._send(200, {"status": "ok", "models": names})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError):
                self._send(400, {"error": "invalid JSON"})
                return
            api = {"/api/embed": "ollama", "/v1/embeddings": "openai"}.get(self.path)
            if api is None or api not in stub.apis:
                self._send(404, {"error": "not found"} if api != "openai" else "404 page not found")
                return
            stub.record(self.path, body)
            if stub.intercept(self, api, body):  # a subclass answered (fault_stub.FaultStub)
                return
            model = body.get("model")
            if stub.models is not None and model not in stub.models:
                self._model_not_found(api, model)
                return
            texts = _as_list(body.get("input"))
            if not texts or not all(isinstance(text, str) for text in texts):
                self._send(400, {"error": "input must be a string or a list of strings"})
                return
            vectors = [bag_of_words(text, stub.dim) for text in texts]
            if api == "ollama":
                self._send(200, {"model": model, "embeddings": vectors})
            else:
                self._send(200, openai_answer(model, vectors, body.get("encoding_format", "float")))

        def _model_not_found(self, api: str, model) -> None:
            if api == "ollama":
                self._send(404, {"error": f'model "{model}" not found, try pulling it first'})
            else:
                self._send(404, {"error": {"code": 404, "message": f"model {model} not found", "type": "not_found_error"}})

        def _send(self, status: int, value) -> None:
            data = json.dumps(value).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def openai_answer(model, vectors: list[list[float]], encoding: str) -> dict:
    data = []
    # Listed in reverse: clients must match results to inputs by index.
    for index in reversed(range(len(vectors))):
        vector = vectors[index]
        embedding = pack_base64(vector) if encoding == "base64" else vector
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    return {"object": "list", "model": model, "data": data, "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m bastion_agent.stub_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args(argv)
    stub = StubServer(dim=args.dim, host=args.host, port=args.port)
    print(f"stub model server on {stub.url} (dim {args.dim}); Ctrl-C stops it", flush=True)
    try:
        stub.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
