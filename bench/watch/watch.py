"""How current `watch` keeps a folder, on real text: prints JSON figures.

    python3 bench/watch/watch.py [--files 100] [--changes 10] [--idle-files 10000] [--idle-seconds 30] [--rate 20]
                           [--only first|change|change-model|change-serve|eta|idle]

Real prose: the Cranfield collection (../shared/data/ir/cranfield/docs, read
in place; the bench's folders are temporary copies, never in the repo).
The model server is the loopback stub, slowed to ``--rate`` windows per
second, so that embedding takes the time a small model on a laptop CPU
takes and "searchable before the last vector" means something.

- ``first_keyword``: on a new folder of ``--files`` files, the seconds from
  starting `watch` to the first keyword answer that finds a word of the
  folder, against the seconds of its whole first cycle (every vector);
- ``change_to_searchable``: a one-page file written while `watch` runs
  (inotify, default debounce), seconds until keyword search finds its
  unique word, and until vector search does; p50 and p95 of ``--changes``;
- ``change_to_searchable_model``: the same with the embedded model
  (``model-server``, multilingual-e5-small: the ``model`` extra, as ``demo``
  starts it) instead of the slowed stub, so the vector figure is a real
  model's;
- ``change_to_searchable_serve_watch``: the same file written while
  ``serve --watch`` runs (stub), until ``GET /search`` finds it by keyword;
- ``eta``: during an embed, the range `Progress` would show once 5% of the
  windows are done (``progress.eta_range`` over the moving and the overall
  rate, sampled from vectors.db's committed batches), the actual end, and
  whether it fell inside;
- ``idle``: CPU (% of one core) and resident memory of an idle watcher over
  ``--idle-files`` files, through inotify and through polling at the default
  interval, over ``--idle-seconds``; resident memory at its start and end
  (bounded: the end is not above the start by more than noise).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent import embed  # noqa: E402
from bastion_agent.config import manifest as manifests  # noqa: E402
from bastion_agent.core import progress  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.testing.stub_server import StubServer  # noqa: E402

# beside the repository (../shared/data), or beside the folder of worktrees that holds it
SHARED = Path(os.environ.get("BASTION_SHARED_DATA") or next(
    (folder for folder in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data") if folder.is_dir()),
    REPO.parent / "shared" / "data"))
CRANFIELD = SHARED / "ir" / "cranfield" / "docs"
MANIFEST = ('[source]\nroot = "docs"\n[embed]\nmodel = "stub-model"\ndim = 64\n'
            '[embed.chunk]\nsize_tokens = 128\noverlap_tokens = 16\n')
# the embedded model, with the prefixes its examples/sample.toml gives it
MODEL_MANIFEST = ('[source]\nroot = "docs"\n[embed]\nmodel = "multilingual-e5-small"\ndim = 384\n'
                  'query_prefix = "query: "\npassage_prefix = "passage: "\n'
                  '[embed.chunk]\nsize_tokens = 128\noverlap_tokens = 16\n')


class SlowStub(StubServer):
    """The stub, answering at ``rate`` texts per second (as a model on a CPU would)."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate

    def record(self, path, body):
        super().record(path, body)
        time.sleep(len(self.by_path[path].texts(body)) / self.rate)


def make_folder(base: Path, files: int, extra: str = "", manifest: str = MANIFEST) -> Path:
    docs = base / "docs"
    docs.mkdir(parents=True)
    sources = sorted(CRANFIELD.glob("*.txt"), key=lambda p: int(p.stem))
    for number in range(files):
        shutil.copyfile(sources[number % len(sources)], docs / f"{number}.txt")
    (base / "bastion.toml").write_text(manifest + extra, encoding="utf-8")
    return base / "bastion.toml"


