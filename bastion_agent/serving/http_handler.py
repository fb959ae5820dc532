"""The HTTP request handler of ``serve``: one request of a connection, checked, answered, logged.

Every request is checked in the same order before it reaches a route: a
loopback server refuses a ``Host`` that is not a loopback name (421), so a
web page cannot reach the index by rebinding its own domain name to
127.0.0.1; a request a page on another site made the browser send is
refused (403); and every route but ``/`` (a static page holding no data)
and ``/healthz`` needs ``Authorization: Bearer TOKEN`` when the server has
tokens (401). Every answer is JSON except the page.

How an answer goes out (once, kept alive or closed, logged) is
``http_connection``'s, the base class.
"""

from __future__ import annotations

import re
from typing import Callable

from bastion_agent.core.loopback import is_loopback_host_header
from bastion_agent.serving import tokens
from bastion_agent.serving.http_connection import ConnectionHandler
from bastion_agent.serving.query_params import Query, query_from_body, query_from_string
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving import doc_page
from bastion_agent.serving.serve_openapi import DOC_ROUTE, PUBLIC_ROUTES, ROUTES, route_of
from bastion_agent.serving.serve_settings import TOKEN_ENV


class Handler(ConnectionHandler):
    """What ``serve`` answers: a request checked (Host, site, token), routed and answered; JSON but for the page."""

    def __getattr__(self, name: str):
        """Every method (``do_GET``, ``do_DELETE``, ``do_BREW``...) goes to one dispatcher."""
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    # -- the answers

    def dispatch(self) -> None:
        path, _, query_string = self.path.partition("?")
        route = route_of(path)
        self.route = route if route in ROUTES else None
        try:
            self.check_request(route)
            ANSWERS[(route, self.command)](self, path if route == DOC_ROUTE else query_string)
        except RequestError as exc:
            self.send_json(exc.status, {"error": exc.message}, exc.headers)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or the watchdog closed the connection: nobody to answer
        except Exception as exc:  # a bug: say so without details that could hold the query
            self.server.log(f"bastion_agent serve: internal error: {type(exc).__name__}")
            self.send_json(500, {"error": "internal error; see the server's log"})
        finally:
            self.drain_unread_body()

    def check_request(self, path: str) -> None:
        """Host, site and caller before the route, so a client without a token learns nothing of what is served."""
        self.check_host()
        if path != "/":
            self.check_site()
        if path not in PUBLIC_ROUTES:
            self.check_token()
        else:
            self.caller = self.optional_caller()
        if path not in ROUTES:
            raise RequestError(404, f"no such path; this server answers {', '.join(ROUTES)}")
        if self.command not in ROUTES[path]:
            allowed = ", ".join(ROUTES[path])
            raise RequestError(405, f"{path} answers {allowed} only", {"Allow": allowed})

    def answer_page(self, query_string: str) -> None:
        self.request_read = True
        self.send_bytes(200, self.server.page, "text/html; charset=utf-8", {"Content-Security-Policy": self.server.page_csp})

    def answer_health(self, query_string: str) -> None:
        self.request_read = True
        self.send_json(200, self.server.service.health(self.caller))

    def answer_openapi(self, query_string: str) -> None:
        self.request_read = True
        self.send_bytes(200, self.server.openapi, "application/json")

    def answer_search_in_query(self, query_string: str) -> None:
        self.request_read = True
        self.answer_search(query_from_string(query_string, self.server.settings, self.server.service.default_mode))

    def answer_search_in_body(self, query_string: str) -> None:
        body = self.read_body()
        self.answer_search(query_from_body(body, self.server.settings, self.server.service.default_mode))

    def answer_document(self, path: str) -> None:
        """``/doc/ID``: the whole sanitized document as the caller may read it; JSON when asked for, else a page."""
        self.request_read = True
        view = self.server.service.document(path.removeprefix("/doc/"), self.caller)
        if "application/json" in (self.headers.get("Accept") or ""):
            self.send_json(200, view.as_dict())
        else:
            self.send_bytes(200, doc_page.render(view), "text/html; charset=utf-8",
                            {"Content-Security-Policy": doc_page.content_security_policy()})

    def answer_search(self, query: Query) -> None:
        self.send_json(200, self.server.service.search(query.text, query.k, query.mode, self.caller, dates=query.dates))

    def check_host(self) -> None:
        host = self.headers.get("Host")
        if self.server.settings.loopback and host is not None and not is_loopback_host_header(host):
            raise RequestError(421, "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])")

    def check_site(self) -> None:
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
        site = (self.headers.get("Sec-Fetch-Site") or "").strip().lower()
        origin = self.headers.get("Origin")
        host = (self.headers.get("Host") or "").strip().lower()
        if site:
            foreign = site in ("cross-site", "same-site")
        else:
            foreign = origin is not None and origin.strip().lower() not in (f"http://{host}", f"https://{host}")
        if foreign:
            raise RequestError(403, "requests from a web page on another site are refused; open this server's own page")

    def check_token(self) -> None:
        """Who is asking (``self.caller``), from the ``Authorization`` header only; 401 for anyone else.

        Never from the query string or a cookie: a token in a URL ends up in
        histories, proxies' logs and ``Referer`` headers, and a cookie is sent
        by the browser on requests other sites make.
        """
        self.caller = self.optional_caller()
        if self.caller is None:
            raise RequestError(401, f"send 'Authorization: Bearer TOKEN' with a token of the server's {TOKEN_ENV} "
                                    f"or {tokens.TOKENS_ENV}", {"WWW-Authenticate": 'Bearer realm="bastion"'})

    def optional_caller(self) -> tokens.Caller | None:
        """The caller a valid token names; the local user when the server needs none; else None."""
        book = self.server.tokens
        if not book.enabled:
            return self.server.service.local_caller
        return book.caller(self.headers.get("Authorization"))

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(400, "send the body with a Content-Length header, not Transfer-Encoding")
        length_text = self.headers.get("Content-Length")
        if length_text is None or not re.fullmatch(r"[0-9]{1,18}", length_text.strip()):
            raise RequestError(400, "send the JSON body with a Content-Length header")
        length = int(length_text)
        if length > self.server.settings.max_body_bytes:
            raise RequestError(413, f"the body is larger than {self.server.settings.max_body_bytes} bytes")
        body = self.rfile.read(length)
        self.body_read = True
        if len(body) != length:
            raise RequestError(400, "the body ended before Content-Length bytes")
        self.request_read = True
        return body


# What answers each route and method; ROUTES (which /openapi.json documents) names the same pairs.
ANSWERS: dict[tuple[str, str], Callable[[Handler, str], None]] = {
    ("/", "GET"): Handler.answer_page,
    ("/healthz", "GET"): Handler.answer_health,
    ("/openapi.json", "GET"): Handler.answer_openapi,
    ("/search", "GET"): Handler.answer_search_in_query,
    ("/search", "POST"): Handler.answer_search_in_body,
    (DOC_ROUTE, "GET"): Handler.answer_document,
}
assert set(ANSWERS) == {(path, method) for path, methods in ROUTES.items() for method in methods}
