"""The OpenAPI 3.1 description ``serve`` answers at ``/openapi.json``.

It is built from the running server's settings, so it lists what this
server does and nothing else: 401 only when ``BASTION_SERVE_TOKEN`` is set,
421 only on loopback (where the ``Host`` check applies), 403 (a request from
another site) everywhere but the page, and the limits it
enforces. ``test_serve`` provokes every documented status on every
documented operation, and checks the server answers no other route.
"""

from __future__ import annotations

from bastion_agent import __version__
from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core import dates, records

# The routes serve answers, and those that never need the token (a static page and a liveness answer).
DOC_ROUTE = "/doc/{doc}"  # one sanitized document; the only route with a parameter in its path
ROUTES = {"/": ("GET",), "/healthz": ("GET",), "/openapi.json": ("GET",), "/search": ("GET", "POST"),
          DOC_ROUTE: ("GET",)}
PUBLIC_ROUTES = ("/", "/healthz")
ERROR = {"$ref": "#/components/schemas/Error"}
MAX_DATE_CHARS = 40  # the longest since/before a request may give


DOCUMENT_SCHEMA = {
    "type": "object",
    "required": ["doc", "paths", "modified", "ocr", "truncated", "text", "windows", "pages"],
    "properties": {
        "doc": {"type": "string"}, "paths": {"type": "array", "items": {"type": "string"}},
        "modified": {"type": ["string", "null"]}, "ocr": {"type": "boolean"}, "truncated": {"type": "boolean"},
        "text": {"type": "string", "description": "The sanitized text; a window's start and end are offsets in it."},
        "windows": {"type": "array", "items": {"type": "object", "properties": {
            "chunk_id": {"type": "string"}, "idx": {"type": "integer"}, "start": {"type": "integer"},
            "end": {"type": "integer"}}}},
        "pages": {"type": "array", "items": {"type": "object", "properties": {
            "start": {"type": "integer"}, "page": {"type": ["integer", "null"]}, "ocr": {"type": "boolean"}}}},
    },
}


def route_of(path: str) -> str:
    """The route a request path is for: itself, or ``DOC_ROUTE`` for ``/doc/`` and one more segment."""
    if path.startswith("/doc/") and "/" not in path[len("/doc/"):]:
        return DOC_ROUTE
    return path


def document(settings, url: str) -> dict:
    """The OpenAPI document for a server with ``settings`` listening at ``url``."""
    operations = {
        ("/", "GET"): _page(),
        ("/healthz", "GET"): _health(),
        ("/openapi.json", "GET"): _openapi(),
        ("/search", "GET"): _search_get(settings),
        ("/search", "POST"): _search_post(settings),
        (DOC_ROUTE, "GET"): _document(),
    }
    assert set(operations) == {(path, method) for path, methods in ROUTES.items() for method in methods}
    paths: dict[str, dict] = {}
    for (path, method), operation in operations.items():
        responses = operation["responses"]
        responses["408"] = _error(f"The request was not received within {settings.request_time_limit:g} s.")
        if path != "/":
            responses["403"] = _error("Sent by a web page on another site (Sec-Fetch-Site, Origin): refused.")
        if settings.loopback:
            responses["421"] = _error("The Host header does not name a loopback address (DNS rebinding guard).")
        if settings.guarded and path not in PUBLIC_ROUTES:
            responses["401"] = _error("Missing or wrong `Authorization: Bearer TOKEN`.")
            operation["security"] = [{"bearer": []}]
        if settings.guarded and path == "/search":  # the local user (no token) is not limited
            responses["429"] = _error("This token spent its searches ([serve] searches_per_minute, search_burst); "
                                      "`Retry-After` says in how many seconds one is back.")
        paths.setdefault(path, {})[method.lower()] = operation
    doc = {
        "openapi": "3.1.0",
        "info": {
            "title": "bastion agent search",
            "version": __version__,
            "description": (
                "Search a bastion's sanitized documents by meaning. Every error is JSON `{\"error\": \"...\"}`. "
                "A path not listed here answers 404, a method not listed for a path answers 405 (with `Allow`). "
                "Text in hits comes only from the sanitized windows in vectors.db."
            ),
        },
        "servers": [{"url": url.rstrip("/")}],
        "paths": paths,
        "components": {"schemas": _schemas(settings)},
    }
    if settings.guarded:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


