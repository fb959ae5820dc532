"""Progress of long stages on stderr: shown on a terminal, silent otherwise.

A stage counts what it does (documents, chunks, batches) with ``advance``;
the line is redrawn at most a few times a second with the rate and, when the
total is known, an ETA. When stderr is not a terminal (CI, a pipe, a log
file) nothing at all is written, so logs stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

REDRAW_SECONDS = 0.2


class Progress:
    """A single progress line for ``label``, counting ``unit``."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "items",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.enabled = _is_terminal(self.stream)
        self.done = 0
        self.started = clock()
        self._drawn_at = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = self.clock()
        if self.enabled and now - self._drawn_at >= REDRAW_SECONDS:
            self._drawn_at = now
            self._draw(now)

    def close(self) -> None:
        """Draw the final figures and end the line."""
        if self.enabled:
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self, now: float) -> str:
        """The text of the progress line at time ``now``."""
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        text = f"{self.label}: {count} {self.unit}  {rate:.1f} {self.unit}/s"
        if self.total is not None and rate > 0 and self.done < self.total:
            text += f"  ETA {_duration((self.total - self.done) / rate)}"
        return text

    def _draw(self, now: float) -> None:
        self.stream.write("\r\x1b[2K" + self.line(now))
        self.stream.flush()


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
