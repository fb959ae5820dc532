"""What the model server says about itself: the models it serves, its context, its token counts.

The client side only: it asks whichever server ``EMBED_URL`` names (Ollama,
llama.cpp, TEI, or this package's own ``model/modelserver.py``) and serves
nothing.

The probe checks the dimension, but many models share 384 or 768, and a
llama.cpp server answers for any ``model`` value; and every server cuts (or
refuses) a window longer than its context without saying so in the vector.
So before the store is opened the embed stage asks the server, read-only:

- **which models it serves**: Ollama's ``GET /api/tags``, the OpenAI-style
  ``GET /v1/models`` (llama.cpp, llama-cpp-python, vLLM), TEI's ``GET /info``
  (``model_id``);
- **its context** in tokens: ``EMBED_CONTEXT`` from the environment when set
  (a property of the server, like ``EMBED_URL``), else llama.cpp's ``GET
  /props`` (``default_generation_settings.n_ctx``), TEI's ``GET /info``
  (``max_input_length``), Ollama's ``POST /api/show`` (``model_info``'s
  ``<architecture>.context_length``, lowered to a ``num_ctx`` parameter);
- **how to count tokens**: llama.cpp's ``POST /tokenize`` ``{"content"}`` ->
  ``{"tokens": [...]}`` (one text a request), TEI's ``POST /tokenize``
  ``{"inputs": [...]}`` -> one token list per input, llama-cpp-python's
  ``POST /extras/tokenize/count`` ``{"input"}`` -> ``{"count"}``; Ollama has
  none (its ``prompt_eval_count`` is per request, so the probe's gives an
  estimate, see ``window_fit``).

Every request here is bounded: a short timeout, a total deadline (a server
that trickles its answer a byte at a time is abandoned), and a cap on the
bytes read, so a broken or hostile server costs a few seconds and a few
hundred kilobytes, never a hang or the machine's memory. A server that
answers none of this is not an error: the stage goes on and says what it
could not learn.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Sequence

from bastion_agent.config.model_names import canonical_name
from bastion_agent.core.errors import ConfigError, ModelServerError
from bastion_agent.embedding.client import PROBE_TEXT
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.embedding.transport import NO_PROXY_OPENER, BadAnswer, read_bounded, within
from bastion_agent.embedding.wire_formats import WireFormat, listed_names, wire_format

INFO_TIMEOUT = 10.0  # seconds for one introspection request, all of it (at most EMBED_TIMEOUT)
MAX_INFO_BYTES = 1 << 20  # /props, /info, /api/show, model lists: a megabyte is far more than any real answer
MAX_TOKENIZE_BYTES = 8 << 20  # one /tokenize answer (TEI's carry each token's text and offsets)
TEI_TOKENIZE_BATCH = 16  # texts per TEI /tokenize request
MAX_CONTEXT = 1 << 24  # a context above 16M tokens is not believed
LONG_INPUTS_AVERAGED = "mean_of_windows"  # the embedded server's /props says it embeds long inputs whole


class Unanswered(Exception):
    """An introspection request that gave nothing usable (absent route, error, too big, too slow, not JSON)."""


class ModelMismatchError(ModelServerError):
    """The server does not list the manifest's model."""


@dataclass
class ServerInfo:
    """What the server told us; None where it did not say."""

    served: list[str] = field(default_factory=list)  # model names as the server lists them
    listed_by: list[str] = field(default_factory=list)  # the routes that listed them
    context: int | None = None
    context_source: str | None = None  # "EMBED_CONTEXT", "/props", "/info", "/api/show"
    counter: str | None = None  # "llama.cpp", "tei", "llama-cpp-python"
    cuts_long_inputs: bool = True  # False: the server embeds a long input whole (the embedded model server)
    wire_format: WireFormat | None = None  # the one in use: whether the server refuses a long input or cuts it
    notes: list[str] = field(default_factory=list)  # what failed, for a hostile-server message


# --- bounded requests ---------------------------------------------------------


def request_json(url: str, body: dict | None = None, timeout: float = INFO_TIMEOUT, limit: int = MAX_INFO_BYTES,
                 opener=NO_PROXY_OPENER) -> object:
    """GET (or POST ``body``) and parse the JSON answer, within ``timeout`` seconds and ``limit`` bytes.

    The exchange runs on a daemon thread joined with the deadline: socket
    timeouts alone bound each read, not a server that sends one byte every
    few seconds. Raises ``Unanswered`` whatever goes wrong.
    """
    try:
        return within(timeout, _exchange, url, body, timeout, limit, opener)
    except TimeoutError:
        raise Unanswered(f"no answer within {timeout:g}s") from None


