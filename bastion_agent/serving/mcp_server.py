"""``mcp MANIFEST``: the search of ``search`` as tools an AI assistant can call.

The Model Context Protocol is how assistants (Claude Desktop and Claude Code,
Cursor, VS Code...) call local tools. This command speaks it over stdio with
the official SDK (the ``[mcp]`` extra) and offers two read-only tools:

- ``search(query, k, mode)``: exactly what ``search --json`` answers, from
  one warm index that is reloaded when ``vectors.db`` changes (serve's
  ``search_service.SearchService``, so the rules and the model-server
  handling are the same; the arguments are checked by serve's
  ``query_params``);
- ``fetch(chunk_id, neighbours)``: a window and its neighbours in the same
  document, so an assistant can read around a hit.

Everything a tool returns comes from ``vectors.db``'s ``chunks`` and
``documents`` tables: this sweep's sanitized windows and sanitized paths, the
same rows search reads. The extract store is never opened. Results are
bounded (``k``, characters per window, paths per hit) so one call cannot
flood an assistant's context, and a bad argument is a tool error the
assistant can read and correct, never a crash of the server.

The SDK is imported only when the server starts, so ``--help`` and the rest
of the command line work without the extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import threading
import traceback
from typing import Callable

from bastion_agent import __version__
from bastion_agent.config.manifest import SEARCH_MODES
from bastion_agent.core import access, dates, records
from bastion_agent.core.errors import BastionError, ConfigError
from bastion_agent.embedding import vectorstore
from bastion_agent.searching import hit_rows, searcher
from bastion_agent.serving import tokens
from bastion_agent.serving.query_params import MAX_DATE_CHARS, Query, query_from_values
from bastion_agent.serving.serve_settings import address_family
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.search_service import ModelLink, SearchService
from bastion_agent.serving.serve_settings import (
    DEFAULT_HOST,
    TOKEN_ENV,
    ServeSettings,
    limit_math_threads,
    port_number,
    settings_from,
)

INSTALL_HINT = "pip install 'bastion-agent[mcp]'"
CALLER_SCOPE_KEY = "bastion.caller"  # where BearerGate leaves the caller of an HTTP request for the tools
SERVER_NAME = "bastion-agent"

MAX_K = 20  # hits per search: an assistant's context is the scarce resource
MAX_QUERY_CHARS = 2000  # as serve
MAX_TEXT_CHARS = 4000  # per window; a 256-token window is about 1,500 characters
MAX_PATHS = 10  # source paths listed per hit (a document can have many copies)
MAX_PATH_CHARS = 512
DEFAULT_NEIGHBOURS = 1
MAX_NEIGHBOURS = 2
MAX_PASSAGE_CHARS = (2 * MAX_NEIGHBOURS + 1) * MAX_TEXT_CHARS
CHUNK_ID_RE = re.compile(r"[0-9a-f]{64}")
# serve's envelope, less the query: the assistant sent it, and a result never echoes what a user typed.
ENVELOPE_KEYS = ("model", "mode", "k", "hits", "fallback", "notice", "windows_pending", "stale_since")

INSTRUCTIONS = (
    "Search a folder of documents that bastion agent has swept and sanitized: secrets and personal data "
    "are already replaced by placeholders such as [REDACTED:...]. Use search to find passages by meaning "
    "or by keyword, then fetch with a hit's chunk_id to read the text around it."
)


class ToolArgumentError(ConfigError):
    """A tool call's arguments are refused: the message names the argument and what is allowed."""


# --- the tools, free of the SDK ----------------------------------------------


