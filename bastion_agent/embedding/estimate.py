"""The line before the wait: windows to embed, the rate of the first batches, the time it will take.

An ordinary 11 MB folder cut into 25,841 windows took about 4 hours on a
loaded 2-core machine, and nothing said so before ``embed``
started. So after the first few batches the stage says, once, how many windows
are left, the rate those batches were embedded at, and the expected time;
when that is hours it adds the fix: a model server on a GPU (any machine
with one, reached through ``EMBED_URL``). A run short enough that the
progress line alone tells it (under ``MIN_SECONDS``) gets no such line.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_BATCHES = 3  # batches measured before the estimate (the first one includes the server's warm-up)
MIN_SECONDS = 60.0  # expected time below which no estimate is printed: the progress line is enough
HOURS = 3600.0
GPU_HINT = ("a model server on a GPU is the fix: on a machine with one, run `ollama serve` "
            "(then `ollama pull` the manifest's model) and set EMBED_URL=http://THAT-HOST:11434 here "
            "(through an ssh tunnel to a loopback port)")


@dataclass
class FirstBatches:
    """Measures the first batches of a run and gives the one estimate line, once."""

    total: int
    batches: int = 0
    windows: int = 0
    seconds: float = 0.0
    said: bool = False

    def record(self, windows: int, seconds: float, in_flight: int, done: int) -> str | None:
        """Count one committed batch; the estimate line when it is due (once), else None."""
        if self.said or not seconds or seconds <= 0:
            return None
        self.batches += 1
        self.windows += windows
        self.seconds += seconds / max(1, in_flight)  # c requests in flight complete c batches per request time
        if self.batches < FIRST_BATCHES:
            return None
        self.said = True
        return line(self.total - done, self.windows / self.seconds if self.seconds else 0.0)


def line(left: int, rate: float) -> str | None:
    """``embed: N windows to embed at R windows/s (the first batches): about T``, or None when short."""
    if left <= 0 or rate <= 0:
        return None
    expected = left / rate
    if expected < MIN_SECONDS:
        return None
    text = f"embed: {left} windows to embed at {rate:.1f} windows/s (measured on the first batches): about {duration(expected)}"
    if expected >= HOURS:
        text += f"; {GPU_HINT}"
    return text


def duration(seconds: float) -> str:
    minutes = int(seconds / 60 + 0.5)
    if minutes < 60:
        return f"{max(1, minutes)} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
