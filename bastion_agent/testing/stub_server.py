"""A loopback model server for tests and benchmarks: both wire formats, no model.

It embeds text as a deterministic bag of words (each lowercase ``\\w+`` word
adds 1 to a bucket chosen by its sha256), so a query shares score with the
windows that share its words, and every run gives the same vectors. It
speaks Ollama's ``POST /api/embed`` and the OpenAI-style ``POST
/v1/embeddings`` (float and base64), each of which can be switched off to
test detection, and records every request it gets.

It can also behave like a real server in what it says about itself
(``model_info``): ``flavor="llama.cpp"`` answers ``GET /props`` and ``POST
/tokenize`` and, like llama.cpp, silently keeps only the first ``context``
tokens of a longer input; ``flavor="tei"`` answers ``GET /info`` and ``POST
/tokenize`` and refuses an input over ``context`` as TEI does;
``flavor="ollama"`` answers ``POST /api/show`` and ``prompt_eval_count``, and
refuses an over-long input unless asked to truncate it;
``flavor="llama-cpp-python"`` (the issue's server) cuts like llama.cpp but
says no context and counts only through ``POST /extras/tokenize/count``. Its "model tokens"
(``stub_tokens``) are a word's 4-letter pieces, each digit and each mark, plus
two special tokens, so they outnumber the chunker's regex tokens as a real
tokenizer's do. ``listed`` is what ``/v1/models`` and ``/api/tags`` list: by
default the models it knows, or (answering any name) the names it was asked
for; give a list to list another model, or ``()`` to list nothing. ``routes``
maps a path to a function that answers it instead (a test's hostile server).

``python3 -m bastion_agent.testing.stub_server --port 11434 --dim 64`` runs it by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler

from bastion_agent.core.httpthread import ServesInBackground, make_server
from bastion_agent.embedding.vectorstore import pack_base64

WORD_RE = re.compile(r"\w+")
STUB_TOKEN_RE = re.compile(r"[^\W\d_]{1,4}|\d|_|[^\w\s]")
SPECIAL_TOKENS = 2  # a [CLS] and a [SEP], as BERT-style embedding models count them
FLAVORS = (None, "llama.cpp", "llama-cpp-python", "tei", "ollama")


def stub_tokens(text: str) -> list[re.Match]:
    """The stub model's tokens of ``text`` (without the special tokens)."""
    return list(STUB_TOKEN_RE.finditer(text))


def token_count(text: str) -> int:
    return len(stub_tokens(text)) + SPECIAL_TOKENS