class BastionTools:
    """The two tools over one warm index: what the MCP layer calls, with plain dicts in and out.

    The index is opened on the first call that needs it (or by ``warm``), so
    a server started before the folder's first sweep answers "run sweep
    first" until a sweep has written ``vectors.db``, then answers from it
    without a restart. Each call checks whether ``vectors.db`` moved on (two
    ``stat`` calls) and reloads by serve's rules.
    """

    def __init__(self, manifest, layout, endpoint, log: Callable[[str], None] = lambda line: None):
        self.manifest = manifest
        self.layout = layout
        self.log = log
        self.settings = ServeSettings(max_k=MAX_K, max_query_chars=MAX_QUERY_CHARS)
        # As serve: a query waits at most request_time_limit for the model, within an assistant's tool timeout.
        endpoint = dataclasses.replace(endpoint, timeout=min(endpoint.timeout, self.settings.request_time_limit))
        self.model = ModelLink(manifest, endpoint, self.settings.reprobe_seconds,
                                     self.settings.model_concurrency)
        self.default_mode = searcher.resolve_mode(manifest, None)
        self.local_caller = tokens.local_caller(manifest)  # stdio: the user who started the server
        self._service: SearchService | None = None
        self._lock = threading.Lock()
        self.handlers: dict[str, Callable[[dict, tokens.Caller], dict]] = {"search": self.search, "fetch": self.fetch}

    def warm(self) -> None:
        """Open the index and probe the model server now, so the first call answers at once; failures wait for it."""
        try:
            self.service()
        except BastionError as exc:
            self.log(f"bastion_agent mcp: {exc}")
        if not self.model.probe():
            self.log(f"bastion_agent mcp: the model server is unavailable ({self.model.error}); "
                     "search says so until it answers")

    def service(self) -> SearchService:
        with self._lock:
            if self._service is None:
                if not self.layout.vectors_db.exists():
                    raise BastionError("this folder has not been swept yet (no vectors.db in its output folder): "
                                       "run `python3 -m bastion_agent sweep MANIFEST` first")
                self._service = SearchService(self.manifest, self.layout, self.settings, self.model, log=self.log)
            else:
                self._service.check_reload()
            return self._service

    def search(self, arguments: dict, caller: tokens.Caller | None = None) -> dict:
        """``search --json``'s hits among the windows ``caller`` may see, in serve's envelope, each hit bounded."""
        checked = self.search_arguments(arguments)
        service = self.service()
        try:
            envelope = service.search(checked.text, checked.k, checked.mode, caller or self.local_caller, via="mcp",
                                      dates=checked.dates)
        except RequestError as exc:
            raise BastionError(exc.message) from None
        result = {key: envelope[key] for key in ENVELOPE_KEYS if key in envelope}
        result["hits"] = [bounded_hit(hit) for hit in envelope["hits"]]
        return result

    def search_arguments(self, arguments: dict) -> Query:
        refuse_unknown(arguments, ("query", "k", "mode", "since", "before"))
        query = arguments.get("query")
        if query is not None and not isinstance(query, str):  # an assistant is told what the argument is for
            raise ToolArgumentError("query must be a string: say what to look for")
        try:
            return query_from_values(query, arguments.get("k"), arguments.get("mode"), self.settings,
                                     self.default_mode, since=arguments.get("since"), before=arguments.get("before"))
        except RequestError as exc:
            raise ToolArgumentError(exc.message) from None

    def fetch(self, arguments: dict, caller: tokens.Caller | None = None) -> dict:
        """The window ``chunk_id`` names and up to ``neighbours`` windows each side, as one passage.

        A window of a document ``caller`` may not see is answered exactly as
        one that does not exist, after exactly the same work: a filtered
        caller's id is looked up among its own windows only (the temp table
        of ``SearchIndex.visible_ids``), so a hidden id misses the same index an
        absent one does, and neither the answer nor its time tells what
        other groups hold.
        """
        chunk, neighbours = self.fetch_arguments(arguments)
        groups = (caller or self.local_caller).groups
        index = self.service().index
        with index.lock:  # the index's one SQLite connection is shared by the search threads
            if groups is None:
                found = index.db.execute(FETCH_ALL_GROUPS, (chunk,)).fetchone()
            else:
                found = index.db.execute(FETCH_VISIBLE.format(table=index.visible_ids(groups)), (chunk,)).fetchone()
            if found is None:
                raise BastionError(f"no window {chunk} in this sweep: ids change when a document changes; "
                                   "search again for a current chunk_id")
            doc, idx, _ = found
            rows = index.db.execute(
                'SELECT chunk_id, idx, start, "end", text FROM chunks WHERE doc = ? AND idx BETWEEN ? AND ?'
                " ORDER BY idx", (doc, idx - neighbours, idx + neighbours)).fetchall()
            total = index.db.execute("SELECT count(*) FROM chunks WHERE doc = ?", (doc,)).fetchone()[0]
            paths = vectorstore.document_paths(index.db, [doc], groups)[doc]
            page_map = vectorstore.document_pages(index.db, [doc]).get(doc)
        text, truncated = capped(passage(rows), MAX_PASSAGE_CHARS)
        return {
            "chunk_id": chunk,
            "doc": doc,
            "idx": idx,
            "document_windows": total,
            "paths": bounded_paths(paths),
            "paths_total": len(paths),
            "start": rows[0][2],
            "end": max(row[3] for row in rows),
            "text": text,
            "truncated": truncated,
            "windows": [{"chunk_id": row[0], "idx": row[1], "start": row[2], "end": row[3]} for row in rows],
            **hit_rows.page_of(page_map, rows[0][2], rows[0][4]),
        }

    def fetch_arguments(self, arguments: dict) -> tuple[str, int]:
        refuse_unknown(arguments, ("chunk_id", "neighbours"))
        chunk, neighbours = arguments.get("chunk_id"), arguments.get("neighbours", DEFAULT_NEIGHBOURS)
        if not isinstance(chunk, str) or not CHUNK_ID_RE.fullmatch(chunk.strip().lower()):
            raise ToolArgumentError("chunk_id must be the 64 hexadecimal characters of a hit's chunk_id")
        if isinstance(neighbours, bool) or not isinstance(neighbours, int) or not 0 <= neighbours <= MAX_NEIGHBOURS:
            raise ToolArgumentError(f"neighbours must be a whole number from 0 to {MAX_NEIGHBOURS}")
        return chunk.strip().lower(), neighbours



