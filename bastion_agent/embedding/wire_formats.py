"""The wire formats: how each model server API asks for vectors and answers them, one class each.

A wire format is everything the agent needs to know about one embedding
API: its name (the value of ``EMBED_API``), the route it posts to, the body
it sends, how it reads the vectors and token counts out of an answer (and
what counts as an answer of another shape), whether a request can ask the
server to truncate a too-long input, and which routes tell what the server
serves. The client (``client.py``), ``server_info``, ``window_fit``, ``init``
and the test servers look a format up in ``WIRE_FORMATS`` and ask it;
none of them branches on a format's name. So a new API is one class here,
its answer in ``testing/stub_server.py`` (``STUB_FORMATS``), and its tests.

::

    WireFormat                 the interface, and the defaults most APIs share
    ├── OllamaFormat           POST /api/embed, {"embeddings": [[...]]}, truncate in the request
    └── OpenAIFormat           POST /v1/embeddings, {"data": [{"index", "embedding"}]}, base64 or floats

Detection: when ``EMBED_API`` is unset, the probe tries the formats in the
registry's order and keeps the first whose route answers with a vector of
its shape (a 404/405/501, or an answer of another shape, means "not this
one").
"""

from __future__ import annotations

from bastion_agent.core.errors import ConfigError


class WireFormat:
    """One embedding API. Subclasses set the attributes and override what differs.

    Capabilities are attributes, so a caller asks (``fmt.can_truncate``)
    rather than compares names.
    """

    name: str = ""  # the value of EMBED_API that selects it
    label: str = ""  # how a message names the server's API ("Ollama")
    embed_path: str = ""  # the route vectors are posted to
    # Vector encodings the probe asks for, in order; a 400/422 to one falls back to the next.
    probe_encodings: tuple[str, ...] = ("float",)
    # Truncation. can_truncate: a too-long input can be resent asking the server to cut it.
    # refuses_long: asked not to truncate, the server refuses a too-long input (it never cuts silently),
    # so no context needs probing and no stored vector is of a cut text unless the engine asked.
    can_truncate: bool = False
    refuses_long: bool = False
    # Introspection (server_info): the routes that list served models, whether TEI's GET /info may
    # answer beside this API, and whether Ollama's POST /api/show gives the context.
    listing_routes: tuple[str, ...] = ()
    asks_info: bool = False
    asks_show: bool = False

    def request_body(self, model: str, texts: list[str], encoding: str, truncate: bool) -> dict:
        """The JSON body that asks for the vectors of ``texts``."""
        raise NotImplementedError

    def vectors(self, answer: object) -> list | None:
        """The vectors of an answer in input order (floats or base64 strings), or None when it is not this shape.

        Each vector is checked later (``vector_packing.pack_all``): a list of the
        wrong length, or an element that is not a vector, is a malformed
        answer of this format, not another format's.
        """
        raise NotImplementedError

    def prompt_tokens(self, answer: object) -> int | None:
        """The tokens the answer says the server read (None when absent, or 0: servers that do not count say 0)."""
        return None

    def __repr__(self) -> str:
        return f"<wire format {self.name}>"


# How a model listing route answers: the list's key in the answer, and each item's name keys, in order.
LISTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "/api/tags": ("models", ("name", "model")),  # Ollama (and the embedded model server)
    "/v1/models": ("data", ("id",)),  # OpenAI-style servers, Ollama too
}
MAX_LISTED = 1000  # items read from one listing: a hostile server's endless list costs no more


def listing_routes() -> tuple[str, ...]:
    """Every route a format lists its models on, in the registry's order, each once."""
    return tuple(dict.fromkeys(route for fmt in WIRE_FORMATS.values() for route in fmt.listing_routes))