def start_watch(manifest: Path, url: str, *extra: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
    env.update(EMBED_URL=url, PYTHONPATH=str(REPO), EMBED_BATCH="8")
    return subprocess.Popen([sys.executable, "-m", "bastion_agent", "watch", str(manifest), *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=REPO)


def wait_line(process: subprocess.Popen, prefix: str) -> str:
    while True:
        line = process.stderr.readline()
        if not line:
            raise RuntimeError("watch ended")
        if line.startswith(prefix):
            return line.strip()


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()


def finds(manifest, layout: Layout, word: str, mode: str, url: str) -> bool:
    """Whether a search finds ``word`` (a store not made yet finds nothing). For vector search: whether the
    window holding it has its vector (the stub's 64-dimensional bag of words ranks by hashed buckets, so
    a one-word query is no test of the ranking; what the latency measures is when the vector exists)."""
    if not layout.vectors_db.exists():
        return False
    if mode == "vector":
        return _has_vector(layout, word)
    os.environ["EMBED_URL"] = url
    try:
        hits = embed.answer(manifest, layout, word, 3, mode=mode).hits
    except Exception:  # a store being created: not yet
        return False
    return any(word in hit.text for hit in hits)


def until(condition, limit: float = 600.0, step: float = 0.1) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit:
            raise RuntimeError("timed out")
        time.sleep(step)
    return time.monotonic() - started


def first_keyword(base: Path, files: int, rate: float) -> dict:
    manifest_path = make_folder(base, files)
    manifest = manifests.load(manifest_path)
    layout = Layout.for_manifest(manifest_path, None)
    word = next(w for w in (base / "docs" / "0.txt").read_text().split() if len(w) > 6 and w.isalpha())
    with SlowStub(rate) as stub:
        started = time.monotonic()
        process = start_watch(manifest_path, stub.url)
        keyword = until(lambda: finds(manifest, layout, word, "keyword", stub.url))
        wait_line(process, "watch: cycle 1")
        whole = time.monotonic() - started
        stop(process)
    return {"files": files, "first_keyword_seconds": round(keyword, 2), "whole_cycle_seconds": round(whole, 2),
            "ratio": round(keyword / whole, 3)}


def change_to_searchable(base: Path, files: int, changes: int, rate: float, embedded: bool = False) -> dict:
    """A one-page file written while `watch` runs: until keyword search finds it, and until it has a vector.

    ``embedded``: the embedded model server (the ``model`` extra) instead of
    the slowed stub.
    """
    manifest_path = make_folder(base, files, manifest=MODEL_MANIFEST if embedded else MANIFEST)
    manifest = manifests.load(manifest_path)
    layout = Layout.for_manifest(manifest_path, None)
    page = (CRANFIELD / "1.txt").read_text()
    keyword, vector = [], []
    if embedded:
        from bastion_agent.commands.demo import BackgroundModelServer

        server = BackgroundModelServer(manifest.embed.model)
    else:
        server = SlowStub(rate)
    with server as stub:
        process = start_watch(manifest_path, stub.url)
        wait_line(process, "watch: cycle 1")
        for number in range(changes):
            word = f"zq{number}x{os.getpid()}"
            started = time.monotonic()
            (base / "docs" / f"new{number}.txt").write_text(f"{word} {page}", encoding="utf-8")
            keyword.append(until(lambda: finds(manifest, layout, word, "keyword", stub.url), step=0.05))
            vector.append(until(lambda: finds(manifest, layout, word, "vector", stub.url), step=0.05) + keyword[-1])
            wait_line(process, "watch: cycle")
        stop(process)
    return {"changes": changes, "debounce_seconds": manifest.watch.debounce_seconds,
            "model": manifest.embed.model if embedded else f"stub at {rate:g} windows/s",
            "keyword_p50": round(statistics.median(keyword), 2), "keyword_p95": round(_p95(keyword), 2),
            "vector_p50": round(statistics.median(vector), 2), "vector_p95": round(_p95(vector), 2)}


def change_over_http(base: Path, files: int, changes: int, rate: float) -> dict:
    """The same one-page file, written while ``serve --watch`` runs: until its keyword answer comes over HTTP."""
    import urllib.parse
    import urllib.request

    manifest_path = make_folder(base, files)
    manifest = manifests.load(manifest_path)
    page = (CRANFIELD / "1.txt").read_text()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    keyword = []
    with SlowStub(rate) as stub:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
        env.update(EMBED_URL=stub.url, PYTHONPATH=str(REPO), EMBED_BATCH="8")
        process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "serve", str(manifest_path), "--watch",
                                    "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   cwd=REPO)
        url = process.stdout.readline().split()[2]
        wait_line(process, "watch: cycle 1")

        def found(word: str) -> bool:
            query = urllib.parse.urlencode({"q": word, "mode": "keyword", "k": 3})
            with opener.open(f"{url}search?{query}", timeout=30) as answer:
                return any(word in hit["text"] for hit in json.load(answer)["hits"])

        for number in range(changes):
            word = f"zq{number}x{os.getpid()}"
            started = time.monotonic()
            (base / "docs" / f"new{number}.txt").write_text(f"{word} {page}", encoding="utf-8")
            keyword.append(until(lambda: found(word), step=0.05))
            wait_line(process, "watch: cycle")
        stop(process)
    return {"changes": changes, "debounce_seconds": manifest.watch.debounce_seconds,
            "model": f"stub at {rate:g} windows/s", "keyword_over_http_p50": round(statistics.median(keyword), 2),
            "keyword_over_http_p95": round(_p95(keyword), 2)}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def eta(base: Path, files: int, rate: float) -> dict:
    """The range shown after 5% of the windows, and where the end fell."""
    manifest_path = make_folder(base, files)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EMBED_", "BASTION_"))}
    with SlowStub(rate) as stub:
        env.update(EMBED_URL=stub.url, PYTHONPATH=str(REPO), EMBED_BATCH="8")
        for stage in ("extract", "sanitize", "chunk"):
            subprocess.run([sys.executable, "-m", "bastion_agent", stage, str(manifest_path), "--quiet"], env=env,
                           cwd=REPO, check=True)
        layout = Layout.for_manifest(manifest_path, None)
        total = sum(1 for _ in layout.chunks_path.open())
        process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "embed", str(manifest_path), "--quiet"],
                                   env=env, cwd=REPO)
        started, shown, first = time.monotonic(), None, None
        samples: collections.deque = collections.deque()
        while process.poll() is None:
            done = _vectors(layout)
            now = time.monotonic()
            samples.append((now, done))
            while len(samples) > 1 and samples[1][0] <= now - progress.RATE_WINDOW_SECONDS:
                samples.popleft()
            if done and first is None:
                first = (now, done)  # the first committed batch: Progress.working_rate counts from it
            if shown is None and done >= 0.05 * total and first is not None and now > first[0] and done > first[1]:
                young = now - started < progress.RATE_WINDOW_SECONDS
                base = first if young else samples[0]
                moving = (done - base[1]) / (now - base[0])
                overall = done / (now - started)
                if moving > 0:
                    soonest, latest = progress.eta_range(total - done, moving, overall)
                    shown = (now - started, soonest, latest)
            time.sleep(0.2)
        ended = time.monotonic() - started
    if shown is None:
        return {"windows": total, "error": "finished before 5% could be measured"}
    at, soonest, latest = shown
    actual = ended - at
    middle = (soonest + latest) / 2
    return {"windows": total, "shown_at_seconds": round(at, 1), "range_seconds": [round(soonest, 1), round(latest, 1)],
            "actual_seconds": round(actual, 1), "inside": soonest <= actual <= latest,
            "half_width_of_middle": round((latest - soonest) / 2 / middle, 3)}