def _exchange(url: str, body: dict | None, timeout: float, limit: int, opener) -> object:
    deadline = time.monotonic() + timeout  # so an abandoned exchange ends soon after, too
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            payload = read_bounded(response, limit, deadline)
    except urllib.error.HTTPError as exc:
        exc.close()  # its socket, or a ResourceWarning later
        raise Unanswered(f"HTTP {exc.code}") from None
    except BadAnswer as exc:  # over the limit
        raise Unanswered(str(exc)) from None
    except TimeoutError:  # the socket's or the deadline's: request_json says it as it says its own join's
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise Unanswered(type(exc).__name__) from None
    try:
        return json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Unanswered("the answer is not JSON") from None


# --- what the server serves -----------------------------------------------------


def inspect(config: EndpointConfig, fmt: WireFormat | str, model: str, environ=None,
            fetch: Callable = request_json) -> ServerInfo:
    """Ask the server at ``config.url`` what it serves, its context and how it counts tokens.

    The wire format ``fmt`` says which routes are worth asking (``listing_routes``,
    ``asks_info``, ``asks_show``): a server of another API would only answer 404.
    """
    fmt = wire_format(fmt)
    info = ServerInfo(wire_format=fmt)
    timeout = min(config.timeout, INFO_TIMEOUT)
    base = config.url

    def ask(path: str, body: dict | None = None):
        try:
            return fetch(base + path, body, timeout)
        except Unanswered as exc:
            info.notes.append(f"{path}: {exc}")
            return None

    props = ask("/props")
    tei_info = ask("/info") if fmt.asks_info else None
    for path in fmt.listing_routes:
        names = _names_in(path, ask(path))
        if names:
            info.served.extend(name for name in names if name not in info.served)
            info.listed_by.append(path)
    tei_id = _tei_model_id(tei_info)
    if tei_id and tei_id not in info.served:
        info.served.append(tei_id)
        info.listed_by.append("/info")
    show = ask("/api/show", {"model": model, "name": model}) if fmt.asks_show else None
    if isinstance(props, dict) and props.get("long_inputs") == LONG_INPUTS_AVERAGED:
        info.cuts_long_inputs = False
    info.context, info.context_source = _context(environ, props, tei_info, show)
    info.counter = _counter(base, model, ask, tei=tei_id is not None)
    return info


def _names_in(path: str, answer) -> list[str]:
    return [name for name in listed_names(path, answer) if 0 < len(name) <= 512 and name.isprintable()]


def _tei_model_id(answer) -> str | None:
    if isinstance(answer, dict) and isinstance(answer.get("model_id"), str) and "max_input_length" in answer:
        name = answer["model_id"]
        return name if 0 < len(name) <= 512 and name.isprintable() else None
    return None


def _context(environ, props, tei_info, show) -> tuple[int | None, str | None]:
    env = os.environ if environ is None else environ
    text = env.get("EMBED_CONTEXT")
    if text:
        if not text.isdigit() or not 0 < int(text) <= MAX_CONTEXT:
            raise ConfigError(f"EMBED_CONTEXT must be the server's context in tokens, a whole number > 0; got {text[:24]!r}")
        return int(text), "EMBED_CONTEXT"
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        value = settings.get("n_ctx") if isinstance(settings, dict) else None
        value = _tokens(value if value is not None else props.get("n_ctx"))
        if value:
            return value, "/props"
    if isinstance(tei_info, dict) and _tokens(tei_info.get("max_input_length")):
        return _tokens(tei_info.get("max_input_length")), "/info"
    if isinstance(show, dict):
        value = _ollama_context(show)
        if value:
            return value, "/api/show"
    return None, None


def _tokens(value) -> int | None:
    """A believable token count, or None (bool, negative, absurd, not a number)."""
    if type(value) is int and 0 < value <= MAX_CONTEXT:
        return value
    return None


def _ollama_context(show: dict) -> int | None:
    """``<arch>.context_length`` of ``model_info``, lowered to the model's ``num_ctx`` parameter if it sets one."""
    model_info = show.get("model_info")
    if not isinstance(model_info, dict):
        return None
    arch = model_info.get("general.architecture")
    context = _tokens(model_info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
    parameters = show.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d{1,9})\s*$", parameters[:65536], re.M)
        if match and _tokens(int(match.group(1))):
            context = min(context or MAX_CONTEXT, int(match.group(1)))
    return context


@dataclass(frozen=True)
class TokenCounter:
    """One server's way of counting tokens: its route, the texts a request takes, its body and answer.

    ``name`` is what the summary's ``token_counter`` says; ``read`` gives one
    count per text sent, or None when the answer is not that.
    """

    name: str
    path: str
    batch: int
    body: Callable[[list[str], str], dict]
    read: Callable[[object, int], "list[int] | None"]
    limit: int = MAX_TOKENIZE_BYTES


