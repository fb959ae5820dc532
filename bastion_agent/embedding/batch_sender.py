"""The embed stage's engine: keep the model server busy, survive its faults, lose nothing.

``embed_stage.run_embed`` hands it the chunks that have no vector yet. The engine

- cuts them into batches of the working size and sends each batch from a
  small pool of worker threads (``EMBED_CONCURRENCY``, default 1), while the
  main thread writes the previous batch's vectors: the next request is built
  and in flight while SQLite commits, so the server never waits on the stage;
- retries what is worth retrying (connection refused or reset, timeouts,
  429/502/503/504, an answer cut short) with exponential backoff and jitter,
  honouring ``Retry-After``, until one request has spent
  ``EMBED_RETRY_DEADLINE`` seconds failing;
- splits a batch the server refuses as too large and keeps the smaller size
  for the rest of the run; isolates one input the server refuses (too long,
  a NaN or all-zero vector, a 500) by bisecting the batch, resends a too-long
  input asking the server to truncate it where the API allows, and records
  the rest as failed, by reason, so one bad chunk never aborts the sweep;
- isolates one input that crashes the server: a request the server drops
  (connection reset or closed after it was taken) is resent alone; dropped
  again, its batch is bisected, each half sent alone, until the one input
  is found and recorded as failed (``server_crash``), and the run goes on;
- moves the batch size and the requests in flight toward the server's
  fastest (``batch_tuner.BatchTuner``), unless ``EMBED_BATCH_FIXED=1``;
- counts every request and every retry as it is made, so a run that stops
  (deadline, fatal answer, Ctrl-C) reports them too;
- commits each batch's vectors and failures in one short transaction as the
  batch completes, so a kill at any moment leaves whole batches and a re-run
  embeds only what is missing.

Sleep, clock and randomness are injected (``RetryPolicy``) so tests never wait.
"""

from __future__ import annotations

import collections
import contextlib
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from queue import Empty, SimpleQueue
from typing import Callable, Iterator, Sequence

from bastion_agent.core.errors import ModelServerError
from bastion_agent.core.progress import Progress
from bastion_agent.embedding.estimate import FirstBatches
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.batch_tuner import BatchTuner, Setting
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import DEFAULT_RETRY_DEADLINE
from bastion_agent.embedding.failures import (
    BATCH_TOO_LARGE,
    CONNECTION_LOST,
    FATAL,
    INPUT_TOO_LONG,
    TRANSIENT,
    WRONG_API,
    RequestFailure,
)

BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
MIN_FAILURE_STREAK = 64
SERVER_CRASH = "server_crash"  # a failure kind and a failed chunk's reason: the input brings the server down
CRASH_DROPS = 2  # drops of one request, the last one sent alone, that show it crashes the server


@dataclass
class RetryPolicy:
    """How long to wait between tries, and for how long in all.

    ``deadline`` bounds the time one request may spend failing, from its
    first failure (a long sweep with a few 429s an hour never runs out).
    ``sleep`` of None waits on the run's stop event, so Ctrl-C never waits
    out a backoff.
    """

    deadline: float = DEFAULT_RETRY_DEADLINE
    base: float = BACKOFF_BASE
    cap: float = BACKOFF_CAP
    sleep: Callable[[float], None] | None = None
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """The wait before try ``attempt + 1``: the server's ``Retry-After``, else
        half of ``min(cap, base * 2**attempt)`` plus a random part up to the other half."""
        if retry_after is not None:
            return retry_after
        ceiling = min(self.cap, self.base * 2 ** attempt)
        return ceiling / 2 + self.rand() * ceiling / 2