def _json(description: str, ref: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _page() -> dict:
    return {
        "summary": "The search page (HTML, self-contained).",
        "responses": {"200": {"description": "The page.", "content": {"text/html": {"schema": {"type": "string"}}}}},
    }


def _health() -> dict:
    return {
        "summary": "Liveness, the model, the number of chunks the caller may search and when the index was loaded.",
        "description": ("Never needs the token; without it (on a server with tokens) the answer is only `status`. "
                        "`status` is `degraded` while the model server is unreachable."),
        "responses": {"200": _json("The server's state.", "Health")},
    }


def _openapi() -> dict:
    return {
        "summary": "This document.",
        "responses": {"200": {"description": "OpenAPI 3.1.", "content": {"application/json": {"schema": {"type": "object"}}}}},
    }


def _search_responses(settings, *, body: bool) -> dict:
    reasons = (f"missing or empty query, query over {settings.max_query_chars} characters, "
               f"k not a whole number in 1..{settings.max_k}, unknown mode or parameter, since/before not a date")
    if body:
        reasons += ", body not a JSON object of the right shape, no Content-Length"
    responses = {
        "200": _json("Hits, best first.", "SearchAnswer"),
        "400": _error(f"A bad query: {reasons}."),
        "503": _error(f"The answer took longer than {settings.request_time_limit:g} s. (When the model server is down,"
                      " keyword search answers with 200, \"fallback\": \"keyword\" and a notice.)"),
    }
    if body:
        responses["413"] = _error(f"The body is larger than {settings.max_body_bytes} bytes.")
    return responses


def _document() -> dict:
    return {
        "summary": "One sanitized document in full: its windows in order, overlaps once, its pages.",
        "description": ("HTML (a page without script) unless `Accept` names `application/json`. A document the"
                        " caller may not read is answered exactly like one that does not exist (404)."),
        "parameters": [{"name": "doc", "in": "path", "required": True,
                        "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}],
        "responses": {
            "200": {"description": "The document.", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Document"}},
                "text/html": {"schema": {"type": "string"}}}},
            "404": _error("No such document in this sweep, or one the caller may not read (the same answer)."),
        },
    }


def _date_schemas() -> dict:
    """``since`` and ``before``: only documents modified within them, filtered before ranking."""
    return {
        "since": {"type": "string", "maxLength": MAX_DATE_CHARS,
                  "description": f"Only documents modified then or later: {dates.FORMS}."},
        "before": {"type": "string", "maxLength": MAX_DATE_CHARS,
                   "description": f"Only documents modified before then: {dates.FORMS}."},
    }


def _search_get(settings) -> dict:
    return {
        "summary": "Search by meaning (query in the URL).",
        "description": "Prefer POST for sensitive queries: URLs end up in browser history and proxies' logs.",
        "parameters": [
            {"name": "q", "in": "query", "required": True,
             "schema": {"type": "string", "minLength": 1, "maxLength": settings.max_query_chars}},
            {"name": "k", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": settings.max_k, "default": settings.default_k}},
            {"name": "mode", "in": "query", "required": False, "schema": {"type": "string", "enum": list(SEARCH_MODES)},
             "description": "Defaults to the manifest's [search] mode, else vector; 400 when the index cannot search that way."},
            *({"name": name, "in": "query", "required": False, "schema": schema} for name, schema in _date_schemas().items()),
        ],
        "responses": _search_responses(settings, body=False),
    }


def _search_post(settings) -> dict:
    return {
        "summary": "Search by meaning (query in a JSON body).",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SearchRequest"}}},
        },
        "responses": _search_responses(settings, body=True),
    }


# How a hit ranked comes first in its schema; then what it is and where it comes from, in the record's order.
RANKING_FIELDS = ("score", "relevance", "vector_relevance", "keyword_relevance", "mode", "fallback",
                  "vector_score", "vector_rank", "keyword_score", "keyword_rank")


def hit_schema() -> dict:
    """The ``Hit`` record's JSON schema (``records.json_schema``, as the MCP server's): a field added to the
    record is described here with its type and the description its metadata gives."""
    schema = records.json_schema(records.Hit)
    fields = schema["properties"]
    order = [name for name in RANKING_FIELDS if name in fields] + [name for name in fields if name not in RANKING_FIELDS]
    return {**schema, "properties": {name: fields[name] for name in order}}


def _freshness_schemas() -> dict:
    """What a search answer and ``/healthz`` say of the caller's windows still waiting for vectors."""
    return {
        "windows_pending": {"type": ["integer", "null"],
                            "description": "How many of this caller's windows still wait for vectors: keyword "
                                           "search finds them, vector and hybrid search do not yet."},
        "stale_since": {"type": ["string", "null"], "description": "Set while the last embed has not finished: "
                                                                  "when it first failed (ISO 8601 UTC)."},
        "stale_error": {"type": ["string", "null"], "description": "That failure, in one line."},
    }


def _schemas(settings) -> dict:
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
        "Document": DOCUMENT_SCHEMA,
        "SearchRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": settings.max_query_chars},
                "k": {"type": "integer", "minimum": 1, "maximum": settings.max_k, "default": settings.default_k},
                "mode": {"type": "string", "enum": list(SEARCH_MODES)},
                **_date_schemas(),
            },
        },
        "Hit": hit_schema(),
        "SearchAnswer": {
            "type": "object",
            "required": ["query", "model", "mode", "k", "hits"],
            "properties": {
                "query": {"type": "string"},
                "model": {"type": "string"},
                "mode": {"type": "string", "enum": list(SEARCH_MODES)},
                "k": {"type": "integer"},
                "hits": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                "fallback": {"type": "string", "enum": ["keyword"],
                             "description": "Present when the model server was down and keyword search answered."},
                "notice": {"type": "string", "description": "One line saying why, with the fallback."},
                **_freshness_schemas(),
                "vector_search": {"type": "object", "description": "In vector and hybrid mode: how the vector side "
                                                                   "answered, as /healthz's `vector_search` says."},
            },
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "description": "Without a token, on a server with tokens, only `status`; the rest needs the token.",
            "properties": {
                "status": {"type": "string", "enum": ["ok", "degraded"]},
                "model": {"type": "string"},
                "dim": {"type": "integer"},
                "chunks": {"type": ["integer", "null"],
                           "description": "Windows this caller may search (its token's groups); null for a token "
                                          "without a reader role on a --remote index."},
                "caller": {"type": ["string", "null"], "description": "Who the server takes the caller for: a token's "
                                                                      "name, or local:USER."},
                "loaded_at": {"type": ["string", "null"],
                              "description": "UTC time the index was loaded (ISO 8601); null unless the caller reads "
                                             "every group (it moves when hidden documents change)."},
                "index_error": {"type": ["string", "null"], "description": "Why the last reload failed, if it did "
                                                                           "(for a caller who reads every group)."},
                "model_server": {"type": "string", "enum": ["ok", "unreachable"]},
                "fallback": {"type": ["string", "null"], "enum": ["keyword", None],
                             "description": "\"keyword\" while the model server is unreachable: /search answers by keyword."},
                "search_mode": {"type": "string", "enum": list(SEARCH_MODES)},
                "vector_search": {
                    "type": ["object", "null"],
                    "description": "How vector search answers: `method` `ann` (the graph, at `beam`, whose recall@10 "
                                   "was measured as `recall` when it was built) or `exact` (every vector scanned: "
                                   "recall 1.0), `target` ([search] ann_recall) and, when the graph's measured "
                                   "recall is below it, the `notice` saying the scan answers instead. Null with "
                                   "--remote.",
                    "properties": {"method": {"type": "string", "enum": ["ann", "exact"]},
                                   "recall": {"type": ["number", "null"]}, "beam": {"type": ["integer", "null"]},
                                   "target": {"type": "number"}, "notice": {"type": ["string", "null"]}},
                },
                "auth": {"type": "string", "enum": ["none", "bearer"]},
                "limits": {"type": "object"},
                "version": {"type": "string"},
                **_freshness_schemas(),
            },
        },
    }
