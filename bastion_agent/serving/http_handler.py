"""What ``serve`` answers, as an ASGI app: one request checked (Host, site, token), routed and answered.

Every request is checked in the same order before it reaches a route: a
loopback server refuses a ``Host`` that is not a loopback name (421), so a
web page cannot reach the index by rebinding its own domain name to
127.0.0.1; a request a page on another site made the browser send is
refused (403); and every route but ``/`` (a static page holding no data)
and ``/healthz`` needs ``Authorization: Bearer TOKEN`` when the server has
tokens (401). Every answer is JSON except the page.

The search runs on a worker thread (anyio's, as Starlette's
``run_in_threadpool``): the index and the model link block, the event loop
must not. A search past the time limit is abandoned to its thread (Python
cannot stop one), which ends within the model server's timeout; the threads
are capped at ``WORKER_THREADS``, twice the slots, so abandoned searches
cannot leave answered requests waiting for a thread. Limits, time
limits, slots and the access log are the guard's (``http_guard``), the wire
is ``http_protocol``'s.
"""

from __future__ import annotations

import json
from typing import Awaitable, Callable

import anyio
from starlette.datastructures import Headers

from bastion_agent.core.loopback import is_loopback_host_header
from bastion_agent.serving import doc_page, tokens
from bastion_agent.serving.http_guard import MAX_CONNECTIONS, Exchange, send_answer
from bastion_agent.serving.query_params import Query, query_from_body, query_from_string
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.serve_openapi import DOC_ROUTE, PUBLIC_ROUTES, ROUTES, route_of
from bastion_agent.serving.serve_settings import TOKEN_ENV


class Handler:
    """The ASGI app of ``serve``'s routes; ``server`` holds the service, the settings, the tokens, the page."""

    def __init__(self, server):
        self.server = server
        self._threads: anyio.CapacityLimiter | None = None  # made in the event loop, at the first request

    async def in_thread(self, function, *args):
        """``function(*args)`` on a worker thread; abandoned (left to finish) when the time limit cancels it."""
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(WORKER_THREADS)
        return await anyio.to_thread.run_sync(function, *args, abandon_on_cancel=True, limiter=self._threads)

    async def __call__(self, exchange: Exchange) -> None:
        path, method = exchange.scope["path"], exchange.scope["method"]
        if path.startswith("//"):  # one slash, as http.server reads it: BASE_URL + "/search" still finds the route
            path = "/" + path.lstrip("/")
        route = route_of(path)
        exchange.route = route if route in ROUTES else None
        try:
            caller = self.check_request(exchange.headers, route, method)
            await ANSWERS[(route, method)](self, exchange, caller)
        except RequestError as exc:
            await send_answer(exchange, exc.status, json_bytes({"error": exc.message}), JSON, exc.headers)
        except ConnectionError:
            pass  # the client went away: nobody to answer

    def check_request(self, headers: Headers, path: str, method: str) -> tokens.Caller | None:
        """Host, site and caller before the route, so a client without a token learns nothing of what is served."""
        self.check_host(headers)
        if path != "/":
            check_site(headers)
        if path not in PUBLIC_ROUTES:
            caller = self.check_token(headers)
        else:
            caller = self.optional_caller(headers)
        if path not in ROUTES:
            raise RequestError(404, f"no such path; this server answers {', '.join(ROUTES)}")
        if method not in ROUTES[path]:
            allowed = ", ".join(ROUTES[path])
            raise RequestError(405, f"{path} answers {allowed} only", {"Allow": allowed})
        return caller

    # -- the answers

    async def answer_page(self, exchange: Exchange, caller) -> None:
        await send_answer(exchange, 200, self.server.page, "text/html; charset=utf-8",
                          {"Content-Security-Policy": self.server.page_csp})

    async def answer_health(self, exchange: Exchange, caller) -> None:
        health = await self.in_thread(self.server.service.health, caller)
        await send_answer(exchange, 200, json_bytes(health), JSON)

    async def answer_openapi(self, exchange: Exchange, caller) -> None:
        await send_answer(exchange, 200, self.server.openapi, "application/json")

    async def answer_search_in_query(self, exchange: Exchange, caller) -> None:
        query_string = exchange.scope["query_string"].decode("latin-1")
        await self.answer_search(exchange, caller, query_from_string(query_string, self.server.settings,
                                                                     self.server.service.default_mode))

    async def answer_search_in_body(self, exchange: Exchange, caller) -> None:
        body = await self.read_body(exchange)
        await self.answer_search(exchange, caller, query_from_body(body, self.server.settings,
                                                                   self.server.service.default_mode))

    async def answer_search(self, exchange: Exchange, caller, query: Query) -> None:
        envelope = await self.in_thread(self.search_as, caller, query)
        await send_answer(exchange, 200, json_bytes(envelope), JSON)

    def search_as(self, caller, query: Query) -> dict:
        return self.server.service.search(query.text, query.k, query.mode, caller, dates=query.dates)

    async def answer_document(self, exchange: Exchange, caller) -> None:
        """``/doc/ID``: the whole sanitized document as the caller may read it; JSON when asked for, else a page."""
        doc = ("/" + exchange.scope["path"].lstrip("/")).removeprefix("/doc/")
        view = await self.in_thread(self.server.service.document, doc, caller)
        if "application/json" in (exchange.headers.get("accept") or ""):
            await send_answer(exchange, 200, json_bytes(view.as_dict()), JSON)
        else:
            await send_answer(exchange, 200, doc_page.render(view), "text/html; charset=utf-8",
                              {"Content-Security-Policy": doc_page.content_security_policy()})

    # -- the checks

    def check_host(self, headers: Headers) -> None:
        host = headers.get("host")
        if self.server.settings.loopback and host is not None and not is_loopback_host_header(host):
            raise RequestError(421, "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])")

    def check_token(self, headers: Headers) -> tokens.Caller:
        """Who is asking, from the ``Authorization`` header only; 401 for anyone else.

        Never from the query string or a cookie: a token in a URL ends up in
        histories, proxies' logs and ``Referer`` headers, and a cookie is sent
        by the browser on requests other sites make.
        """
        caller = self.optional_caller(headers)
        if caller is None:
            raise RequestError(401, f"send 'Authorization: Bearer TOKEN' with a token of the server's {TOKEN_ENV} "
                                    f"or {tokens.TOKENS_ENV}", {"WWW-Authenticate": 'Bearer realm="bastion"'})
        return caller

    def optional_caller(self, headers: Headers) -> tokens.Caller | None:
        """The caller a valid token names; the local user when the server needs none; else None."""
        book = self.server.tokens
        if not book.enabled:
            return self.server.service.local_caller
        return book.caller(headers.get("authorization"))

    async def read_body(self, exchange: Exchange) -> bytes:
        """The whole body, by ``Content-Length`` (the wire refuses ``Transfer-Encoding``); 413 past the cap unread."""
        length_text = exchange.headers.get("content-length")
        if length_text is None or not length_text.strip().isdigit() or not length_text.strip().isascii():
            raise RequestError(400, "send the JSON body with a Content-Length header")
        length = int(length_text)
        if length > self.server.settings.max_body_bytes:
            raise RequestError(413, f"the body is larger than {self.server.settings.max_body_bytes} bytes")
        body = bytearray()
        while True:
            message = await exchange.receive()
            if message["type"] == "http.disconnect":
                raise ConnectionError("the client went away")
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if len(body) != length:
            raise RequestError(400, "the body ended before Content-Length bytes")
        exchange.body_read = True
        return bytes(body)