FETCH_ALL_GROUPS = "SELECT doc, idx, NULL FROM chunks WHERE chunk_id = ?"  # every group: no label to read
# a filtered caller: its own windows' ids only (``SearchIndex.visible_ids``), then that window's row
FETCH_VISIBLE = ("SELECT c.doc, c.idx, NULL FROM temp.{table} AS v CROSS JOIN main.chunks AS c ON c.rowid = v.row"
                 " WHERE v.chunk_id = ?")


def visible_to(stored_groups: str | None, groups: frozenset[str] | None) -> bool:
    """Whether a document labelled ``stored_groups`` (vectors.db's JSON list) is visible to ``groups``."""
    if groups is None:
        return True
    try:
        labels = json.loads(stored_groups) if stored_groups else []
    except ValueError:
        return False
    return isinstance(labels, list) and access.can_see(groups, (label for label in labels if isinstance(label, str)))


def refuse_unknown(arguments: dict, allowed: tuple[str, ...]) -> None:
    unknown = [key for key in arguments if key not in allowed]
    if unknown:
        raise ToolArgumentError(f"unknown argument {str(unknown[0])[:40]!r}; allowed: {', '.join(allowed)}")


def capped(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (ending in "…" when cut), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def bounded_paths(paths: list[str]) -> list[str]:
    return [capped(path, MAX_PATH_CHARS)[0] for path in paths[:MAX_PATHS]]


def bounded_hit(hit: dict) -> dict:
    """A hit as ``search --json`` prints it, its text and paths bounded (and saying so)."""
    bounded = dict(hit)
    bounded["text"], bounded["truncated"] = capped(hit["text"], MAX_TEXT_CHARS)
    bounded["paths"] = bounded_paths(hit["paths"])
    bounded["paths_total"] = len(hit["paths"])
    return bounded


def passage(rows: list[tuple]) -> str:
    """Consecutive windows ``(chunk_id, idx, start, end, text)`` of one document as one text, overlaps once.

    ``start``/``end`` are offsets in the sanitized document, so an overlap is
    cut where the previous window ended; between windows that do not touch
    there is only whitespace (a window is a run of whole tokens), kept as one space.
    """
    text, reached = "", None
    for _, _, start, end, window in rows:
        if reached is None:
            text = window
        elif start >= reached:
            text += ("" if start == reached else " ") + window
        else:
            text += window[reached - start :]
        reached = end if reached is None else max(reached, end)
    return text


# --- schemas -------------------------------------------------------------------


def search_input_schema(default_mode: str) -> dict:
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                      "description": "what to look for, in your own words (or exact words for keyword mode)"},
            "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": searcher.DEFAULT_K,
                  "description": "how many hits, best first"},
            "mode": {"type": "string", "enum": list(SEARCH_MODES), "default": default_mode,
                     "description": "vector (by meaning), keyword (exact words; works without the model server)"
                                    " or hybrid (both, fused)"},
            "since": {"type": "string", "maxLength": MAX_DATE_CHARS,
                      "description": f"only documents modified then or later: {dates.FORMS}"},
            "before": {"type": "string", "maxLength": MAX_DATE_CHARS,
                       "description": f"only documents modified before then: {dates.FORMS}"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


FETCH_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "chunk_id": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$",
                     "description": "a hit's chunk_id (from search, or from a previous fetch's windows)"},
        "neighbours": {"type": "integer", "minimum": 0, "maximum": MAX_NEIGHBOURS, "default": DEFAULT_NEIGHBOURS,
                       "description": "how many windows to add on each side of it, in the same document"},
    },
    "required": ["chunk_id"],
    "additionalProperties": False,
}

