"""Progress of long stages on stderr: shown on a terminal, silent otherwise.

A stage counts what it does (documents, chunks, batches) with ``advance``.
The line appears as soon as the stage starts (a first batch of a slow model
can take half a minute), is redrawn by a timer at least every
``TICK_SECONDS`` even when nothing advanced (the elapsed time moves, so it
never looks frozen), and at most every ``REDRAW_SECONDS`` when counts move
fast. ``note`` adds what the count leaves out (embed: the windows reused
from earlier runs). The rate is measured over the last
``RATE_WINDOW_SECONDS`` (a moving rate: a machine that got busy, or a tuner
that found a better batch, shows in a minute, not at the end); the ETA is a
range around it (``eta_range``), as wide as the rate has been unsteady.
``close`` ends with a done line; a stage that stops on an error or Ctrl-C
ends with its last state instead, never "done" (a line that said "embed: done,
32/168" before "interrupted" misled its reader). When stderr is not a
terminal (CI, a pipe, a log file), or ``--quiet`` was given, nothing is
written here: the stage's one summary line (``stage_lines``) says what it did.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
import time
from typing import Callable, TextIO

REDRAW_SECONDS = 0.2
TICK_SECONDS = 1.0
RATE_WINDOW_SECONDS = 60.0

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress line, whatever stderr is."""
    global _quiet
    _quiet = bool(quiet)