def cut_to(text: str, context: int | None) -> str:
    """``text`` as a model with ``context`` tokens sees it: its first ``context - 2`` tokens."""
    if context is None:
        return text
    tokens = stub_tokens(text)
    keep = max(0, context - SPECIAL_TOKENS)
    return text if len(tokens) <= keep else text[: tokens[keep - 1].end()] if keep else ""


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

    def __init__(self, dim: int = 64, apis=("ollama", "openai"), models=None, host: str = "127.0.0.1", port: int = 0,
                 flavor: str | None = None, context: int | None = None, listed=None, routes=None):
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}")
        self.dim = dim
        self.apis = tuple(apis)
        self.models = None if models is None else set(models)
        self.flavor = flavor
        self.context = context
        self.listed = None if listed is None else list(listed)
        self.asked: list[str] = []  # model names sent in embed requests, in first-seen order
        self.routes = dict(routes or {})
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
            model = body.get("model")
            if isinstance(model, str) and model not in self.asked:
                self.asked.append(model)

    def names(self) -> list[str]:
        """What ``/v1/models`` and ``/api/tags`` list."""
        if self.listed is not None:
            return list(self.listed)
        with self.lock:
            return sorted(self.models) if self.models is not None else list(self.asked)

    def over_context(self, text: str) -> bool:
        return self.context is not None and token_count(text) > self.context

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
            if self.path in stub.routes:
                stub.routes[self.path](self)
                return
            names = stub.names()
            if self.path == "/props" and stub.flavor == "llama.cpp":
                self._send(200, {"default_generation_settings": {"n_ctx": stub.context, "params": {}},
                                 "total_slots": 1, "model_path": "/models/stub.gguf"})
            elif self.path == "/info" and stub.flavor == "tei":
                self._send(200, {"model_id": (names or ["stub/model"])[0], "model_dtype": "float32",
                                 "max_input_length": stub.context, "max_client_batch_size": 32, "version": "stub"})
            elif self.path == "/api/tags" and "ollama" in stub.apis:  # Ollama's list of local models
                self._send(200, {"models": [{"name": name, "model": name, "details": {"family": "stub"}} for name in names]})
            elif self.path == "/v1/models" and "openai" in stub.apis:
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in names]})
            elif self.path in ("/", "/health"):
                self._send(200, {"status": "ok", "models": names})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path in stub.routes:
                stub.routes[self.path](self)
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError):
                self._send(400, {"error": "invalid JSON"})
                return
            if self._introspection(body):
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
            if self._refuses_long(api, body, texts):
                return
            seen = [cut_to(text, stub.context) for text in texts]  # llama.cpp cuts without a word
            vectors = [bag_of_words(text, stub.dim) for text in seen]
            counted = sum(token_count(text) for text in seen) if stub.flavor else 0
            if api == "ollama":
                answer = {"model": model, "embeddings": vectors}
                if stub.flavor:
                    answer["prompt_eval_count"] = counted
                self._send(200, answer)
            else:
                answer = openai_answer(model, vectors, body.get("encoding_format", "float"))
                answer["usage"] = {"prompt_tokens": counted, "total_tokens": counted}
                self._send(200, answer)

        def _refuses_long(self, api: str, body: dict, texts: list) -> bool:
            """TEI refuses an input over its context; Ollama too unless asked to truncate."""
            long = [text for text in texts if stub.over_context(text)]
            if not long:
                return False
            if stub.flavor == "tei":
                self._send(413, {"error": f"Input validation error: `inputs` must have less than {stub.context} "
                                          f"tokens. Given: {token_count(long[0])}", "error_type": "Validation"})
                return True
            if stub.flavor == "ollama" and api == "ollama" and body.get("truncate") is False:
                self._send(400, {"error": "the input length exceeds the context length"})
                return True
            return False

        def _introspection(self, body) -> bool:
            """``/tokenize`` (llama.cpp, TEI) and ``/api/show`` (Ollama) of the flavor; True when answered."""
            if self.path == "/tokenize" and stub.flavor == "llama.cpp":
                content = body.get("content") if isinstance(body, dict) else None
                if not isinstance(content, str):
                    self._send(400, {"error": {"code": 400, "message": "\"content\" must be provided"}})
                    return True
                specials = SPECIAL_TOKENS if body.get("add_special") else 0
                ids = [_token_id(match.group()) for match in stub_tokens(content)]
                self._send(200, {"tokens": [101] * (specials // 2) + ids + [102] * (specials // 2)})
                return True
            if self.path == "/tokenize" and stub.flavor == "tei":
                inputs = body.get("inputs") if isinstance(body, dict) else None
                inputs = [inputs] if isinstance(inputs, str) else inputs
                if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
                    self._send(422, {"error": "Failed to deserialize the JSON body", "error_type": "Validation"})
                    return True
                self._send(200, [_tei_tokens(text, body.get("add_special_tokens", True)) for text in inputs])
                return True
            if self.path == "/extras/tokenize/count" and stub.flavor == "llama-cpp-python":
                text = body.get("input") if isinstance(body, dict) else None
                if not isinstance(text, str):
                    self._send(422, {"detail": [{"loc": ["body", "input"], "msg": "field required"}]})
                    return True
                self._send(200, {"count": token_count(text)})
                return True
            if self.path == "/api/show" and stub.flavor == "ollama":
                self._send(200, {"modelfile": "", "parameters": "", "details": {"family": "bert"},
                                 "model_info": {"general.architecture": "bert", "bert.context_length": stub.context,
                                                "bert.embedding_length": stub.dim}})
                return True
            return False

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


def _token_id(piece: str) -> int:
    return 1000 + int.from_bytes(hashlib.sha256(piece.encode("utf-8")).digest()[:4], "big") % 30000


def _tei_tokens(text: str, add_special: bool) -> list[dict]:
    """TEI's ``/tokenize`` answer for one input: each token's id, text, offsets, and whether it is special."""
    tokens = [{"id": _token_id(match.group()), "text": match.group(), "special": False,
               "start": match.start(), "stop": match.end()} for match in stub_tokens(text)]
    if add_special:
        tokens = ([{"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}] + tokens
                  + [{"id": 102, "text": "[SEP]", "special": True, "start": None, "stop": None}])
    return tokens


def openai_answer(model, vectors: list[list[float]], encoding: str) -> dict:
    data = []
    # Listed in reverse: clients must match results to inputs by index.
    for index in reversed(range(len(vectors))):
        vector = vectors[index]
        embedding = pack_base64(vector) if encoding == "base64" else vector
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    return {"object": "list", "model": model, "data": data, "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m bastion_agent.testing.stub_server", description=__doc__.split("\n\n")[0])
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