def check_site(headers: Headers) -> None:
    """Refuse (403) what a page on another site makes the browser send; only ``/`` (static) may be linked.

    A page on any site can POST text/plain to /search (no CORS preflight)
    or GET it as an image: it cannot read the answer, but the search runs
    and its duration says how many windows hold a word (a cross-site
    search leak). Browsers say where a request comes from:
    ``Sec-Fetch-Site`` (cross-site, or same-site from another port); a
    browser too old to send it sends ``Origin``, which must then be this
    server as its ``Host`` names it (not compared when ``Sec-Fetch-Site``
    is there: a reverse proxy may rewrite ``Host``). Clients that are not
    browsers send neither.
    """
    site = (headers.get("sec-fetch-site") or "").strip().lower()
    origin = headers.get("origin")
    host = (headers.get("host") or "").strip().lower()
    if site:
        foreign = site in ("cross-site", "same-site")
    else:
        foreign = origin is not None and origin.strip().lower() not in (f"http://{host}", f"https://{host}")
    if foreign:
        raise RequestError(403, "requests from a web page on another site are refused; open this server's own page")


JSON = "application/json; charset=utf-8"
WORKER_THREADS = 2 * MAX_CONNECTIONS  # every slot's search, and as many abandoned ones still running


def json_bytes(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


# What answers each route and method; ROUTES (which /openapi.json documents) names the same pairs.
ANSWERS: dict[tuple[str, str], Callable[[Handler, Exchange, tokens.Caller | None], Awaitable[None]]] = {
    ("/", "GET"): Handler.answer_page,
    ("/healthz", "GET"): Handler.answer_health,
    ("/openapi.json", "GET"): Handler.answer_openapi,
    ("/search", "GET"): Handler.answer_search_in_query,
    ("/search", "POST"): Handler.answer_search_in_body,
    (DOC_ROUTE, "GET"): Handler.answer_document,
}
assert set(ANSWERS) == {(path, method) for path, methods in ROUTES.items() for method in methods}
