"""The model server client: the ``EMBED_*`` environment and both wire formats.

The endpoint is a property of the machine, never of the manifest: the
environment names it (``EMBED_URL``), and the manifest only pins the model
name and dimension. Two wire formats are spoken:

- ``ollama``: ``POST /api/embed`` with ``{"model", "input": [...]}``, answer
  ``{"embeddings": [[...], ...]}`` (never the legacy ``/api/embeddings``,
  which answers an empty vector when sent ``input``);
- ``openai``: ``POST /v1/embeddings`` with ``{"model", "input": [...],
  "encoding_format": "float"}``, answer ``{"data": [{"index", "embedding"}]}``
  (llama.cpp server, TEI); results are matched to inputs by ``index``.

Requests never go through an HTTP proxy from the environment: the text sent
is the bastion's, and it goes to the server named, or nowhere.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .errors import ConfigError, ModelServerError

DEFAULT_URL = "http://127.0.0.1:11434"
DEFAULT_BATCH = 32
DEFAULT_TIMEOUT = 300.0
APIS = ("ollama", "openai")
PATHS = {"ollama": "/api/embed", "openai": "/v1/embeddings"}
PROBE_TEXT = "bastion agent probe: is this the pinned model?"


@dataclass(frozen=True)
class EndpointConfig:
    """``EMBED_URL``, ``EMBED_API``, ``EMBED_BATCH``, ``EMBED_TIMEOUT``, validated."""

    url: str = DEFAULT_URL
    api: str | None = None
    batch: int = DEFAULT_BATCH
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "EndpointConfig":
        env = os.environ if environ is None else environ
        return cls(
            url=_base_url(env.get("EMBED_URL") or DEFAULT_URL),
            api=_api(env.get("EMBED_API") or None),
            batch=_positive(env, "EMBED_BATCH", DEFAULT_BATCH, int),
            timeout=_positive(env, "EMBED_TIMEOUT", DEFAULT_TIMEOUT, float),
        )

    @property
    def display_url(self) -> str:
        """The URL without credentials, for messages and summaries."""
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _base_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"EMBED_URL must be an http:// or https:// URL such as {DEFAULT_URL}; got {value!r}")
    try:
        parts.port
    except ValueError:
        raise ConfigError(f"EMBED_URL has an invalid port: {value!r}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):  # an OpenAI "base URL": the paths below add /v1 themselves
        path = path[: -len("/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _api(value: str | None) -> str | None:
    if value is not None and value not in APIS:
        raise ConfigError(f"EMBED_API must be 'ollama' or 'openai' (or unset to detect); got {value!r}")
    return value


def _positive(env: Mapping[str, str], name: str, default, kind):
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or (kind is float and not math.isfinite(value)):
        noun = "a whole number" if kind is int else "a number of seconds"
        raise ConfigError(f"{name} must be {noun} > 0; got {text!r}")
    return value


class HTTPFailure(Exception):
    """A non-2xx answer, with the server's own error message when it gave one."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status
        self.message = message


_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post_json(url: str, body: dict, timeout: float, opener=_NO_PROXY_OPENER) -> object:
    """POST ``body`` as JSON; return the parsed answer or raise ``HTTPFailure``.

    Connection failures surface as ``OSError`` (``urllib.error.URLError`` is one).
    """
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        raise HTTPFailure(exc.code, _error_message(exc.read())) from None
    try:
        return json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HTTPFailure(200, "the answer is not JSON") from None