def listed_names(route: str, answer: object) -> list[str]:
    """The model names in ``answer`` to ``GET route`` (strings as given; the caller bounds their length)."""
    key, name_keys = LISTINGS[route]
    items = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(items, list):
        return []
    names = []
    for item in items[:MAX_LISTED]:
        name = next((item.get(k) for k in name_keys if item.get(k)), None) if isinstance(item, dict) else item
        if isinstance(name, str):
            names.append(name)
    return names


def _count(value) -> int | None:
    return value if type(value) is int and 0 < value < 1 << 31 else None


class OllamaFormat(WireFormat):
    """Ollama's ``POST /api/embed``: ``{"model", "input": [...], "truncate": bool}`` -> ``{"embeddings": [...]}``.

    Never the legacy ``/api/embeddings``, which answers an empty vector when
    sent ``input``. Asked ``truncate: false``, Ollama refuses an input over
    the context; the engine resends it alone with ``truncate: true``.
    """

    name = "ollama"
    label = "Ollama"
    embed_path = "/api/embed"
    can_truncate = True
    refuses_long = True
    listing_routes = ("/api/tags", "/v1/models")
    asks_show = True

    def request_body(self, model: str, texts: list[str], encoding: str, truncate: bool) -> dict:
        return {"model": model, "input": texts, "truncate": truncate}

    def vectors(self, answer: object) -> list | None:
        vectors = answer.get("embeddings") if isinstance(answer, dict) else None
        return vectors if isinstance(vectors, list) else None

    def prompt_tokens(self, answer: object) -> int | None:
        return _count(answer.get("prompt_eval_count")) if isinstance(answer, dict) else None


class OpenAIFormat(WireFormat):
    """The OpenAI-style ``POST /v1/embeddings`` (llama.cpp server, TEI, vLLM, llama-cpp-python).

    ``{"model", "input": [...], "encoding_format": "base64"|"float"}`` ->
    ``{"data": [{"index", "embedding"}]}``; results are matched to inputs by
    ``index``. The probe asks for base64 (little-endian float32, a third of
    the bytes of JSON floats) and falls back to floats when the server
    refuses it; an answer in floats is read either way. The request has no
    truncation field: such a server cuts a long input silently (llama.cpp)
    or refuses it (TEI unless started with ``--auto-truncate``).
    """

    name = "openai"
    label = "OpenAI-style"
    embed_path = "/v1/embeddings"
    probe_encodings = ("base64", "float")
    listing_routes = ("/v1/models",)
    asks_info = True  # TEI serves this route too, and says its model and context on GET /info

    def request_body(self, model: str, texts: list[str], encoding: str, truncate: bool) -> dict:
        return {"model": model, "input": texts, "encoding_format": encoding}

    def vectors(self, answer: object) -> list | None:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            return None
        try:
            ordered = sorted(data, key=lambda item: int(item["index"]))
        except (KeyError, TypeError, ValueError):
            return None
        if [int(item["index"]) for item in ordered] != list(range(len(ordered))):
            return [None] * len(ordered)  # duplicate or missing indexes: malformed, caught when packed
        return [item.get("embedding") for item in ordered]

    def prompt_tokens(self, answer: object) -> int | None:
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return _count(usage.get("prompt_tokens")) if isinstance(usage, dict) else None


# The registry, in the order the probe tries them when EMBED_API is unset.
WIRE_FORMATS: dict[str, WireFormat] = {fmt.name: fmt for fmt in (OllamaFormat(), OpenAIFormat())}


def names_sentence() -> str:
    """The formats' names as a message lists them: ``'ollama' or 'openai'``."""
    names = [repr(name) for name in WIRE_FORMATS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def wire_format(name: str | WireFormat) -> WireFormat:
    """The format named ``name`` (a format is returned as it is); ``ConfigError`` lists the names.

    The unknown name is not echoed: ``EMBED_API`` reads like "the API key", and people put keys there.
    """
    if isinstance(name, WireFormat):
        return name
    found = WIRE_FORMATS.get(name)
    if found is None:
        raise ConfigError(f"EMBED_API must be {names_sentence()} (or unset to detect)")
    return found