def _tei_counts(answer, expected: int) -> list[int] | None:
    if not isinstance(answer, list) or len(answer) != expected or not all(isinstance(item, list) for item in answer):
        return None
    return [len(item) for item in answer]


def _llama_cpp_counts(answer, expected: int) -> list[int] | None:
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return [len(tokens)] if isinstance(tokens, list) else None


def _count_field(answer, expected: int) -> list[int] | None:
    count = answer.get("count") if isinstance(answer, dict) else None
    return [count] if type(count) is int and 0 <= count <= MAX_CONTEXT * 64 else None


TEI_COUNTER = TokenCounter("tei", "/tokenize", TEI_TOKENIZE_BATCH,
                           lambda part, model: {"inputs": part, "add_special_tokens": True}, _tei_counts)
COUNTERS = {counter.name: counter for counter in (
    TEI_COUNTER,
    TokenCounter("llama.cpp", "/tokenize", 1, lambda part, model: {"content": part[0], "add_special": True},
                 _llama_cpp_counts),
    TokenCounter("llama-cpp-python", "/extras/tokenize/count", 1,
                 lambda part, model: {"input": part[0], "model": model}, _count_field, MAX_INFO_BYTES),
)}


def _counter(base: str, model: str, ask, tei: bool) -> str | None:
    """The first way of counting tokens that counts the probe text (cheap requests, fixed text).

    A server whose ``/info`` says it is TEI is asked TEI's way only (its
    ``/tokenize`` takes another body than llama.cpp's).
    """
    candidates = [TEI_COUNTER] if tei else [counter for counter in COUNTERS.values() if counter is not TEI_COUNTER]
    for counter in candidates:
        counts = counter.read(ask(counter.path, counter.body([PROBE_TEXT], model)), 1)
        if counts and counts[0] > 0:
            return counter.name
    return None


def count_tokens(config: EndpointConfig, counter: str, model: str, texts: Sequence[str],
                 fetch: Callable = request_json) -> list[int | None]:
    """The server's token count of each text (None where it gave none), in bounded requests.

    One text a request for llama.cpp and llama-cpp-python (their routes take
    one), ``TEI_TOKENIZE_BATCH`` for TEI; each answer is capped (``TokenCounter.limit``).
    After three failed requests in a row the rest is
    left uncounted (None): a server that stopped answering costs seconds.
    """
    way = COUNTERS[counter]
    timeout = min(config.timeout, INFO_TIMEOUT)
    counts: list[int | None] = []
    failures = 0
    for first in range(0, len(texts), way.batch):
        part = list(texts[first : first + way.batch])
        if failures >= 3:
            counts.extend([None] * len(part))
            continue
        try:
            counts.extend(_count_part(config.url, way, model, part, timeout, fetch))
            failures = 0
        except Unanswered:
            failures += 1
            counts.extend([None] * len(part))
    return counts


def _count_part(base: str, way: TokenCounter, model: str, part: list[str], timeout: float, fetch) -> list[int]:
    counts = way.read(fetch(base + way.path, way.body(part, model), timeout, way.limit), len(part))
    if counts is None:
        raise Unanswered(f"no token count per input from {way.path}")
    return counts


# --- the model's identity -------------------------------------------------------


def normalised_name(name: str) -> str:
    """A model name as compared: its canonical name (``config.model_names``), the one vectors are keyed by."""
    return canonical_name(name)


def served_match(model: str, served: Sequence[str]) -> str | None:
    """The listed name that is the manifest's ``model`` (see ``normalised_name``), or None."""
    wanted = normalised_name(model)
    for name in served:
        if normalised_name(name) == wanted:
            return name
    return None


def check_identity(info: ServerInfo, model: str, where: str) -> str | None:
    """Refuse a server that lists models but not ``model``; return a warning when it lists none.

    Raises ``ModelMismatchError`` (one line: the model and what is listed).
    """
    if not info.served:
        return (f"warning: {where} does not list the models it serves (no /v1/models, /api/tags or /info): "
                f"cannot check that it serves {model!r}; only the dimension was checked")
    if served_match(model, info.served) is not None:
        return None
    shown = ", ".join(repr(name) for name in info.served[:8]) + (" ..." if len(info.served) > 8 else "")
    raise ModelMismatchError(
        f"the manifest pins model {model!r} but {where} serves {shown} ({', '.join(info.listed_by)}); "
        "nothing was stored: set [embed] model to the served one, or serve that model "
        "(llama.cpp: --alias NAME)"
    )