def _error_message(body: bytes) -> str:
    """The message of Ollama's ``{"error": "..."}`` or llama.cpp's ``{"error": {"message"}}``."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return body[:200].decode("utf-8", "replace").strip()
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(error, str):
        return error[:300]
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return value["message"][:300]
    return ""


class EmbedClient:
    """Embeds texts with ``model`` at the endpoint of ``config``.

    ``probe(dim)`` must be called first: it settles the wire format (the
    configured one, or the one that answers) and refuses a server whose
    vectors do not have the pinned dimension.
    """

    def __init__(self, config: EndpointConfig, model: str, post: Callable = post_json):
        self.config = config
        self.model = model
        self.api = config.api
        self.dim: int | None = None
        self._post = post

    def probe(self, dim: int) -> str:
        """Embed the probe text; return the API in use. Raises ``ModelServerError``."""
        apis = [self.api] if self.api else list(APIS)
        failures = []
        for api in apis:
            try:
                vectors = self._embed_with(api, [PROBE_TEXT])
            except _WrongAPI as exc:
                failures.append(f"{PATHS[api]}: {exc}")
                continue
            served = len(vectors[0])
            if served != dim:
                raise ModelServerError(
                    f"model {self.model!r} at {self.config.display_url} ({api}) serves {served}-dimensional "
                    f"vectors but the manifest pins dim = {dim}; nothing was stored"
                )
            self.api, self.dim = api, dim
            return api
        raise ModelServerError(
            f"{self.config.display_url} did not answer as an embedding server ({'; '.join(failures)}); "
            "check EMBED_URL and EMBED_API"
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One request for ``texts``; vectors in input order, checked."""
        if self.api is None or self.dim is None:
            raise RuntimeError("probe() must succeed before embed()")
        try:
            vectors = self._embed_with(self.api, list(texts))
        except _WrongAPI as exc:
            raise ModelServerError(f"{self.config.display_url}{PATHS[self.api]}: {exc}") from None
        for vector in vectors:
            if len(vector) != self.dim:
                raise ModelServerError(
                    f"{self.config.display_url} returned a {len(vector)}-dimensional vector, expected {self.dim}"
                )
        return vectors

    def _embed_with(self, api: str, texts: list[str]) -> list[list[float]]:
        url = self.config.url + PATHS[api]
        body: dict = {"model": self.model, "input": texts}
        if api == "openai":
            body["encoding_format"] = "float"
        try:
            answer = self._post(url, body, self.config.timeout)
        except HTTPFailure as exc:
            if exc.status in (404, 405, 501) and not _names_the_model(exc.message, self.model):
                raise _WrongAPI(str(exc)) from None
            raise ModelServerError(f"{self.config.display_url}{PATHS[api]} refused the request: {exc}") from None
        except (OSError, TimeoutError) as exc:
            raise ModelServerError(f"cannot reach the model server at {self.config.display_url}: {_reason(exc)}") from None
        vectors = _vectors_from(api, answer)
        if vectors is None:
            raise _WrongAPI("the answer does not have the shape of this API")
        _check_vectors(vectors, len(texts), self.config.display_url)
        return vectors


class _WrongAPI(Exception):
    """The endpoint does not speak this wire format (another may)."""


def _names_the_model(message: str, model: str) -> bool:
    """Ollama answers 404 "model ... not found" on the right path: that is final."""
    lowered = message.lower()
    return "model" in lowered and ("not found" in lowered or model.lower() in lowered)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


def _vectors_from(api: str, answer: object) -> list | None:
    """The vectors of an answer in input order, or None when it is not this API's shape."""
    if not isinstance(answer, dict):
        return None
    if api == "ollama":
        vectors = answer.get("embeddings")
        return vectors if isinstance(vectors, list) else None
    data = answer.get("data")
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        return None
    try:
        ordered = sorted(data, key=lambda item: int(item["index"]))
    except (KeyError, TypeError, ValueError):
        return None
    return [item.get("embedding") for item in ordered]


def _check_vectors(vectors: list, expected: int, where: str) -> None:
    """Never store a wrong vector: count, type, finiteness."""
    if len(vectors) != expected:
        raise ModelServerError(f"{where} returned {len(vectors)} vectors for {expected} inputs")
    for vector in vectors:
        if not isinstance(vector, list) or not vector:
            raise ModelServerError(f"{where} returned an empty or malformed vector")
        for value in vector:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ModelServerError(f"{where} returned a vector with a non-finite or non-numeric value")