class Progress:
    """A single progress line for ``label``, counting ``unit``.

    ``tick_seconds`` of None starts no timer (tests call ``tick`` themselves).
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "items",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        note: str = "",
        tick_seconds: float | None = TICK_SECONDS,
    ):
        self.label = label
        self.total = total
        self.unit = unit
        self.note = note
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.enabled = not _quiet and _is_terminal(self.stream)
        self.done = 0
        self.started = clock()
        self._drawn_at = self.started
        self._samples: collections.deque[tuple[float, int]] = collections.deque()  # (time, done) at each advance
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = None
        if self.enabled:
            self._draw(self.started)  # at once: the stage has started
            if tick_seconds:
                self._timer = threading.Thread(target=self._tick_loop, args=(tick_seconds,), daemon=True,
                                               name=f"progress-{label}")
                self._timer.start()

    def advance(self, count: int = 1) -> None:
        with self._lock:
            self.done += count
            now = self.clock()
            self._samples.append((now, self.done))
            if self.enabled and not self._closed.is_set() and now - self._drawn_at >= REDRAW_SECONDS:
                self._draw(now)

    def say(self, text: str) -> None:
        """One line of its own on the stream (``embed``'s estimate): above the progress line on a terminal,
        plainly elsewhere; nothing with ``--quiet``."""
        with self._lock:
            if _quiet or self._closed.is_set():
                return
            if self.enabled:
                self.stream.write("\r\x1b[2K" + text + "\n")
                self._draw(self.clock())
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def tick(self) -> None:
        """Redraw now (the timer's job): the elapsed time and the rate move even without progress."""
        with self._lock:
            if self.enabled and not self._closed.is_set():
                self._draw(self.clock())

    def close(self, finished: bool = True) -> None:
        """Stop the timer and end with the done line (``finished``), or with the last state, left as it stood."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            if self.enabled:
                now = self.clock()
                self.stream.write("\r\x1b[2K" + (self.done_line(now) if finished else self.line(now)) + "\n")
                self.stream.flush()
        if self._timer is not None:
            self._timer.join()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(finished=exc_type is None)

    def rate(self, now: float) -> float:
        """Units per second over the last ``RATE_WINDOW_SECONDS`` (since the start while younger)."""
        limit = now - RATE_WINDOW_SECONDS
        while len(self._samples) > 1 and self._samples[1][0] <= limit:
            self._samples.popleft()
        since, base = (self._samples[0] if self._samples and self._samples[0][0] <= limit else (self.started, 0))
        return (self.done - base) / max(now - since, 1e-9)

    def working_rate(self, now: float, rate: float) -> float:
        """The rate an ETA extrapolates: in the first minute, counted from the first advance rather than the
        start, so the warm-up before it (a probe, the model's first load) does not stretch every estimate."""
        if now - self.started >= RATE_WINDOW_SECONDS or len(self._samples) < 2:
            return rate
        first_time, first_done = self._samples[0]
        if now <= first_time or self.done <= first_done:
            return rate
        return (self.done - first_done) / (now - first_time)

    def line(self, now: float) -> str:
        """The text of the progress line at time ``now``."""
        elapsed = max(now - self.started, 1e-9)
        rate = self.rate(now)
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        text = f"{self.label}: {count} {self.unit}" + (f" ({self.note})" if self.note else "")
        text += f"  {rate:.1f} {self.unit}/s  {_duration(elapsed)}"
        if self.total is not None and rate > 0 and self.done < self.total:
            soonest, latest = eta_range(self.total - self.done, self.working_rate(now, rate), self.done / elapsed)
            text += f"  ETA {_duration(soonest)}-{_duration(latest)}"
        return text

    def done_line(self, now: float) -> str:
        """The last line: how many, and how long it took."""
        elapsed = max(now - self.started, 0.0)
        count = f"{self.done}/{self.total}" if self.total is not None and self.done != self.total else f"{self.done}"
        return (f"{self.label}: done, {count} {self.unit}" + (f" ({self.note})" if self.note else "")
                + f" in {_duration(elapsed)}")

    def _draw(self, now: float) -> None:
        self._drawn_at = now
        self.stream.write("\r\x1b[2K" + self.line(now))
        self.stream.flush()

    def _tick_loop(self, seconds: float) -> None:
        while not self._closed.wait(seconds):
            self.tick()


MIN_SPREAD = 0.10  # an ETA range is never narrower than +-10% of its middle: batches vary
MAX_SPREAD = 0.30  # nor wider than +-30%: a range that says nothing is no estimate


def eta_range(left: int, moving: float, overall: float) -> tuple[float, float]:
    """``(soonest, latest)`` seconds for ``left`` units, from the throughput measured so far.

    The middle is the moving rate (the last minute: a machine that got busy
    shows at once); the range widens with how far that rate is from the
    whole run's (``overall``): a steady run gets +-10%, a run whose speed
    changes up to +-30%. One number promised more than a loaded machine keeps
    (a single ETA was off by 1.1-3.2x on a 94-file folder).
    """
    gap = abs(moving - overall) / max(moving, overall, 1e-9)
    spread = min(MAX_SPREAD, MIN_SPREAD + gap)
    return left / (moving * (1 + spread)), left / (moving * (1 - spread))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# C0 controls but tab and newline, DEL, C1 controls (0x9b is CSI on its own),
# and the bidirectional overrides and isolates.
_UNSAFE_ON_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def for_terminal(text: str) -> str:
    """``text`` (a file's name, a window of its text) safe to print on a terminal.

    What a file holds is the attacker's: printed raw, an escape sequence in
    a name or a window sets the terminal's title, clears the lines printed
    before it, writes the clipboard (OSC 52) or, with bidi controls, shows
    characters in another order than they are. Each such character is
    shown as its escape (``\\x1b``, ``\\u202e``) instead.
    """
    return _UNSAFE_ON_TERMINAL.sub(lambda match: _escaped(match.group(0)), text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# In a name every control character is escaped, line breaks and tabs too:
# a file named "a.txt\n2. relevance 99  ops/keys.txt" printed raw forges a
# result line of ``search``, and a JSON reader, the serve page or an MCP
# client shows it as two lines as well. Also the other invisible or
# reordering characters of Unicode's format class (zero-width, bidi marks)
# and the line and paragraph separators.
_UNSAFE_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def escape_name(name: str) -> str:
    """A file or folder name (already decoded, already sanitized) as every output shows it:
    each control or invisible character as its escape (``\\x0a``, ``\\u202e``)."""
    return _UNSAFE_IN_NAME.sub(lambda match: _escaped(match.group(0)), name)

