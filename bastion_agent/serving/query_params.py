"""Query validation: the parameters of a search request, made a checked ``Query`` or refused in one line.

``GET /search?q=...&k=...&mode=...`` and ``POST /search`` with a JSON body
come here; so does the MCP server's ``search`` tool, through
``query_from_values``. Anything unexpected (an unknown or repeated parameter, a
duplicate JSON key, text that is not valid Unicode, a ``k`` out of range) is
a ``RequestError(400)`` naming what is wrong, never a guess at what the
client meant.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from dataclasses import dataclass

from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core import dates
from bastion_agent.core.dates import DateRange
from bastion_agent.core.errors import ConfigError
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.serve_openapi import MAX_DATE_CHARS
from bastion_agent.serving.serve_settings import ServeSettings

SEARCH_PARAMETERS = ("q", "k", "mode", "since", "before")
SEARCH_BODY_KEYS = ("query", "k", "mode", "since", "before")


@dataclass(frozen=True)
class Query:
    text: str
    k: int
    mode: str
    dates: DateRange | None = None  # only documents modified within it (``since``/``before``)


def query_from_string(query_string: str, settings: ServeSettings, default_mode: str) -> Query:
    """``q``, ``k`` and ``mode`` of ``GET /search``, each given at most once."""
    try:
        pairs = urllib.parse.parse_qsl(query_string, keep_blank_values=True, encoding="utf-8", errors="strict",
                                       max_num_fields=len(SEARCH_PARAMETERS) * 2)
    except UnicodeDecodeError:
        raise RequestError(400, "the query string is not valid UTF-8 after percent-decoding") from None
    except ValueError:
        raise RequestError(400, f"too many parameters; allowed: {', '.join(SEARCH_PARAMETERS)}") from None
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in SEARCH_PARAMETERS:
            raise RequestError(400, f"unknown parameter {name[:40]!r}; allowed: {', '.join(SEARCH_PARAMETERS)}")
        if name in values:
            raise RequestError(400, f"parameter {name!r} is given more than once")
        values[name] = value
    if "k" in values and not re.fullmatch(r"[0-9]{1,6}", values["k"]):
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    k = int(values["k"]) if "k" in values else None
    query = checked_query(values.get("q"), k, values.get("mode"), settings, default_mode, name="q")
    return dataclasses.replace(query, dates=checked_dates(values.get("since"), values.get("before")))


def query_from_body(body: bytes, settings: ServeSettings, default_mode: str) -> Query:
    """``{"query": "...", "k": N, "mode": "..."}`` of ``POST /search``."""
    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=_object_without_duplicates)
    except _DuplicateKey as exc:
        raise RequestError(400, f"key {str(exc)[:40]!r} is given more than once in the body") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # nested past the parser's depth: not a query
        raise RequestError(400, 'the body must be JSON such as {"query": "budget review", "k": 5}') from None
    if not isinstance(value, dict):
        raise RequestError(400, 'the body must be a JSON object such as {"query": "budget review", "k": 5}')
    unknown = [key for key in value if key not in SEARCH_BODY_KEYS]
    if unknown:
        raise RequestError(400, f"unknown key {unknown[0][:40]!r} in the body; allowed: {', '.join(SEARCH_BODY_KEYS)}")
    return query_from_values(value.get("query"), value.get("k"), value.get("mode"), settings, default_mode,
                             since=value.get("since"), before=value.get("before"))


def query_from_values(query, k, mode, settings: ServeSettings, default_mode: str, since=None, before=None) -> Query:
    """A query given as JSON values (a ``POST /search`` body, an MCP tool call): each optional, each of its type.

    JSON has no types a client must keep to, so ``"k": "5"`` or ``"k": true``
    is refused here rather than read as a number; then ``checked_query``.
    """
    if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    if query is not None and not isinstance(query, str):
        raise RequestError(400, "query must be a string")
    if mode is not None and not isinstance(mode, str):
        raise RequestError(400, f"mode must be one of {', '.join(SEARCH_MODES)}")
    checked = checked_query(query, k, mode, settings, default_mode, name="query")
    return dataclasses.replace(checked, dates=checked_dates(since, before))


def checked_dates(since, before) -> DateRange | None:
    """``since`` and ``before`` as a ``DateRange`` (None: neither given), or a 400 that names the forms."""
    for name, value in (("since", since), ("before", before)):
        if value is not None and (not isinstance(value, str) or len(value) > MAX_DATE_CHARS):
            raise RequestError(400, f"{name} must be {dates.FORMS}")
    try:
        return dates.date_range(since, before)
    except ConfigError as exc:
        raise RequestError(400, str(exc)) from None


class _DuplicateKey(ValueError):
    pass


def _object_without_duplicates(pairs: list) -> dict:
    """A JSON object whose keys are each given once (two "query" keys: which one would count?)."""
    value = {}
    for key, item in pairs:
        if key in value:
            raise _DuplicateKey(key)
        value[key] = item
    return value


def checked_query(text: str | None, k: int | None, mode: str | None, settings: ServeSettings,
                  default_mode: str, name: str) -> Query:
    if text is None or not text.strip():
        raise RequestError(400, f"{name} is missing or empty: say what to look for")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): not text
        raise RequestError(400, f"{name} is not valid Unicode text (a lone surrogate)") from None
    if len(text) > settings.max_query_chars:
        raise RequestError(400, f"{name} is longer than {settings.max_query_chars} characters")
    if k is None:
        k = settings.default_k
    if not 1 <= k <= settings.max_k:
        raise RequestError(400, f"k must be a whole number from 1 to {settings.max_k}")
    mode = default_mode if mode is None else mode
    if mode not in SEARCH_MODES:
        raise RequestError(400, f"mode must be one of {', '.join(SEARCH_MODES)}")
    return Query(text, k, mode)
