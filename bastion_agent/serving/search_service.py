"""The search service: one warm index and the model server, answering a search for a caller.

One process keeps the manifest's vectors warm (``searcher.SearchIndex``, or
a ``remote_search.RemoteIndex`` for ``serve --remote``) and answers from many
threads at once, each answer limited to the windows the caller's groups may
see and written to the audit log before it is returned. Everything it
returns comes from ``vectors.db``'s sanitized windows; the extract store is
never opened. The HTTP server and the MCP server both answer through it, so
the rules and the model-server handling are the same for both.
"""

from __future__ import annotations

import dataclasses

import re
import threading
import time
from typing import Callable

from bastion_agent import __version__
from bastion_agent.core import audit
from bastion_agent.core.errors import ConfigError, DatabaseError, ModelServerError, StoreError
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.searching import searcher
from bastion_agent.serving import tokens
from bastion_agent.serving.request_error import RequestError
from bastion_agent.serving.search_limits import SearchLimits
from bastion_agent.serving.serve_settings import ServeSettings


class ModelLink:
    """The model server as serve sees it: one probed client, or the reason there is none.

    A failed probe or query never stops the server; ``/search`` answers 503
    with the reason, and a probe is tried again at most every
    ``reprobe_seconds`` (by the next query, or by the watcher thread).
    """

    def __init__(self, manifest, config: EndpointConfig, reprobe_seconds: float, concurrency: int = 4,
                 client_factory: Callable[[EndpointConfig, str], EmbedClient] = EmbedClient,
                 clock: Callable[[], float] = time.monotonic):
        self.manifest = manifest
        self.slots = threading.BoundedSemaphore(concurrency)
        self.config = config
        self.reprobe_seconds = reprobe_seconds
        self.client_factory = client_factory
        self.clock = clock
        self.client: EmbedClient | None = None
        self.error: str | None = "not probed yet"
        self.last_probe: float | None = None
        self._probe_lock = threading.Lock()

    @property
    def reachable(self) -> bool:
        return self.client is not None and self.error is None

    def probe(self) -> bool:
        """Probe with a fresh client; keep it when the model answers with the pinned dimension."""
        if not self._probe_lock.acquire(blocking=False):
            return self.reachable  # another thread is probing; do not stampede the model server
        try:
            self.last_probe = self.clock()
            client = self.client_factory(self.config, self.manifest.embed.model)
            try:
                client.probe(self.manifest.embed.dim)
            except ModelServerError as exc:
                self.error = str(exc)
                return False
            self.client, self.error = client, None
            return True
        finally:
            self._probe_lock.release()

    def probe_due(self) -> bool:
        return self.last_probe is None or self.clock() - self.last_probe >= self.reprobe_seconds

    def embed_query(self, query: str) -> list[float]:
        """The query's vector, or ``RequestError(503)`` saying why there is none."""
        if self.client is None and self.probe_due():
            self.probe()
        client = self.client
        if client is None:
            raise RequestError(503, f"the model server is unavailable: {self.error}; try again later")
        # a burst of queries must not become a burst of connections to the model server; nor may a slow
        # model server keep the queries waiting for a slot (each holding one of serve's connections) for
        # longer than one request to it may take
        if not self.slots.acquire(timeout=self.config.timeout):
            raise RequestError(503, "the model server is busy with other queries; try again later")
        try:
            vector = searcher.embed_query(self.manifest, query, client)
        except ModelServerError as exc:
            self.error = str(exc)
            raise RequestError(503, f"the model server is unavailable: {exc}; try again later") from None
        finally:
            self.slots.release()
        self.error = None
        return vector


ARMED_CHECK_SECONDS = 0.1  # serve --watch, between a cycle's chunk and embed's first commit: keyword answers sooner