PATHS_SCHEMA = {"type": "array", "items": {"type": "string"}, "maxItems": MAX_PATHS,
                "description": f"the document's source paths relative to the source root, sanitized (at most {MAX_PATHS})"}


OCR_SCHEMA = {"type": "boolean", "description": "true when the text starts on a scanned page that OCR read:"
                                                " it may hold recognition errors"}
PAGE_SCHEMA = {"type": ["integer", "null"], "minimum": 1,
               "description": "the page (from 1) the text starts on, in a PDF or an image; null elsewhere"}


def hit_schema() -> dict:
    """A hit's schema, built from the ``Hit`` record's fields (``records.json_schema``, as the HTTP API's), so a
    field added there is described here too; the limits this server applies are added to the fields they cut."""
    properties = records.json_schema(records.Hit, described=False)["properties"]
    properties["paths"] = PATHS_SCHEMA
    properties["text"] = {"type": "string", "description": f"the sanitized window (at most {MAX_TEXT_CHARS} characters)"}
    properties["truncated"] = {"type": "boolean", "description": "whether text was cut to the limit"}
    properties["paths_total"] = {"type": "integer", "description": "how many source paths the document has"}
    properties["ocr"], properties["page"] = OCR_SCHEMA, PAGE_SCHEMA
    return {"type": "object", "properties": properties, "required": sorted(properties)}


def search_output_schema() -> dict:
    return {
        "type": "object",
        "properties": {
            "model": {"type": "string"},
            "mode": {"type": "string", "enum": list(SEARCH_MODES)},
            "k": {"type": "integer"},
            "hits": {"type": "array", "items": hit_schema(), "maxItems": MAX_K},
            "fallback": {"type": "string", "description": "set when another mode answered (the model server is down)"},
            "notice": {"type": "string", "description": "one line for the reader when fallback is set"},
            "windows_pending": {"type": ["integer", "null"],
                                "description": "how many of your windows still wait for vectors (keyword search finds them)"},
            "stale_since": {"type": ["string", "null"], "description": "set while embedding has failed since then: vector search is stale"},
        },
        "required": ["model", "mode", "k", "hits"],
    }


