"""How fast a token may search: one token bucket per caller name, refused with 429 and ``Retry-After`` when spent.

Every search is one audit record, and the log is rotated by size: a token
holder searching without limit could push its own earlier records out of
the oldest file (9,500 searches in 91 s did). The bucket holds
``search_burst`` searches and refills at ``searches_per_minute``; at the
default 120 a minute, filling the six 10 MiB files takes days, and the
rotation that drops records younger than the retention period says so
(core/audit.py).

Only callers named by a token are limited: the local user (a loopback serve
without tokens, stdio MCP) owns the audit log's files and could delete them
anyway. A refused search does no work and writes no record.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from bastion_agent.serving.request_error import RequestError


@dataclass
class Bucket:
    """One caller's searches left (fractional while refilling) as of ``at`` (the clock's seconds)."""

    left: float
    at: float


class SearchLimits:
    """Per-caller token buckets; ``take(name)`` spends one search or raises ``RequestError(429)``."""

    def __init__(self, per_minute: int, burst: int, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = lambda line: None):
        self.rate = per_minute / 60.0
        self.burst = burst
        self.clock = clock
        self.log = log
        self._buckets: dict[str, Bucket] = {}  # one per token name: as many as the tokens file names
        self._refused: set[str] = set()  # callers told 429 since their last answered search (logged once)
        self._lock = threading.Lock()

    def take(self, name: str) -> None:
        with self._lock:
            now = self.clock()
            bucket = self._buckets.get(name)
            if bucket is None:
                bucket = self._buckets[name] = Bucket(float(self.burst), now)
            bucket.left = min(float(self.burst), bucket.left + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.left >= 1.0:
                bucket.left -= 1.0
                self._refused.discard(name)
                return
            wait = max(1, math.ceil((1.0 - bucket.left) / self.rate - 1e-9))  # 20.0000001 s is 20
            first = name not in self._refused
            self._refused.add(name)
        if first:
            self.log(f"bastion_agent serve: {name} spent its searches ({self.burst} at once, "
                     f"{round(self.rate * 60)} a minute); refused with 429 until it slows down")
        raise RequestError(429, f"too many searches for this token ({round(self.rate * 60)} a minute, "
                                f"{self.burst} at once); try again in {wait} s", {"Retry-After": str(wait)})
