"""Run one hostile-input job (read a file, sanitize a document) in a worker process under limits.

A parser fed by strangers can loop, allocate without end or expand a small
file into gigabytes. Fixing each known path is not enough: the next format
(or the next pypdf) brings its own. So every file is read, and every
document sanitized, in a worker process that the parent can kill:

- **memory**: the worker lowers its own ``RLIMIT_AS`` to the budget before
  it runs anything; an allocation beyond it fails (``MemoryError``, or the
  worker dies) and the job is reported ``too_costly: memory``;
- **time**: the parent waits for an answer until the job's deadline, then
  kills the worker (``SIGKILL``: a regular expression running in C does not
  look at signals) and reports ``too_costly: time``;
- **output**: the job counts the text it produces against a cap that grows
  with the input (the readers stop as they produce it), and the parent
  refuses any answer above the absolute cap: ``too_costly: output``.

A killed worker is replaced; the other jobs go on. ``WorkerPool.ordered``
keeps one worker per core busy and hands the answers back in submission
order, so what the parent writes does not depend on which worker was faster.

Requests go to the worker pickled (the parent is trusted); answers come back
as a JSON header and raw bytes, never pickled, so a worker that a hostile
file managed to subvert cannot make the parent run code by what it answers.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import selectors
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Iterator

REASON_MEMORY = "too_costly: memory"
REASON_TIME = "too_costly: time"
REASON_OUTPUT = "too_costly: output"  # the readers stop at the output cap with this reason too
REASON_PIXELS = "too_costly: pixels"  # a scan whose pages or pixels (from its headers) exceed what OCR may decode
COSTLY_REASONS = (REASON_MEMORY, REASON_TIME, REASON_OUTPUT, REASON_PIXELS)

DEFAULT_SECONDS = 30.0           # per job, plus SECONDS_PER_MIB for each MiB of input
SECONDS_PER_MIB = 1.0
DEFAULT_MEMORY_MB = 1024         # address space of one worker (Python itself is ~50 MB of it)
OUTPUT_PER_INPUT_BYTE = 64       # text characters per byte of input...
OUTPUT_FLOOR_CHARS = 1 << 20     # ...but always at least 1 Mi characters...
OUTPUT_MAX_CHARS = 64 << 20      # ...and never more than 64 Mi characters per file

_FRAME = struct.Struct(">I")


@dataclass(frozen=True)
class Budget:
    """The limits of one job; ``seconds`` and ``memory_mb`` come from ``[source]``."""

    seconds: float = DEFAULT_SECONDS
    memory_mb: int = DEFAULT_MEMORY_MB

    def seconds_for(self, size: int) -> float:
        """Wall time allowed for a job on ``size`` bytes: big honest files get longer."""
        return self.seconds + SECONDS_PER_MIB * size / (1 << 20)

    @staticmethod
    def output_for(size: int) -> int:
        """Characters of text a job on ``size`` bytes may produce."""
        return min(OUTPUT_MAX_CHARS, max(OUTPUT_FLOOR_CHARS, OUTPUT_PER_INPUT_BYTE * size))

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_mb) << 20

    def key(self) -> str:
        """What a remembered verdict depends on: a larger budget retries the file."""
        return f"s{self.seconds:g}+m{self.memory_mb}+o{OUTPUT_PER_INPUT_BYTE}/{OUTPUT_FLOOR_CHARS}/{OUTPUT_MAX_CHARS}"


class Task(str, Enum):
    """What a worker can be asked to run; each names a function in ``_TASK_FUNCTIONS``.

    A task used to be a bare string: a misspelt one reached the worker,
    which died on it, and the parent reported the file ``too_costly:
    memory``. Now ``Call`` turns the name into a ``Task`` in the parent and
    refuses one that does not exist, and a test resolves every task to its
    function.
    """

    CALL = "call"      # a named function of this package (tests, benches)
    READ = "read"      # read one file, then the byte-level scan
    REDACT = "redact"  # sanitize one document


@dataclass(frozen=True)
class Call:
    """One job: a task (a ``Task`` or its name), its arguments, and the input size its budget scales with."""

    task: Task
    args: tuple
    size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", task_named(self.task))


def task_named(name: "Task | str") -> Task:
    """The ``Task`` called ``name``; ``ValueError`` naming the known tasks when there is none."""
    try:
        return Task(name)
    except ValueError:
        known = ", ".join(task.value for task in Task)
        raise ValueError(f"no worker task {name!r} (known: {known})") from None


@dataclass(frozen=True)
class Answer:
    """A job's result: ``reason`` is None when it ran within budget; ``header``/``data`` are what it returned."""

    reason: str | None
    header: dict
    data: bytes = b""
    progress: str | None = None  # the last progress note (e.g. the rule running when time ran out)


# ---------------------------------------------------------------- the parent side

