"""The watch loop: look, wait until the folder is quiet, run one incremental cycle, say one line.

One cycle is the sweep itself (extract, sanitize, chunk, embed, then publish
when ``[publish]`` is set): every stage already skips what its store holds
(extract reuses unchanged files' texts, sanitize unchanged texts, embed every
window that has a vector), so a renamed file embeds nothing (same text, same
ids), and a removed file's windows leave search in the cycle that sees it
gone. Running the same stages as ``sweep`` is also what makes a watcher
killed at any moment converge on restart: its first cycle is a sweep.

What the watcher knows makes a cycle cost what changed (``SweepHints``):
extract opens only the files whose ``stat`` changed between two snapshots
(the rest keep their listing rows), and the worker processes that read
files and run the sanitizer are kept between cycles (``KeptPool``; ended
after ``POOL_REST_SECONDS`` without a cycle, so a watcher at rest holds
none). The watcher vouches for the unchanged files only from one snapshot to
the next of its own: its first cycle, a cycle after the manifest was
loaded again, and one after a cycle that ended before extract did, read
every file.

What the loop adds:

- **when**: a source (``sources.py``) wakes it; a snapshot (``snapshot.py``)
  says whether anything changed; the cycle waits until two snapshots
  ``debounce_seconds`` apart agree (a file still being written is not read
  half-way), at most ``SETTLE_ROUNDS`` times;
- **failures**: the model server or the central database failing is not
  the end: the cycle is recorded as failing (since when), and retried after
  ``RETRY_FIRST`` seconds, doubling up to ``RETRY_MAX``, changes or not;
  anything else (a full disk, a store that cannot be written, a manifest made
  invalid) stops the watcher with its one line;
- **the manifest**: edited while watching, it is loaded again (its
  signature checked first under ``--require-signed``); invalid, or unsigned,
  for ``RELOAD_GRACE`` seconds, the watcher stops with the manifest's error
  rather than go on with settings the operator no longer has;
- **stopping**: ``stop`` (SIGTERM) is looked at between cycles, so the
  current cycle finishes (the embed stage commits per batch, so even a
  stop that cannot wait loses at most one batch).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from bastion_agent.commands.pipeline import NO_HINTS, SweepHints, run_sweep
from bastion_agent.core.budget import KeptPool, budget_of
from bastion_agent.core.errors import BastionError, DatabaseError, ModelServerError, StoreError
from bastion_agent.core.globs import GlobSet
from bastion_agent.core.layout import Layout, claim_out_dir
from bastion_agent.sanitizing import path_memo, skipped
from bastion_agent.watching import snapshot, sources
from bastion_agent.watching.lock import WatchLock
from bastion_agent.watching.state import Cycle, WatchState, iso

RETRYABLE = (ModelServerError, DatabaseError)
RETRY_FIRST = 5.0
RETRY_MAX = 300.0
RELOAD_GRACE = 5.0  # seconds a refused manifest has to change again (its signature written after it) before the stop
SETTLE_ROUNDS = 30  # a file written for longer than 30 debounce delays is read anyway; the next cycle sees the rest
POOL_REST_SECONDS = 300.0  # the kept workers end after this long without a cycle (memory back at rest)


def sweep_cycle(manifest, layout: Layout, on_stage: Callable[[str, dict], None],
                hints: SweepHints = NO_HINTS) -> dict[str, dict]:
    """The default cycle: the sweep's stages (and publish), each summary handed to ``on_stage`` as it ends.

    The watcher hands its ``hints`` to this cycle and to a cycle marked ``takes_hints`` (serve
    --watch's, which wraps this one); any other cycle given by a caller (a test's failing one)
    takes the first three arguments only."""
    return run_sweep(manifest, layout, on_stage=on_stage, hints=hints)


@dataclass
class Watcher:
    """The loop; ``load()`` gives the verified manifest (again, when the file changes)."""

    load: Callable[[], object]
    layout: Layout
    say: Callable[[str], None]
    stop: threading.Event = field(default_factory=threading.Event)
    cycle: Callable = sweep_cycle
    polling: bool = False
    max_cycles: int | None = None  # tests: stop after this many cycles
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    state: WatchState = field(default_factory=WatchState)
    retry_delay: float = RETRY_FIRST
    _selection: snapshot.Selection | None = field(default=None, repr=False)
    _selection_of: object = field(default=None, repr=False)
    _pool: KeptPool | None = field(default=None, repr=False)
    _vouched: bool = field(default=False, repr=False)  # extract's listing is the last snapshot's: only changes need reading

    def run(self) -> int:
        """Watch until stopped; 0 when stopped cleanly (a failure that stops it raises its ``BastionError``)."""
        manifest = self.load()
        claim_out_dir(self.layout.root)
        with WatchLock(self.layout.root):
            source = self._open_source(manifest)
            try:
                with path_memo.remembered():  # each cycle lists every document's paths again
                    self._loop(manifest, source)
            finally:
                source.close()
                self._end_pool()
        return 0

    def _open_source(self, manifest):
        watch = manifest.watch
        source = sources.open_source(manifest.source.root, watch.poll_seconds, self.stop, self.polling)
        timing = f"every {watch.poll_seconds:g} s" if source.name == "polling" else "on each event"
        self.say(f"watch: watching through {source.name} ({timing}; a change is read once quiet for "
                 f"{watch.debounce_seconds:g} s); pid {os.getpid()}")
        return source

    def _loop(self, manifest, source) -> None:
        before, stamp, retry_at, first = snapshot.Snapshot(), _stamp(manifest.path), None, True
        gone_said = False
        while not self.stop.is_set():
            if not first:
                wait = None if retry_at is None else max(0.0, retry_at - self.monotonic())
                source.wait(wait)
                if self.stop.is_set():
                    break
            if not manifest.source.root.is_dir():  # unmounted or deleted: keep the index, wait for it
                if not gone_said:
                    self.say("watch: the source folder is gone; search keeps the last index until it is back")
                gone_said, first = True, False
                continue
            gone_said = False
            now = self._look(manifest)
            edited = _stamp(manifest.path) != stamp
            due = retry_at is not None and self.monotonic() >= retry_at
            if not (first or edited or due or now != before):
                self._rest_pool()
                continue
            now = self._settle(manifest, now)
            if edited:
                manifest, stamp = self._reload(manifest, source)
                source = self._reopen_if_moved(manifest, source)
                self._vouched = False  # other globs, limits or settings: every file is read again
            failed = self._run_cycle(manifest, now.diff(before))
            before, first = now, False
            retry_at = self._next_retry(failed)
            if self.max_cycles is not None and self.state.cycles >= self.max_cycles:
                break

    def _look(self, manifest) -> snapshot.Snapshot:
        src = manifest.source
        if self._selection is None or self._selection_of is not manifest:  # the globs may change with the manifest
            self._selection = snapshot.Selection(GlobSet(src.include), GlobSet(src.exclude))
            self._selection_of = manifest
        return snapshot.scan(src.root, self._selection.include, self._selection.exclude, self.layout.root,
                             self._selection)

    def _settle(self, manifest, now: snapshot.Snapshot) -> snapshot.Snapshot:
        """The snapshot once two looks ``debounce_seconds`` apart agree (a file being written is waited for)."""
        for _ in range(SETTLE_ROUNDS):
            if self.stop.wait(manifest.watch.debounce_seconds):
                return now
            again = self._look(manifest)
            if again == now:
                return now
            now = again
        return now

    def _reload(self, manifest, source):
        """The manifest loaded again (signature first); an invalid one stops the watcher with its own line.

        Editing a signed manifest takes two writes (the file, then its
        signature): a manifest refused is given ``RELOAD_GRACE`` seconds to
        change again (be signed, be fixed) before the watcher stops.
        """
        deadline = self.monotonic() + RELOAD_GRACE
        while True:
            stamp = _stamp(manifest.path)
            try:
                loaded = self.load()
            except BastionError as exc:
                if self._edited_again(manifest.path, stamp, deadline):
                    continue
                raise type(exc)(f"the manifest changed while watching and is refused, so the watcher stopped: {exc}") from None
            self.say("watch: the manifest changed: loaded again")
            return loaded, stamp

    def _edited_again(self, path, stamp: tuple, deadline: float) -> bool:
        """Whether the manifest (or its signature) changes again before ``deadline``."""
        while self.monotonic() < deadline:
            if self.stop.wait(0.1):
                return False
            if _stamp(path) != stamp:
                return True
        return False

    def _reopen_if_moved(self, manifest, source):
        if source.root != manifest.source.root:
            source.close()
            return self._open_source(manifest)
        return source

    def _next_retry(self, failed: bool) -> float | None:
        if not failed:
            self.retry_delay = RETRY_FIRST
            return None
        at = self.monotonic() + self.retry_delay
        self.retry_delay = min(RETRY_MAX, self.retry_delay * 2)
        return at

    def _run_cycle(self, manifest, changes: snapshot.Changes) -> bool:
        """One cycle and its line; True when it failed in a way worth retrying."""
        started = self.monotonic()
        ended: dict[str, dict] = {}
        error = None
        on_stage = ended.__setitem__
        hints = self._hints(manifest, changes)
        self._vouched = False  # until this cycle's extract has ended
        try:
            if self.cycle is sweep_cycle or getattr(self.cycle, "takes_hints", False):
                self.cycle(manifest, self.layout, on_stage, hints)
            else:
                self.cycle(manifest, self.layout, on_stage)
        except RETRYABLE as exc:
            error = exc
        except OSError as exc:
            raise _disk_error(exc) from None
        except BaseException:
            self._end_pool()  # a job may still be running in it
            raise
        self._vouched = "extract" in ended
        record = self._record(changes, ended, error, round(self.monotonic() - started, 3))
        self.say(cycle_line(self.state.cycles, record, self.retry_delay if error else None))
        return error is not None

    def _hints(self, manifest, changes: snapshot.Changes) -> SweepHints:
        """The kept pool (started for this manifest's budget) and, when the watcher can vouch for the
        rest, the files that changed since the last cycle's extract."""
        budget = budget_of(manifest.source)
        if self._pool is None or self._pool.budget != budget:
            self._end_pool()
            self._pool = KeptPool(budget)
        reread = None
        if self._vouched:
            reread = frozenset(changes.added + changes.changed + [new for _, new in changes.renamed])
        return SweepHints(pool=self._pool, reread=reread)

    def _rest_pool(self) -> None:
        """End the kept workers once the folder has been quiet for ``POOL_REST_SECONDS``."""
        if self._pool is not None and time.monotonic() - self._pool.last_used >= POOL_REST_SECONDS:
            self._end_pool()

    def _end_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _record(self, changes: snapshot.Changes, ended: dict, error, seconds: float) -> Cycle:
        files = [row for stage in ("extract", "sanitize") for row in ended.get(stage, {}).get("skipped_files", [])]
        could_not_read = skipped.attention(ended)
        record = Cycle(ended=iso(self.wall()), seconds=seconds, **changes.counts(),
                       skipped=sum(int(ended.get(stage, {}).get("skipped", 0)) for stage in ("extract", "sanitize")),
                       skipped_files=files[:skipped.SHOWN],
                       embedded=int(ended.get("embed", {}).get("embedded", 0)),
                       windows=int(ended.get("chunk", {}).get("chunks", 0)))
        if error is not None:
            stage = "publish" if isinstance(error, DatabaseError) else "embed"
            record.outcome, record.error = f"{stage} failed, will retry", str(error)
            self.state.failing_since = self.state.failing_since or record.ended
            self.state.last_error = str(error)
        else:
            record.outcome = "done, with skipped files" if could_not_read else "done"
            self.state.failing_since = self.state.last_error = None
        self.state.cycles += 1
        self.state.last_cycle = record
        self.state.save(self.layout.root)
        return record


def cycle_line(number: int, record: Cycle, retry_in: float | None) -> str:
    """``watch: cycle N: 1 added, 0 changed, 1 renamed, 0 removed, 0 skipped; 4 windows embedded in 0.3 s``."""
    text = (f"watch: cycle {number}: {record.added} added, {record.changed} changed, {record.renamed} renamed, "
            f"{record.removed} removed, {record.skipped} skipped")
    text += skipped.line_part({"skipped": record.skipped, "skipped_files": record.skipped_files})
    text += f"; {record.embedded} windows embedded in {record.seconds:.1f} s"
    if record.error is not None:
        text += f"; {record.outcome} in {retry_in:g} s: {record.error}"
    return text


def _stamp(path) -> tuple:
    """What says the manifest (or its signature) was edited: size, modification time and inode of each."""
    stamps = []
    for name in (str(path), str(path) + ".sig"):
        try:
            info = os.stat(name)
            stamps.append((info.st_size, info.st_mtime_ns, info.st_ino))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def _disk_error(exc: OSError) -> BastionError:
    """A file-system failure mid-cycle as one line; the stages write by temporary file and rename, so
    nothing is half-written, and the next run starts from the last whole state."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreError(f"the disk is full ({exc.filename or 'the output folder'}): the watcher stopped; "
                          "nothing was half-written; free some space and start it again")
    return StoreError(f"cannot write the store ({exc.strerror or exc}): the watcher stopped")
