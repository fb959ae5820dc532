"""A loopback model server for tests and benchmarks: both wire formats, no model.

It embeds text as a deterministic bag of words (each lowercase ``\\w+`` word
adds 1 to a bucket chosen by its sha256), so a query shares score with the
windows that share its words, and every run gives the same vectors. It
speaks every wire format of ``embedding/wire_formats.py`` through that
format's ``StubFormat`` here (Ollama's ``POST /api/embed``, the OpenAI-style
``POST /v1/embeddings`` in float and base64), each of which can be switched
off to test detection, and records every request it gets. A wire format
without a ``StubFormat`` stops the stub at its start: a new route is never
answered in another format's shape.

It can also behave like a real server in what it says about itself
(``server_info``): ``imitates="llama.cpp"`` answers ``GET /props`` and ``POST
/tokenize`` and, like llama.cpp, silently keeps only the first ``context``
tokens of a longer input; ``imitates="tei"`` answers ``GET /info`` and ``POST
/tokenize`` and refuses an input over ``context`` as TEI does;
``imitates="ollama"`` answers ``POST /api/show`` and ``prompt_eval_count``, and
refuses an over-long input unless asked to truncate it;
``imitates="llama-cpp-python"`` (a server that names no context) cuts like llama.cpp but
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
from bastion_agent.embedding.wire_formats import WIRE_FORMATS

WORD_RE = re.compile(r"\w+")
STUB_TOKEN_RE = re.compile(r"[^\W\d_]{1,4}|\d|_|[^\w\s]")
SPECIAL_TOKENS = 2  # a [CLS] and a [SEP], as BERT-style embedding models count them
IMITATED_SERVERS = (None, "llama.cpp", "llama-cpp-python", "tei", "ollama")


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


class StubFormat:
    """How the stub answers one wire format: the server's side of ``wire_formats.WireFormat``.

    ``name`` is the format's; ``native_server`` is the server imitated (``imitates``) whose own
    format it is (that server honours the format's truncation field).
    """

    name = ""
    native_server: str | None = None
    listing_path: str | None = None  # the GET route that lists the models, answered when the format is on
    absent_answer: object = {"error": "not found"}  # the 404 body when the format is switched off

    def texts(self, body) -> list:
        """The inputs of an embedding request."""
        return _as_list(body.get("input")) if isinstance(body, dict) else []

    def encoding(self, body) -> str:
        """The vector encoding asked for."""
        return "float"

    def truncate(self, body, default: bool) -> bool:
        """Whether the request asks to cut a long input; ``default`` (the server's) when it does not say."""
        return default

    def answer(self, model, vectors: list[list[float]], encoding: str, tokens: int | None) -> object:
        """The 200 answer with ``vectors`` (``tokens``: the count the server reports, None for none)."""
        raise NotImplementedError

    def model_not_found(self, model) -> object:
        """The 404 body for a model the server does not have."""
        raise NotImplementedError

    def listing(self, names: list[str]) -> object:
        """The answer of ``listing_path``."""
        raise NotImplementedError


class OllamaStub(StubFormat):
    name = "ollama"
    native_server = "ollama"
    listing_path = "/api/tags"

    def truncate(self, body, default: bool) -> bool:
        value = body.get("truncate") if isinstance(body, dict) else None
        return value if isinstance(value, bool) else default

    def answer(self, model, vectors, encoding, tokens):
        answer = {"model": model, "embeddings": vectors}
        if tokens is not None:
            answer["prompt_eval_count"] = tokens
        return answer

    def model_not_found(self, model):
        return {"error": f'model "{model}" not found, try pulling it first'}

    def listing(self, names):
        return {"models": [{"name": name, "model": name, "details": {"family": "stub"}} for name in names]}


class OpenAIStub(StubFormat):
    name = "openai"
    listing_path = "/v1/models"
    absent_answer = "404 page not found"

    def encoding(self, body) -> str:
        return body.get("encoding_format", "float") if isinstance(body, dict) else "float"

    def answer(self, model, vectors, encoding, tokens):
        answer = openai_answer(model, vectors, encoding)
        answer["usage"] = {"prompt_tokens": tokens or 0, "total_tokens": tokens or 0}
        return answer

    def model_not_found(self, model):
        return {"error": {"code": 404, "message": f"model {model} not found", "type": "not_found_error"}}

    def listing(self, names):
        return {"object": "list", "data": [{"id": name, "object": "model"} for name in names]}


STUB_FORMATS: dict[str, StubFormat] = {stub.name: stub for stub in (OllamaStub(), OpenAIStub())}
# Whether each server cuts an over-long input when the request does not say (Ollama does; TEI refuses).
TRUNCATES_BY_DEFAULT = {"ollama": True, "tei": False}


def stub_format(name: str) -> StubFormat:
    """The stub's side of wire format ``name``; a format the stub cannot answer is an error, never another's shape."""
    if name not in WIRE_FORMATS:
        raise ValueError(f"{name!r} is not a wire format ({', '.join(WIRE_FORMATS)})")
    if name not in STUB_FORMATS:
        raise ValueError(f"wire format {name!r} has no StubFormat in testing/stub_server.py: add one")
    return STUB_FORMATS[name]


class StubServer(ServesInBackground):
    """``with StubServer(dim=64) as stub:`` a server on ``stub.url`` until the block ends.

    ``wire_formats`` names the wire formats it answers (the others get 404);
    ``models``, when given, lists the model names it knows (others get the
    server's "model not found"); ``requests`` holds ``(path, body)`` pairs.
    """

    def __init__(self, dim: int = 64, wire_formats=None, models=None, host: str = "127.0.0.1", port: int = 0,
                 imitates: str | None = None, context: int | None = None, listed=None, routes=None):
        if imitates not in IMITATED_SERVERS:
            raise ValueError(f"imitates must be one of {IMITATED_SERVERS}")
        self.dim = dim
        self.wire_formats = tuple(WIRE_FORMATS) if wire_formats is None else tuple(wire_formats)
        self.formats = {name: stub_format(name) for name in self.wire_formats}
        self.by_path = {WIRE_FORMATS[name].embed_path: STUB_FORMATS[name] for name in WIRE_FORMATS
                        if name in STUB_FORMATS}
        self.models = None if models is None else set(models)
        self.imitates = imitates
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
            return [text for path, body in self.requests for text in self.by_path[path].texts(body)]

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

    def intercept(self, handler, fmt: StubFormat, body: dict) -> bool:
        """A hook for subclasses: answer this request through ``handler`` and return True,
        or return False to let the stub answer it."""
        return False


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


class StubHandler(BaseHTTPRequestHandler):
    """The stub's HTTP side: one subclass per server (``_handler_for``) carries it as ``stub``."""

    stub: "StubServer"

    def log_message(self, *args) -> None:  # quiet: tests read stderr
        pass

    def do_GET(self) -> None:
        if self.path in self.stub.routes:
            self.stub.routes[self.path](self)
            return
        names = self.stub.names()
        if self.path == "/props" and self.stub.imitates == "llama.cpp":
            self._send(200, {"default_generation_settings": {"n_ctx": self.stub.context, "params": {}},
                             "total_slots": 1, "model_path": "/models/stub.gguf"})
        elif self.path == "/info" and self.stub.imitates == "tei":
            self._send(200, {"model_id": (names or ["stub/model"])[0], "model_dtype": "float32",
                             "max_input_length": self.stub.context, "max_client_batch_size": 32, "version": "stub"})
        elif self._listing(names):
            pass
        elif self.path in ("/", "/health"):
            self._send(200, {"status": "ok", "models": names})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path in self.stub.routes:
            self.stub.routes[self.path](self)
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self._send(400, {"error": "invalid JSON"})
            return
        if self._introspection(body):
            return
        fmt = self.stub.by_path.get(self.path)
        if fmt is None or fmt.name not in self.stub.formats:
            self._send(404, fmt.absent_answer if fmt is not None else {"error": "not found"})
            return
        if not isinstance(body, dict):
            self._send(400, {"error": "the body must be a JSON object"})
            return
        self.stub.record(self.path, body)
        if self.stub.intercept(self, fmt, body):  # a subclass answered (fault_stub.FaultStub)
            return
        model = body.get("model")
        if self.stub.models is not None and model not in self.stub.models:
            self._send(404, fmt.model_not_found(model))
            return
        texts = fmt.texts(body)
        if not texts or not all(isinstance(text, str) for text in texts):
            self._send(400, {"error": "input must be a string or a list of strings"})
            return
        if self._refuses_long(fmt, body, texts):
            return
        seen = [cut_to(text, self.stub.context) for text in texts]  # llama.cpp cuts without a word
        vectors = [bag_of_words(text, self.stub.dim) for text in seen]
        counted = sum(token_count(text) for text in seen) if self.stub.imitates else None
        self._send(200, fmt.answer(model, vectors, fmt.encoding(body), counted))

    def _listing(self, names: list[str]) -> bool:
        """The model list of each format that is on and lists on this path; True when answered."""
        for fmt in self.stub.formats.values():
            if self.path == fmt.listing_path:
                self._send(200, fmt.listing(names))
                return True
        return False

    def _refuses_long(self, fmt: StubFormat, body: dict, texts: list) -> bool:
        """TEI refuses an input over its context, Ollama only when asked not to truncate;
        each honours the truncation field of its own wire format only."""
        long = [text for text in texts if self.stub.over_context(text)]
        if not long or self.stub.imitates not in TRUNCATES_BY_DEFAULT:
            return False
        default = TRUNCATES_BY_DEFAULT[self.stub.imitates]
        if (fmt.truncate(body, default) if fmt.native_server == self.stub.imitates else default):
            return False
        if self.stub.imitates == "tei":
            self._send(413, {"error": f"Input validation error: `inputs` must have less than {self.stub.context} "
                                      f"tokens. Given: {token_count(long[0])}", "error_type": "Validation"})
        else:
            self._send(400, {"error": "the input length exceeds the context length"})
        return True

    def _introspection(self, body) -> bool:
        """``/tokenize`` (llama.cpp, TEI) and ``/api/show`` (Ollama) of the imitates; True when answered."""
        if self.path == "/tokenize" and self.stub.imitates == "llama.cpp":
            content = body.get("content") if isinstance(body, dict) else None
            if not isinstance(content, str):
                self._send(400, {"error": {"code": 400, "message": "\"content\" must be provided"}})
                return True
            specials = SPECIAL_TOKENS if body.get("add_special") else 0
            ids = [_token_id(match.group()) for match in stub_tokens(content)]
            self._send(200, {"tokens": [101] * (specials // 2) + ids + [102] * (specials // 2)})
            return True
        if self.path == "/tokenize" and self.stub.imitates == "tei":
            inputs = body.get("inputs") if isinstance(body, dict) else None
            inputs = [inputs] if isinstance(inputs, str) else inputs
            if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
                self._send(422, {"error": "Failed to deserialize the JSON body", "error_type": "Validation"})
                return True
            self._send(200, [_tei_tokens(text, body.get("add_special_tokens", True)) for text in inputs])
            return True
        if self.path == "/extras/tokenize/count" and self.stub.imitates == "llama-cpp-python":
            text = body.get("input") if isinstance(body, dict) else None
            if not isinstance(text, str):
                self._send(422, {"detail": [{"loc": ["body", "input"], "msg": "field required"}]})
                return True
            self._send(200, {"count": token_count(text)})
            return True
        if self.path == "/api/show" and self.stub.imitates == "ollama":
            self._send(200, {"modelfile": "", "parameters": "", "details": {"family": "bert"},
                             "model_info": {"general.architecture": "bert", "bert.context_length": self.stub.context,
                                            "bert.embedding_length": self.stub.dim}})
            return True
        return False

    def _send(self, status: int, value) -> None:
        data = json.dumps(value).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _handler_for(stub: StubServer) -> type:
    """The handler class of ``stub``'s HTTP server."""
    return type("Handler", (StubHandler,), {"stub": stub})



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