class _Worker:
    """One worker process and the job it is running."""

    def __init__(self, memory_bytes: int):
        package_parent = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {package_parent!r}); from bastion_agent.core.budget import worker_main; worker_main()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(memory_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            bufsize=0,  # unbuffered: a message read ahead into a buffer would be invisible to select()
        )
        self.job: list | None = None
        self.deadline = 0.0
        self.progress: str | None = None

    def send(self, job: list, call: Call, seconds: float) -> bool:
        blob = pickle.dumps((call.task.value, call.args), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            view = memoryview(_FRAME.pack(len(blob)) + blob)
            while view:
                view = view[self.process.stdin.write(view):]
        except (BrokenPipeError, OSError):
            return False
        self.job, self.deadline, self.progress = job, time.monotonic() + seconds, None
        return True

    def read_message(self) -> tuple[dict, bytes] | None:
        """One framed answer (header, data), None when the worker is gone."""
        out = self.process.stdout
        head = _read_exact(out, _FRAME.size)
        if head is None:
            return None
        header_bytes = _read_exact(out, _FRAME.unpack(head)[0])
        size = _read_exact(out, _FRAME.size)
        if header_bytes is None or size is None:
            return None
        data = _read_exact(out, _FRAME.unpack(size)[0])
        if data is None:
            return None
        try:
            header = json.loads(header_bytes)
        except ValueError:
            return None
        return (header, data) if isinstance(header, dict) else None

    def kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.process.wait()


def _read_exact(stream, count: int) -> bytes | None:
    chunks, left = [], count
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class WorkerPool:
    """``workers`` processes (default: one per core), started when the first job comes."""

    def __init__(self, budget: Budget, workers: int | None = None):
        self.budget = budget
        self.size = max(1, workers or os.cpu_count() or 1)
        self._workers: list[_Worker] = []
        self.workers_started = 0  # processes started over the pool's life (a work count for tests)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers.clear()

    def run(self, call: Call) -> Answer:
        """One job, waited for."""
        return next(self.ordered([(None, call)]))[1]

    def ordered(self, items: Iterable[tuple[Any, Call | None]]) -> Iterator[tuple[Any, Answer | None]]:
        """``(payload, answer)`` for each ``(payload, call)`` in the order given.

        Items are pulled from ``items`` lazily, at most two per worker ahead
        of the first unanswered one, so the parent holds only a few inputs
        in memory. An item whose call is None passes through (answer None).
        """
        source = iter(items)
        queue: deque[list] = deque()  # [payload, call, answer, started]
        exhausted = False
        while True:
            while not exhausted and sum(1 for job in queue if job[2] is None) < 2 * self.size:
                try:
                    payload, call = next(source)
                except StopIteration:
                    exhausted = True
                    break
                queue.append([payload, call, None if call is not None else _PASS, False])
            while queue and queue[0][2] is not None:
                payload, _, answer, _ = queue.popleft()
                yield payload, (None if answer is _PASS else answer)
            if not queue:
                if exhausted:
                    return
                continue
            self._start_jobs(queue)
            self._collect()

    def _start_jobs(self, queue: deque) -> None:
        for job in queue:
            if job[2] is not None or job[3]:
                continue
            worker = self._idle_worker()
            if worker is None:
                return
            call = job[1]
            if worker.send(job, call, self.budget.seconds_for(call.size)):
                job[3] = True
            else:  # the worker died between jobs: replace it and try again next round
                self._retire(worker)

    def _idle_worker(self) -> _Worker | None:
        for worker in self._workers:
            if worker.job is None:
                return worker
        if len(self._workers) < self.size:
            worker = _Worker(self.budget.memory_bytes)
            self._workers.append(worker)
            self.workers_started += 1
            return worker
        return None

    def _collect(self) -> None:
        """Wait for an answer or a deadline, whichever comes first, and settle it."""
        busy = [worker for worker in self._workers if worker.job is not None]
        if not busy:
            return
        timeout = max(0.0, min(worker.deadline for worker in busy) - time.monotonic())
        with selectors.DefaultSelector() as selector:
            for worker in busy:
                selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
            ready = selector.select(timeout)
        for key, _ in ready:
            self._settle(key.data)
        now = time.monotonic()
        for worker in busy:
            if worker.job is not None and now >= worker.deadline:
                self._finish(worker, Answer(REASON_TIME, {}, progress=worker.progress))
                self._retire(worker)

    def _settle(self, worker: _Worker) -> None:
        message = worker.read_message()
        if message is None:  # died without answering: the kernel or the allocator gave up on it
            self._finish(worker, Answer(REASON_MEMORY, {}, progress=worker.progress))
            self._retire(worker)
            return
        header, data = message
        if "progress" in header:
            worker.progress = str(header["progress"])[:200]
            return
        reason = header.get("costly")
        if reason not in (None, *COSTLY_REASONS):
            reason = REASON_MEMORY
        if reason is None and len(data) > 4 * OUTPUT_MAX_CHARS:  # UTF-8: at most 4 bytes a character
            reason = REASON_OUTPUT
        self._finish(worker, Answer(reason, header if reason is None else {}, data if reason is None else b"",
                                    progress=worker.progress))
        if header.get("retire"):
            self._retire(worker)

    @staticmethod
    def _finish(worker: _Worker, answer: Answer) -> None:
        worker.job[2] = answer
        worker.job = None

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        self._workers.remove(worker)


_PASS = object()


class KeptPool(WorkerPool):
    """A pool whose workers outlive the stage that used it: the watcher keeps one between its cycles.

    Starting a worker (a Python process that then imports the readers or
    the sanitizer) was most of a watch cycle that read one changed file.
    A stage uses this pool as any other (``with pool:``): leaving the block
    normally keeps the workers, idle and blocked on their pipe; leaving it by
    an exception ends them, since a job of theirs may still be running.
    ``close()`` ends them too (the next job starts new ones). Each worker
    keeps the memory limit it started with, so a pool serves one ``Budget``
    only (``pool_for``).
    """

    def __init__(self, budget: Budget, workers: int | None = None):
        super().__init__(budget, workers)
        self.last_used = time.monotonic()

    def __exit__(self, exc_type, *exc) -> None:
        self.last_used = time.monotonic()
        if exc_type is not None:
            self.close()


def pool_for(budget: Budget, kept: "KeptPool | None" = None, workers: int | None = None) -> WorkerPool:
    """``kept`` when it serves ``budget`` (and ``workers`` asks for no other size), else a pool of one run."""
    if kept is not None and kept.budget == budget and (workers is None or max(1, workers) == kept.size):
        return kept
    return WorkerPool(budget, workers)


# ---------------------------------------------------------------- the worker side

def worker_main() -> None:
    """The worker's loop: lower the memory limit, then answer jobs until stdin closes."""
    memory = int(sys.argv[1])
    _limit_memory(memory)
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # a stray print from a library must not corrupt the answers
    while True:
        head = _read_exact(requests, _FRAME.size)
        if head is None:
            return
        blob = _read_exact(requests, _FRAME.unpack(head)[0])
        if blob is None:
            return
        task, args = pickle.loads(blob)

        def note(text: str) -> None:
            _send(answers, {"progress": text}, b"")

        retire = False
        try:
            header, data = task_function(task)(note, *args)
        except MemoryError:
            header, data, retire = {"costly": REASON_MEMORY}, b"", True
        except RecursionError:
            header, data = {"error": "recursion"}, b""
        if retire:
            header["retire"] = True
        try:
            _send(answers, header, data)
        except MemoryError:
            _send(answers, {"costly": REASON_MEMORY, "retire": True}, b"")
        if retire:
            return


def budget_of(source) -> Budget:
    """The per-file budget ``[source]`` asks for (the defaults above when it says nothing)."""
    return Budget(seconds=getattr(source, "budget_seconds", Budget.seconds),
                  memory_mb=getattr(source, "budget_memory_mb", Budget.memory_mb))


def _limit_memory(memory: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory if hard == resource.RLIM_INFINITY else min(memory, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _send(stream, header: dict, data: bytes) -> None:
    header_bytes = json.dumps(header).encode("utf-8")
    stream.write(_FRAME.pack(len(header_bytes)) + header_bytes + _FRAME.pack(len(data)))
    stream.write(data)
    stream.flush()


def _task_call(note, module: str, name: str, *args) -> tuple[dict, bytes]:
    """A named function of this package (tests, benches): its JSON-able result, or a string as data."""
    import importlib

    if not module.startswith("bastion_agent."):
        raise ValueError("only this package's functions run in a worker")
    result = getattr(importlib.import_module(module), name)(*args)
    if isinstance(result, str):
        return {}, result.encode("utf-8", "surrogatepass")
    return {"result": result}, b""


# Where each task's function lives: next to the code it runs (this module
# knows no reader or sanitizer, which sit in parts above it), imported in
# the worker on first use. Every ``Task`` has an entry, and
# ``core/test_budget.py`` imports each one.
_TASK_FUNCTIONS: dict[Task, tuple[str, str]] = {
    Task.CALL: (__name__, "_task_call"),
    Task.READ: ("bastion_agent.extracting.reading", "budget_task_read"),
    Task.REDACT: ("bastion_agent.sanitizing.sanitize", "budget_task_redact"),
}
_LOADED: dict[Task, Any] = {}


def task_function(name: "Task | str"):
    """The function that runs ``name``, imported on first use."""
    task = task_named(name)
    if task not in _LOADED:
        import importlib

        module, attribute = _TASK_FUNCTIONS[task]
        _LOADED[task] = getattr(importlib.import_module(module), attribute)
    return _LOADED[task]