def _has_vector(layout: Layout, word: str) -> bool:
    try:
        with sqlite3.connect(f"file:{layout.vectors_db}?mode=ro", uri=True) as db:
            return db.execute("SELECT 1 FROM chunks c JOIN vectors v ON v.chunk_id = c.chunk_id WHERE instr(c.text, ?)"
                              " LIMIT 1", (word,)).fetchone() is not None
    except sqlite3.Error:
        return False


def _vectors(layout: Layout) -> int:
    try:
        with sqlite3.connect(f"file:{layout.vectors_db}?mode=ro", uri=True) as db:
            return db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
    except sqlite3.Error:
        return 0


def idle(base: Path, files: int, seconds: float, polling: bool) -> dict:
    docs = base / "docs"
    docs.mkdir(parents=True)
    lines = [line for path in sorted(CRANFIELD.glob("*.txt"))[:400] for line in path.read_text().splitlines() if line.strip()]
    for number in range(files):
        folder = docs / f"d{number // 500}"
        folder.mkdir(exist_ok=True)
        (folder / f"{number}.txt").write_text(lines[number % len(lines)] + f" n{number}\n", encoding="utf-8")
    manifest_path = base / "bastion.toml"
    manifest_path.write_text(MANIFEST, encoding="utf-8")
    with StubServer() as stub:
        process = start_watch(manifest_path, stub.url, *(["--polling"] if polling else []))
        wait_line(process, "watch: cycle 1")
        time.sleep(2)
        cpu0, wall0, rss0 = _cpu(process.pid), time.monotonic(), _rss_mb(process.pid)
        peak = rss0
        while time.monotonic() - wall0 < seconds:  # a look at /proc every 10 s: the bench's own cost, not the watcher's
            time.sleep(min(10.0, max(0.0, seconds - (time.monotonic() - wall0))))
            peak = max(peak, _rss_mb(process.pid))
        cpu1, wall1 = _cpu(process.pid), time.monotonic()
        rss = _rss_mb(process.pid)
        stop(process)
    return {"files": files, "source": "polling (default interval)" if polling else "inotify",
            "seconds": seconds, "cpu_percent_of_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2),
            "rss_mb_start": rss0, "rss_mb": rss, "rss_mb_peak": peak}


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--eta-files", type=int, default=400, help="files of the ETA run (about 2 windows each)")
    parser.add_argument("--idle-files", type=int, default=10000)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=20.0, help="windows per second the slowed stub embeds")
    parser.add_argument("--only", choices=("first", "change", "change-model", "change-serve", "eta", "idle"),
                        action="append")
    args = parser.parse_args()
    only = set(args.only or ("first", "change", "change-model", "change-serve", "eta", "idle"))
    result = {"rate_windows_per_second": args.rate}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if "first" in only:
            result["first_keyword"] = first_keyword(base / "first", args.files, args.rate)
        if "change" in only:
            result["change_to_searchable"] = change_to_searchable(base / "change", args.files, args.changes, args.rate)
        if "change-serve" in only:
            result["change_to_searchable_serve_watch"] = change_over_http(base / "change-serve", args.files,
                                                                          args.changes, args.rate)
        if "change-model" in only:
            result["change_to_searchable_model"] = change_to_searchable(base / "change-model", args.files,
                                                                        args.changes, args.rate, embedded=True)
        if "eta" in only:
            result["eta"] = eta(base / "eta", args.eta_files, args.rate)
        if "idle" in only:
            result["idle"] = [idle(base / "idle-inotify", args.idle_files, args.idle_seconds, False),
                              idle(base / "idle-polling", args.idle_files, args.idle_seconds, True)]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