FETCH_OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "chunk_id": {"type": "string", "description": "the window asked for"},
        "doc": {"type": "string", "description": "its document's id"},
        "idx": {"type": "integer", "description": "its position in the document (0 is the first window)"},
        "document_windows": {"type": "integer", "description": "how many windows the document has"},
        "paths": PATHS_SCHEMA,
        "paths_total": {"type": "integer"},
        "start": {"type": "integer", "description": "where the passage starts in the sanitized document (characters)"},
        "end": {"type": "integer"},
        "text": {"type": "string", "description": "the windows as one sanitized passage, overlaps once"},
        "truncated": {"type": "boolean"},
        "ocr": OCR_SCHEMA,
        "page": PAGE_SCHEMA,
        "windows": {
            "type": "array",
            "items": {"type": "object", "properties": {"chunk_id": {"type": "string"}, "idx": {"type": "integer"},
                                                       "start": {"type": "integer"}, "end": {"type": "integer"}},
                      "required": ["chunk_id", "idx", "start", "end"]},
            "description": "the windows in the passage, in order: fetch the first or last to read further",
        },
    },
    "required": ["chunk_id", "doc", "idx", "document_windows", "paths", "paths_total", "start", "end", "text",
                 "truncated", "windows", "ocr", "page"],
}

SEARCH_DESCRIPTION = (
    "Search the swept documents (sanitized: secrets and personal data are replaced by placeholders). "
    "Returns the best windows of text first, each with its score, relevance, document id, position (idx), "
    "chunk_id and source paths, and for a PDF or image its page (ocr: true when the page was a scan read by OCR,"
    " whose text may hold recognition errors). Pass a hit's chunk_id to fetch to read around it."
)
FETCH_DESCRIPTION = (
    "Read around a search hit: the window a chunk_id names and its neighbours in the same document, "
    "as one sanitized passage, with the neighbours' chunk_ids to read further."
)


# --- the MCP layer ---------------------------------------------------------------


def import_sdk():
    """The SDK's modules, or one line saying how to install them."""
    try:
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
        from mcp.shared.exceptions import MCPError
    except ImportError:
        raise ConfigError(f"the MCP server needs the official MCP SDK: {INSTALL_HINT}") from None
    return anyio, types, Server, stdio_server, MCPError


def build_server(tools: BastionTools):
    """The SDK's low-level server with our two tools: explicit schemas, one-line tool errors."""
    anyio, types, Server, _, MCPError = import_sdk()
    read_only = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                      open_world_hint=False)
    listed = [
        types.Tool(name="search", title="Search the bastion", description=SEARCH_DESCRIPTION,
                   input_schema=search_input_schema(tools.default_mode), output_schema=search_output_schema(),
                   annotations=read_only),
        types.Tool(name="fetch", title="Read around a hit", description=FETCH_DESCRIPTION,
                   input_schema=FETCH_INPUT_SCHEMA, output_schema=FETCH_OUTPUT_SCHEMA, annotations=read_only),
    ]

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=listed)

    def tool_error(message: str):
        return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)

    async def call_tool(ctx, params):
        handler = tools.handlers.get(params.name)
        if handler is None:
            raise MCPError(code=types.INVALID_PARAMS,
                           message=f"unknown tool {params.name[:40]!r}; this server has: {', '.join(tools.handlers)}")
        arguments = dict(params.arguments or {})
        caller = caller_of(ctx, tools)
        if caller is None:  # an HTTP request BearerGate did not let through cannot get here; refuse all the same
            return tool_error("not authenticated: send 'Authorization: Bearer TOKEN'")
        try:
            # SQLite and the model server block: a worker thread keeps the session answering meanwhile.
            value = await anyio.to_thread.run_sync(handler, arguments, caller)
        except BastionError as exc:
            return tool_error(str(exc))
        except Exception:  # a bug: say so to the assistant, keep the traceback for the operator, keep serving
            traceback.print_exc(file=sys.stderr)
            return tool_error(f"{params.name} failed with an internal error (the server's stderr has the details)")
        text = json.dumps(value, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=value)

    return Server(SERVER_NAME, version=__version__, title="bastion agent", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def caller_of(ctx, tools: BastionTools) -> tokens.Caller | None:
    """Who calls a tool: over HTTP, whom BearerGate authenticated for this very request; over stdio, the local user."""
    request = getattr(ctx, "request", None)
    if request is None:
        return tools.local_caller
    return request.scope.get(CALLER_SCOPE_KEY)


# --- the command ------------------------------------------------------------------


DEFAULT_HTTP_PORT = 8766  # serve's 8765 + 1, so both can run side by side
HTTP_PATH = "/mcp"


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    from bastion_agent.config.arguments import add_manifest_arguments

    add_manifest_arguments(parser)
    parser.add_argument("--http", action="store_true",
                        help=f"serve MCP's Streamable HTTP transport at http://HOST:PORT{HTTP_PATH} instead of stdio")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"with --http: address to listen on (default {DEFAULT_HOST}; any other needs "
                             f"{TOKEN_ENV} or {tokens.TOKENS_ENV})")
    parser.add_argument("--port", type=port_number, default=DEFAULT_HTTP_PORT,
                        help=f"with --http: port to listen on (default {DEFAULT_HTTP_PORT}; 0 picks a free one)")
    parser.epilog = ("Speaks the Model Context Protocol on stdin/stdout (or, with --http, over HTTP on loopback): "
                     f"start it from an assistant's configuration (docs/mcp.md). Needs the [mcp] extra: {INSTALL_HINT}")