class SearchService:
    """What every request thread shares: the warm index, the model link, their health.

    The index is swapped as one reference: a request takes the current one
    and uses it to the end, and a new one is loaded fully (one SQLite
    snapshot) before it replaces the old, so no answer mixes two sweeps.
    """

    def __init__(self, manifest, layout, settings: ServeSettings, model: ModelLink,
                 log: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
                 remote=None):
        self.manifest = manifest
        self.layout = layout
        self.settings = settings
        self.model = model
        self.log = log
        self.clock = clock
        self.summary_seen = summary_stamp(layout)  # taken before the load: a later summary means a later sweep
        self.local_caller = tokens.local_caller(manifest)  # who asks when no token is needed (loopback, stdio)
        limits = manifest.serve_limits
        self.limits = SearchLimits(limits.searches_per_minute, limits.search_burst, clock=clock, log=log)
        self.retention = audit.Retention(limits.audit_retention_days, warn=log)
        self.remote = remote is not None
        # remote: a remote_search.RemoteIndex (serve --remote), always current, never reloaded
        self.index = remote if remote is not None else searcher.SearchIndex.load(manifest, layout)
        self.index_error: str | None = None  # what /healthz says (no local path)
        self._reload_failure: str | None = None  # what the log said
        self.default_mode = searcher.resolve_mode(manifest, None)  # the manifest's, else the index's default
        self._seen_version: tuple | None = None
        self._seen_since = 0.0
        self._stop = threading.Event()
        self._next_change = threading.Event()  # reload_on_next_change
        self._reload_lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="bastion-serve-watcher", daemon=True)

    def start(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join()

    def _watch(self) -> None:
        while not self._stop.wait(self._check_every()):
            self.check_reload()
            if not self.model.reachable and self.model.probe_due():
                self.model.probe()

    def check_reload(self) -> bool:
        """Load the new index when ``vectors.db`` changed and the change has settled; True if swapped.

        Settled means embed has written a new summary since the index was
        loaded (embed writes it when a run ends), or nothing has changed for
        ``reload_quiet_seconds`` (a store replaced some other way), or
        ``reload_on_next_change`` asked for the next change whatever it is
        (``serve --watch``, once a cycle's windows are chunked: embed's first
        commit holds them all, so keyword search finds them while they wait
        for vectors). Until then the old index keeps answering, so a store
        that an embed run is still filling is not loaded while it keeps changing.
        """
        if self.index.is_current():
            self._seen_version = None
            return False
        version = searcher.store_version(self.layout)
        now = self.clock()
        if version != self._seen_version:
            self._seen_version, self._seen_since = version, now
        quiet = now - self._seen_since >= self.settings.reload_quiet_seconds
        if summary_stamp(self.layout) == self.summary_seen and not quiet and not self._next_change.is_set():
            return False
        self._next_change.clear()
        return self.reload_now(when_committed=False)

    def _check_every(self) -> float:
        """Seconds to the next look: ``ARMED_CHECK_SECONDS`` while a reload waits for the next commit (two stats)."""
        if self._next_change.is_set():
            return min(ARMED_CHECK_SECONDS, self.settings.reload_check_seconds)
        return self.settings.reload_check_seconds

    def reload_on_next_change(self) -> None:
        """Load the index at the next change of ``vectors.db`` (one SQLite commit: whole batches only)."""
        self._next_change.set()

    def reload_now(self, when_committed: bool = True) -> bool:
        """Load the index now, when ``vectors.db`` changed since it was loaded; True if swapped.

        ``when_committed`` (``serve --watch`` after a cycle): only when a
        writer has committed since (``SearchIndex.unchanged``), not when the
        files' stamps merely moved; and the cycle is over, so no reload waits
        for a next commit any more (``reload_on_next_change``). Serialised:
        the reload thread and the cycles may both ask, and two loads of one
        store would do the same work twice.
        """
        if when_committed:
            self._next_change.clear()
        with self._reload_lock:
            if self.index.is_current():
                return False
            unchanged = getattr(self.index, "unchanged", None) if when_committed else None
            if unchanged is not None and unchanged():  # no commit since the load: the same store
                self.index.version = searcher.store_version(self.layout)
                return False
            summary = summary_stamp(self.layout)  # before the load: a later summary means a later sweep
            try:
                fresh = searcher.SearchIndex.load(self.manifest, self.layout)
                fresh.warm_keyword_like(self.index)  # the filtered callers' keyword indexes, before anyone waits for them
            except Exception as exc:  # keep answering from the old index; say why once
                message = f"could not reload the index ({exc}); still answering from the one loaded at {self.index.loaded_at}"
                if message != self._reload_failure:
                    self.log(f"bastion_agent serve: {message}")  # the operator's log may name local paths
                self._reload_failure = message
                # /healthz needs no token: it says what failed, never where on this machine.
                self.index_error = (f"could not reload the index ({without_paths(str(exc))}); still answering from "
                                    f"the one loaded at {self.index.loaded_at}")
                return False
            # The old index is not closed here: requests may still be using it; it closes when the last one drops it.
            self.index, self.index_error, self.summary_seen, self._reload_failure = fresh, None, summary, None
            self.log(f"bastion_agent serve: reloaded the index: {len(fresh)} chunks")
            return True

    def health(self, caller: tokens.Caller | None) -> dict:
        """The server's state as ``caller`` may see it; without a caller (no token) only ``status``.

        ``chunks`` counts only the caller's windows. ``loaded_at`` and
        ``index_error`` change when any document changes, hidden ones too,
        so only a caller who may read every group sees them.
        """
        stale = not self.remote and searcher.staleness(self.layout).get("stale_since") is not None
        status = "ok" if self.model.reachable and not stale else "degraded"
        if caller is None:
            return {"status": status}
        index = self.index
        every_group = caller.groups is None
        return {
            "status": status,
            "model": self.manifest.embed.model,
            "dim": self.manifest.embed.dim,
            "chunks": self.visible_count(index, caller),
            "caller": caller.name,
            "loaded_at": index.loaded_at if every_group else None,
            "index_error": self.index_error if every_group else None,
            "model_server": "ok" if self.model.reachable else "unreachable",
            "fallback": None if self.model.reachable else "keyword",  # /search answers by keyword meanwhile
            "search_mode": self.default_mode,
            **self.staleness(self.pending(index, caller)),
            # how vector search answers: the graph's measured recall@10 and beam, or the exact scan (and why)
            "vector_search": vector_search_of(index, caller),
            "auth": "bearer" if self.settings.guarded else "none",
            "limits": {"max_k": self.settings.max_k, "max_query_chars": self.settings.max_query_chars},
            "version": __version__,
        }

    def search(self, query: str, k: int, mode: str, caller: tokens.Caller | None = None, via: str = "serve",
               dates=None) -> dict:
        """What ``search --json`` would print for ``caller``'s groups, in an envelope; audited before it is returned.

        ``caller`` None is the local user (``local_caller``); ``via`` names
        the way in for the audit log (serve, mcp); ``dates`` (a
        ``core.dates.DateRange``) keeps to documents modified within it.
        """
        caller = caller or self.local_caller
        if caller != self.local_caller:  # a token's caller; the local user owns the log's files anyway
            self.limits.take(caller.name)
        index = self.index
        vectors = searcher.needs_vector(mode)  # keyword search works while the model server is down
        hits = []
        notice = None
        asked = mode
        pending = self.pending(index, caller)
        if not vectors or self.visible_count(index, caller) != 0:  # none to see: no hits, no model call (as the CLI)
            vector = None
            if vectors:
                try:
                    vector = self.model.embed_query(query)
                except RequestError as exc:  # the model server is down: keyword search answers, and says so
                    if exc.status != 503:
                        raise
                    mode, notice = "keyword", f"{exc.message.removesuffix('; try again later')}; answered with keyword search instead of {asked} search"
            try:
                hits = self._search_as(caller, index, query, vector, k, mode, dates)
            except ConfigError as exc:
                raise RequestError(400, str(exc)) from None
            except ModelServerError as exc:
                raise RequestError(503, str(exc)) from None
            except DatabaseError as exc:  # serve --remote: the details go to the log, not to the client
                self.log(f"bastion_agent serve: {exc}")
                raise RequestError(503, "the central index is unavailable; try again later") from None
        self._audit(caller, via, mode, k, hits, query)
        envelope = {
            "query": query,
            "model": self.manifest.embed.model,
            "mode": mode,
            "k": k,
            "hits": [hit.as_dict() for hit in hits],
        }
        if dates is not None:
            envelope["dates"] = dates.as_dict()
        if notice:
            envelope.update(fallback="keyword", notice=notice)
        elif vectors and not self.remote:
            envelope["vector_search"] = vector_search_of(index, caller, dated=dates is not None)  # as /healthz says
        envelope.update(self.staleness(pending))
        return envelope

    def document(self, doc: str, caller: tokens.Caller | None = None, via: str = "serve"):
        """The whole sanitized document ``doc`` as ``caller`` may read it (``searching.document_view``), audited.

        A document the caller may not read is answered exactly as one that
        does not exist (404, the same words, after the same query).
        """
        from bastion_agent.searching.document_view import document_view

        caller = caller or self.local_caller
        if self.remote:
            raise RequestError(404, "serve --remote shows hits only: a document stays on its own bastion")
        index = self.index
        with index.lock:  # the index's one SQLite connection is shared by the search threads
            view = document_view(index.db, doc, caller.groups)
        if view is None:
            raise RequestError(404, "no such document in this sweep: ids change when a document changes; search again")
        self._audit(caller, via, "document", 1, [view], None)
        return view

    def pending(self, index, caller: tokens.Caller) -> int | None:
        """How many of ``caller``'s windows wait for a vector (None centrally: the central index has no such wait)."""
        if self.remote:
            return None
        return index.pending(caller.groups)

    def staleness(self, pending: int | None) -> dict:
        """``windows_pending``, and ``stale_since`` and ``stale_error`` (None unless the last embed has not finished)."""
        stale = searcher.staleness(self.layout) if not self.remote else {}
        error = stale.get("stale_error") if stale.get("stale_since") else None
        return {"windows_pending": pending, "stale_since": stale.get("stale_since"),
                "stale_error": without_paths(error) if error else None}

    def _search_as(self, caller: tokens.Caller, index, query: str, vector, k: int, mode: str, dates=None) -> list:
        """The index's top k among the windows ``caller`` may see (filtered before ranking, by the index)."""
        if not self.remote:
            return index.search(query, vector, k, mode, groups=caller.groups, dates=dates)
        if caller.groups is None:
            return index.search(query, vector, k, mode, dates=dates)
        if caller.reader is None:  # fail closed: the DSN's own role reads every group centrally
            raise RequestError(403, "this token has no reader role for the central index; "
                                    "give it one with `token add NAME --groups G --reader ROLE`")
        return index.search(query, vector, k, mode, groups=caller.groups, reader=caller.reader, dates=dates)

    def visible_count(self, index, caller: tokens.Caller) -> int | None:
        """How many windows ``caller`` may search.

        Centrally (``--remote``) a named token's rows are counted as its
        reader; a token without one is refused there, and is told no count
        (None), never the total.
        """
        if caller.groups is None:
            return len(index)
        if not self.remote:
            return index.visible_count(caller.groups)
        return None if caller.reader is None else index.visible_count(caller.groups, reader=caller.reader)

    def _audit(self, caller: tokens.Caller, via: str, mode: str, k: int, hits: list, query: str) -> None:
        try:
            audit.record_search(self.layout, caller=caller.name, via=via, mode=mode, k=k,
                                docs=[hit.doc for hit in hits], query=query if self.manifest.audit_queries else None,
                                retention=self.retention)
        except StoreError as exc:
            self.log(f"bastion_agent {via}: {exc}")
            raise RequestError(503, "the audit log cannot be written, so the search is not answered; "
                                    "see the server's log") from None


_PATH_RE = re.compile(r"""(?:[A-Za-z]:)?(?:~|\.{1,2})?[/\\][^\s'"()\[\],;]*""")


def without_paths(text: str) -> str:
    """``text`` with every file-system path in it replaced by ``<path>`` (for answers anyone may read)."""
    return _PATH_RE.sub("<path>", text)


def summary_stamp(layout) -> tuple | None:
    """What changes when embed writes ``embed.summary.json`` (at the end of every run)."""
    try:
        stat = layout.summary_path("embed").stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def vector_search_of(index, caller: tokens.Caller, dated: bool = False) -> dict | None:
    """The index's ``vector_status.VectorSearch`` as JSON, as ``caller`` meets it (None for the central index).

    The graph's beam and measured recall were chosen over every window, hidden
    ones too, and a caller who cannot see every window is answered by the
    exact scan anyway (``ann.EXACT_SHARE``): such a caller is told the scan,
    and so is a search kept to a span of dates (``dated``), which scans too.
    """
    status = getattr(index, "vector_search", None)
    if status is None:
        return None
    if status.method == "ann" and (dated or (caller.groups is not None
                                             and index.visible_count(caller.groups) < len(index))):
        status = dataclasses.replace(status, method="exact", recall=1.0, beam=None, notice=None)
    return status.as_dict()