@dataclass
class EmbedStats:
    """What one run did; the summary's counts. Updated as batches commit, so an
    interrupted or failed run can still report what it stored."""

    embedded: int = 0
    failed_by_reason: collections.Counter = field(default_factory=collections.Counter)
    retries: int = 0
    requests: int = 0
    batches: int = 0
    truncated_ids: set = field(default_factory=set)  # chunks resent asking the server to truncate (window_fit counts them)
    batch_size_final: int = 0
    retried_failures: int = 0
    reused_by_text: int = 0  # vectors of an old-id store given the new id of the same window text
    interrupted: bool = False
    stopped: str | None = None
    reused: int = 0  # windows that already had a vector (shown on the progress line)
    batch_settled: int = 0
    concurrency_settled: int = 0
    tuning: dict = field(default_factory=dict)  # BatchTuner.report() less the settled pair ({} when fixed)

    @property
    def failed(self) -> int:
        return sum(self.failed_by_reason.values())


@dataclass
class BatchOutcome:
    """One batch resolved: vectors for some chunks, a failure reason for the others."""

    stored: list[tuple[str, bytes]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    truncated_ids: list[str] = field(default_factory=list)
    seconds: float | None = None  # the request's time, when the whole batch succeeded in one request


class Tally:
    """Requests and retries, counted by the workers as they are made (a run that stops still has them)."""

    def __init__(self):
        self.requests = 0
        self.retries = 0
        self._lock = threading.Lock()

    def request(self) -> None:
        with self._lock:
            self.requests += 1

    def retry(self) -> None:
        with self._lock:
            self.retries += 1


class Gate:
    """How many requests may be in flight (``limit``, changed by the tuner), and sending one alone.

    A request sent ``exclusive`` waits until no other is in flight and holds
    the others back while it runs: when a server drops a request, sending it
    alone tells whether that request brought it down.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.active = 0
        self.alone = False
        self.waiting_alone = 0  # requests waiting to be sent alone: the others hold back for them
        self._changed = threading.Condition()

    def set_limit(self, limit: int) -> None:
        with self._changed:
            self.limit = limit
            self._changed.notify_all()

    @contextlib.contextmanager
    def slot(self, exclusive: bool = False):
        with self._changed:
            if exclusive:
                self.waiting_alone += 1
                self._changed.wait_for(lambda: self.active == 0)
                self.waiting_alone -= 1
                self.alone = True
            else:
                self._changed.wait_for(lambda: not self.alone and not self.waiting_alone and self.active < self.limit)
            self.active += 1
        try:
            yield
        finally:
            with self._changed:
                self.active -= 1
                if exclusive:
                    self.alone = False
                self._changed.notify_all()


class Stopped(Exception):
    """The run was stopped (Ctrl-C or a failure elsewhere) while this batch waited."""


class BatchSizer:
    """The working batch size, and the largest batch the server has shown it takes (``limit``).

    The limit only ever shrinks (a batch refused as too large); the working
    size is the tuner's choice (or ``EMBED_BATCH``), never above the limit.
    Shared by the workers, which shrink it, and the main thread, which cuts.
    """

    def __init__(self, size: int):
        self.size = size
        self.limit: int | None = None
        self._lock = threading.Lock()

    def shrink(self, refused: int, limit: int | None) -> int:
        """A batch of ``refused`` inputs was too large: the size to use from now on."""
        with self._lock:
            wanted = limit if limit is not None and 0 < limit < refused else max(1, refused // 2)
            self.limit = min(self.limit or wanted, wanted)
            self.size = min(self.size, self.limit)
            return self.size

    def choose(self, size: int) -> int:
        """The tuner's size, within the limit; the size now in use."""
        with self._lock:
            self.size = min(size, self.limit) if self.limit else size
            return self.size


class BatchEmbedder:
    """Turns one batch of ``(chunk_id, text)`` into a ``BatchOutcome``; runs in a worker thread."""

    def __init__(self, client: EmbedClient, prefix: str, policy: RetryPolicy, sizer: BatchSizer,
                 stop: threading.Event, gate: Gate | None = None, tally: Tally | None = None):
        self.client = client
        self.prefix = prefix
        self.policy = policy
        self.sizer = sizer
        self.stop = stop
        self.gate = gate or Gate(client.config.concurrency)
        self.tally = tally or Tally()
        self.fatal: ModelServerError | None = None  # the error that stopped the run, for the main thread

    def halt(self, error: ModelServerError) -> ModelServerError:
        """Stop every worker (they send nothing more) and keep ``error`` as the reason."""
        if self.fatal is None:
            self.fatal = error
        self.stop.set()
        return error

    def __call__(self, items: Sequence[tuple[str, str]]) -> BatchOutcome:
        outcome = BatchOutcome()
        limit = self.sizer.limit or len(items)
        whole = len(items) <= limit
        for first in range(0, len(items), limit):  # a batch cut before the server's limit was known
            self._resolve(list(items[first : first + limit]), outcome, timed=whole)
        return outcome

    def _resolve(self, items: list[tuple[str, str]], outcome: BatchOutcome, truncate: bool = False,
                 suspect: bool = False, timed: bool = False) -> None:
        """Embed ``items`` into ``outcome``; ``suspect``: part of a batch that crashed the server (sent alone);
        ``timed``: the whole batch, whose request time the tuner may use."""
        try:
            blobs, seconds = self._send([self.prefix + text for _, text in items], truncate, suspect)
        except RequestFailure as failure:
            self._refused(items, outcome, failure, truncate)
            return
        outcome.stored.extend((chunk_id, blob) for (chunk_id, _), blob in zip(items, blobs))
        if truncate:
            outcome.truncated_ids.extend(chunk_id for chunk_id, _ in items)
        if timed:
            outcome.seconds = seconds

    def _refused(self, items, outcome: BatchOutcome, failure: RequestFailure, truncate: bool) -> None:
        if failure.kind in (FATAL, WRONG_API):
            raise self.halt(_stop("refused_" + failure.reason,
                                  f"{self._where()} refused the request: {failure.detail}; stopping"))
        if len(items) > 1:
            if failure.kind == BATCH_TOO_LARGE:
                size = self.sizer.shrink(len(items), failure.limit)
            else:  # isolate the input the server refuses (or crashes on); the working size stays
                size = (len(items) + 1) // 2
            for first in range(0, len(items), size):
                self._resolve(items[first : first + size], outcome, suspect=failure.kind == SERVER_CRASH)
            return
        too_long = failure.kind in (INPUT_TOO_LONG, BATCH_TOO_LARGE)
        if too_long and not truncate and self.client.can_truncate:
            self._resolve(items, outcome, truncate=True)
            return
        outcome.failed.append((items[0][0], "too_long" if too_long else failure.reason))

    def _send(self, texts: list[str], truncate: bool, suspect: bool = False) -> tuple[list[bytes], float]:
        """One request, tried again after transient failures until the deadline; the vectors and the
        successful try's seconds.

        A try the server drops (``connection_lost``) is sent again alone
        (``Gate.slot(exclusive=True)``), so another request in flight when
        the server went down is not blamed. Dropped ``CRASH_DROPS`` times, the
        last time alone (once, for a part of a batch already known to crash
        the server), the request is taken to bring the server down: it
        fails with kind ``server_crash`` and is bisected, instead of being
        retried until the deadline as an outage.
        """
        first_failure = None
        attempt = drops = 0
        alone = suspect
        while True:
            if self.stop.is_set():
                raise Stopped()
            self.tally.request()
            try:
                with self.gate.slot(exclusive=alone):
                    started = self.policy.clock()
                    blobs = self.client.embed_packed(texts, truncate)
                    return blobs, self.policy.clock() - started
            except RequestFailure as failure:
                if failure.kind != TRANSIENT:
                    raise
                if failure.reason == CONNECTION_LOST:
                    drops += 1
                    if alone and drops >= (1 if suspect else CRASH_DROPS):
                        raise RequestFailure(SERVER_CRASH, SERVER_CRASH,
                                             f"the model server dropped this request {drops} times") from None
                    alone = True
                now = self.policy.clock()
                first_failure = now if first_failure is None else first_failure
                wait = self.policy.delay(attempt, failure.retry_after)
                if now + wait - first_failure > self.policy.deadline:
                    raise self.halt(_stop(
                        "retry_deadline",
                        f"the model server at {self._where()} did not recover within EMBED_RETRY_DEADLINE="
                        f"{self.policy.deadline:g}s (last: {failure.detail})",
                    )) from None
                self._sleep(wait)
                attempt += 1
                self.tally.retry()

    def _sleep(self, seconds: float) -> None:
        if self.policy.sleep is not None:
            self.policy.sleep(seconds)
        elif self.stop.wait(seconds):
            raise Stopped()

    def _where(self) -> str:
        return self.client.config.display_url


class WorkerPool:
    """A few daemon threads running jobs in submission order.

    Daemon threads, not ``ThreadPoolExecutor``: a worker blocked in a long
    HTTP request must not hold the process open after Ctrl-C.
    """

    def __init__(self, count: int):
        self.jobs: SimpleQueue = SimpleQueue()
        self.threads = [threading.Thread(target=self._loop, name=f"embed-{n}", daemon=True) for n in range(count)]
        for thread in self.threads:
            thread.start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self.jobs.put((future, fn, args))
        return future

    def close(self) -> None:
        """Cancel what has not started; let the workers end after their current job."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self.threads:
            self.jobs.put(None)

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the main thread, which decides
                future.set_exception(exc)


class Steering:
    """What the next batch is cut with: ``EMBED_BATCH`` and ``EMBED_CONCURRENCY`` as given
    (``EMBED_BATCH_FIXED=1``), or the tuner's choice within the server's limit. Main thread only."""

    def __init__(self, config, sizer: BatchSizer, gate: Gate):
        self.config = config
        self.sizer = sizer
        self.gate = gate
        # EMBED_BATCH set by the user is a ceiling: a user sets it because the server refuses larger
        # batches (a tuner above it sent 80 to a server set to 5); unset, the tuner starts at 32 and may go up.
        ceiling = {"max_batch": config.batch} if getattr(config, "batch_set", False) else {}
        self.tuner = None if config.batch_fixed else BatchTuner(config.batch, config.concurrency, **ceiling)
        if self.tuner is not None:
            gate.set_limit(self.tuner.setting().concurrency)

    def setting(self) -> Setting:
        if self.tuner is None:
            return Setting(self.sizer.size, self.config.concurrency)
        if self.sizer.limit and self.tuner.max_batch > self.sizer.limit:
            self.tuner.cap(self.sizer.limit)
        wanted = self.tuner.next_setting()
        self.gate.set_limit(wanted.concurrency)
        return Setting(self.sizer.choose(wanted.batch), wanted.concurrency)

    def measured(self, setting: Setting, windows: int, seconds: float | None) -> None:
        if self.tuner is not None and seconds is not None:
            self.tuner.record(setting, windows, seconds)

    def settle_into(self, stats: "EmbedStats") -> None:
        if self.tuner is None:
            stats.batch_settled, stats.concurrency_settled = self.sizer.size, self.config.concurrency
            stats.tuning = {}
            return
        report = self.tuner.report()
        settled = report.pop("batch_settled")
        stats.batch_settled = min(settled, self.sizer.limit) if self.sizer.limit else settled
        stats.concurrency_settled = report.pop("concurrency_settled")
        stats.tuning = report


def embed_chunks(db, client: EmbedClient, key: str, dim: int, prefix: str,
                 missing: Sequence[tuple[str, str]], stats: EmbedStats, policy: RetryPolicy | None = None) -> None:
    """Embed ``missing`` ``(chunk_id, text)`` pairs into ``db``, updating ``stats`` batch by batch.

    Raises ``ModelServerError`` when the server fails for good (deadline,
    a fatal answer, or every chunk of a long stretch refused), and lets
    ``KeyboardInterrupt`` through; either way, every batch committed before
    is complete and counted in ``stats``, and every request made is counted.
    """
    config = client.config
    policy = policy or RetryPolicy(deadline=config.retry_deadline)
    stop = threading.Event()
    sizer = BatchSizer(config.batch)
    gate, tally = Gate(config.concurrency), Tally()
    steering = Steering(config, sizer, gate)
    embedder = BatchEmbedder(client, prefix, policy, sizer, stop, gate, tally)
    batches = _cut(missing, steering)
    pool = WorkerPool(config.concurrency)
    pending: dict[Future, tuple[int, Setting]] = {}  # future -> chunks in its batch, the setting it was cut at
    streak, streak_limit = 0, max(MIN_FAILURE_STREAK, 2 * config.batch)
    try:
        first = FirstBatches(len(missing))
        with Progress("embed", len(missing), "windows", note=f"{stats.reused} reused") as progress:
            _fill(pending, batches, pool, embedder, 2 * gate.limit)
            while pending:
                # Commit whichever batch is done first: one batch waiting out a
                # backoff never holds back the others (each batch is atomic).
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in _in_submission_order(done, pending):
                    size, setting = pending.pop(future)
                    try:
                        outcome = future.result()
                    except Stopped:  # another worker met the error that stopped the run
                        raise embedder.fatal or _stop("stopped", "the embed workers stopped") from None
                    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
                    vectorstore.store_batch(db, key, dim, outcome.stored, outcome.failed, created)
                    _count(stats, outcome)
                    steering.measured(setting, size, outcome.seconds)
                    progress.advance(size)
                    estimate = first.record(size, outcome.seconds, setting.concurrency, progress.done)
                    if estimate:
                        progress.say(estimate)
                    streak = 0 if outcome.stored else streak + len(outcome.failed)
                    if streak >= streak_limit:
                        reasons = ", ".join(sorted({reason for _, reason in outcome.failed}))
                        raise _stop(
                            "failure_streak",
                            f"the model server at {config.display_url} refused each of the last {streak} chunks "
                            f"({reasons}); stopping",
                        )
                _fill(pending, batches, pool, embedder, 2 * gate.limit)  # a batch queued behind each request
    except KeyboardInterrupt:
        stats.interrupted = True
        raise
    except ModelServerError as exc:
        stats.stopped = getattr(exc, "label", "model_server_error")  # a label: server messages may quote input
        raise
    finally:
        stop.set()
        pool.close()
        stats.batch_size_final = sizer.size
        stats.requests += tally.requests
        stats.retries += tally.retries
        steering.settle_into(stats)


def _stop(label: str, message: str) -> ModelServerError:
    """A ``ModelServerError`` that ends the run, with a text-free label for the summary."""
    error = ModelServerError(message)
    error.label = label
    return error


def _cut(missing: Sequence, steering: Steering) -> Iterator[tuple[list, Setting]]:
    """Batches of the working size at the moment each is cut, with the setting they were cut at."""
    first = 0
    while first < len(missing):
        setting = steering.setting()
        yield list(missing[first : first + setting.batch]), setting
        first += setting.batch


def _fill(pending: dict, batches: Iterator[tuple[list, Setting]], pool: WorkerPool, embedder, window: int) -> None:
    while len(pending) < window:
        batch = next(batches, None)
        if batch is None:
            return
        items, setting = batch
        pending[pool.submit(embedder, items)] = (len(items), setting)


def _in_submission_order(done: set, pending: dict) -> list:
    """``done`` in the order the batches were cut (``pending`` keeps insertion order)."""
    return [future for future in pending if future in done]


def _count(stats: EmbedStats, outcome: BatchOutcome) -> None:
    stats.embedded += len(outcome.stored)
    stats.failed_by_reason.update(reason for _, reason in outcome.failed)
    stats.truncated_ids.update(outcome.truncated_ids)
    stats.batches += 1
