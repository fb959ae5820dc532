#!/usr/bin/env python3
"""Can a token holder flush the audit log? A flood of searches with one token against serve.

The finding: a token holder sent 9,500 searches in 91 s, all answered, until
rotation (10 MiB x 5 files) pushed its own earlier record out. Here one
token (serve's, which sees every document) searches as fast as 8 client threads can for ``--seconds`` on a
small store served in process (the loopback stub as model server), after
one search of its own that it would like gone. Printed:

- how many searches were answered (200) and refused (429), and the rate
  answered past the burst against the manifest's ``searches_per_minute``;
- the audit log's bytes per record, and from that how long this rate would
  take to fill the log (``(KEEP + 1) x MAX_BYTES``) so that rotation drops
  the first record: the flush time;
- whether the first record is still in the log, and whether rotation noted
  any drop.

Usage: python3 bench/access/audit_flood.py [--seconds 10] [--clients 8]
Prints JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import secrets  # noqa: E402

from bastion_agent.core import audit  # noqa: E402
from bastion_agent.testing.serve_store import Store, request, start  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402


class Holder:
    """What ``serve_store.start`` needs of a test case: a place for the log and cleanups."""

    def __init__(self):
        self.cleanups = []

    def addCleanup(self, function, *args):  # noqa: N802 (unittest's name)
        self.cleanups.append((function, args))

    def close(self):
        for function, args in reversed(self.cleanups):
            function(*args)


def flood(url: str, token: str, seconds: float, clients: int) -> dict:
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    path = "/search?" + urllib.parse.urlencode({"q": "the bread and the budget", "k": 5, "mode": "keyword"})

    def one_client(_):
        while time.monotonic() < stop:
            status = request(url, path=path, headers={"Authorization": f"Bearer {token}"})[0]
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1

    started = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, range(clients)))
    return {"seconds": round(time.monotonic() - started, 2), "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    holder = Holder()
    with tempfile.TemporaryDirectory() as folder, StubServer() as stub:
        store = Store(Path(folder), stub)
        token = secrets.token_urlsafe(32)  # serve's token: a caller who sees every document, and is limited
        running = start(store, holder, token=token)
        try:
            own = request(running.url, path="/search?q=violin&k=1", headers={"Authorization": f"Bearer {token}"})
            first = next(audit.read_records(store.layout.audit_log))
            result = flood(running.url, token, args.seconds, args.clients)
        finally:
            holder.close()
        records = [row for row in audit.read_records(store.layout.audit_log) if row]
        limits = store.manifest().serve_limits
        answered = result["statuses"].get("200", 0)
        per_record = store.layout.audit_log.stat().st_size / max(1, len(records))
        # past the burst (the own search took one of it), what the flood got recorded per second
        rate = max(0, answered + 1 - limits.search_burst) / result["seconds"]
        capacity = (audit.KEEP + 1) * audit.MAX_BYTES
        print(json.dumps({
            "own_search_status": own[0],
            "flood": result,
            "sustained_per_minute": round(rate * 60, 1),
            "limit": {"searches_per_minute": limits.searches_per_minute, "search_burst": limits.search_burst},
            "bytes_per_record": round(per_record, 1),
            "log_capacity_mb": capacity / (1 << 20),
            "flush_hours_at_this_rate": round(capacity / per_record / rate / 3600, 1) if rate else None,
            "flush_hours_at_the_limit": round(capacity / per_record / (limits.searches_per_minute / 60) / 3600, 1),
            "before_finding_seconds": 91,
            "own_record_kept": records[0] == first,
            "drops_noted": len(list(audit.read_drops(store.layout.audit_log))),
        }, indent=2))


if __name__ == "__main__":
    main()