def run_mcp(args: argparse.Namespace) -> int:
    from bastion_agent.config.arguments import load_manifest_and_layout
    from bastion_agent.embedding.endpoint import EndpointConfig

    anyio, _, _, stdio_server, _ = import_sdk()
    limit_math_threads()
    if not args.http and (args.host != DEFAULT_HOST or args.port != DEFAULT_HTTP_PORT):
        raise ConfigError("--host and --port are for --http; without it the server speaks on stdin/stdout")
    settings = settings_from(args.host, args.port) if args.http else None  # exposure rules before anything else
    manifest, layout = load_manifest_and_layout(args)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 -- stdout is the protocol's
    tools = BastionTools(manifest, layout, EndpointConfig.from_env(), log=log)
    tools.warm()
    server = build_server(tools)
    if settings is not None:
        return run_http(server, tools, settings, log)

    async def serve_stdio() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve_stdio)
    return 0


# --- Streamable HTTP, under serve's exposure rules ----------------------------------


class BearerGate:
    """ASGI: who is asking, from ``Authorization: Bearer TOKEN`` only; 401 for a request without a valid token.

    Every HTTP request is checked against the token book (so a revoked token
    is refused at its next request, even inside a session), and its caller
    is left in the request's scope for the tools. Without any token
    configured (loopback only) the caller is the local user.
    """

    def __init__(self, app, book: tokens.TokenBook, local_caller: tokens.Caller):
        self.app = app
        self.book = book
        self.local_caller = local_caller

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            caller = self.caller(scope)
            if caller is None:
                body = json.dumps({"error": f"send 'Authorization: Bearer TOKEN' with a token of the server's "
                                            f"{TOKEN_ENV} or {tokens.TOKENS_ENV}"})
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="bastion"')]})
                await send({"type": "http.response.body", "body": body.encode("utf-8")})
                return
            scope[CALLER_SCOPE_KEY] = caller
        await self.app(scope, receive, send)

    def caller(self, scope) -> tokens.Caller | None:
        if not self.book.enabled:
            return self.local_caller
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        return self.book.caller(given.decode("latin-1"))


def transport_security(settings: ServeSettings):
    """On loopback, only loopback ``Host`` and ``Origin`` values (no DNS rebinding); elsewhere the token guards."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not settings.loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def run_http(server, tools: BastionTools, settings: ServeSettings, log: Callable[[str], None]) -> int:
    """Serve the tools at ``http://HOST:PORT/mcp`` until interrupted."""
    import socket

    import uvicorn

    book = tokens.TokenBook(settings.tokens_file, settings.token, log=log)  # a bad tokens file stops here
    app = BearerGate(server.streamable_http_app(streamable_http_path=HTTP_PATH, host=settings.host,
                                                transport_security=transport_security(settings)),
                     book, tools.local_caller)
    try:
        listener = socket.socket(address_family(settings.host), socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((settings.host.strip("[]"), settings.port))
        listener.listen(128)  # before the address is announced: a client that reads it can connect at once
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log(f"bastion_agent mcp: http://{shown}:{port}{HTTP_PATH} (Streamable HTTP; "
        f"{'bearer token required' if settings.guarded else 'loopback only'}; Ctrl-C stops)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])
    return 0
