#!/usr/bin/env python3
"""Whether a search's time says how many hidden windows hold the word searched, before and after, in one run.

The store is ``bench/_realtext.py``'s real prose. Its documents are labelled
here: every document that holds the real word ``W`` (the first with between
``--hidden`` and twice as many windows, a hidden share under half of the
store) is ``hr``, except the one that holds it in the fewest windows, which
stays ``public`` with everything else. So a ``public`` caller sees ``W`` in a
few windows (``k``) while about ``--hidden`` windows it may not see hold it
too. The control word ``C`` is a real word that exactly ``k`` windows hold,
all of them ``public``: for that caller the two words differ only in the
hidden windows.

Figures (p50 over interleaved W and C queries, so the machine's drift falls
on both alike; each a ratio measured in the same run):

- ``in_process``: ``SearchIndex.search`` for the ``public`` caller, keyword,
  hybrid and vector (k = 10), ratio W / C;
- ``mcp_fetch_hidden_vs_absent``: MCP ``fetch`` (``BastionTools.fetch``) of
  a hidden window's id against an absent id, ratio;
- ``http_named_token``: ``GET /search`` through ``serve`` with a named token
  of group ``public`` (keyword, hybrid, vector), ratio W / C;
- ``every_group_p50_ms``: the same real questions (SciFact's and
  Cranfield's) asked with every group (``none``: no filter) and by a named
  caller whose groups label every document (``named_all``), per mode; and
  ``every_group_after_over_before``, this tree's p50 over the tree before's;
- ``cold_keyword_public_p50_ms``: a freshly loaded index's first keyword
  search by the ``public`` caller (what a one-off CLI search, or serve and
  MCP at their first such search, pay): it builds the caller's filter, and
  the reader sets' keyword indexes unless the store keeps them
  (``embedding/reader_sets.py``, refreshed here as embed does after the
  store is labelled); ``cold_over_warm``: that over the warm index's p50 of
  the same search;
- ``cold_dated_every_group_p50_ms``: a freshly loaded index's first dated
  keyword search with every group (no filter), which before this tree built
  every reader set's keyword index; after, it reads ``chunks_fts``.

Each figure is taken for both trees: ``--before`` (default ``/work/main``;
any tree of the code before, e.g. ``git archive BASE | tar -x -C DIR``) and
this repository, each in its own worker process, both up side by side and
asked in turn, on the same store. Both must know the store's schema: a
newer tree migrates ``vectors.db`` and the older cannot open it again
(rebuild the store then: remove ``DIR/WINDOWS``).

Usage: python3 bench/access/access_timing.py --keep /tmp/access-timing [--windows 20000] [--hidden 3000] [--queries 60]
Needs numpy. Prints JSON on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODES = ("keyword", "hybrid", "vector")
PUBLIC = frozenset({"public"})
BOTH = frozenset({"public", "hr"})
SHARED_DATA = "/work/shared/data"  # the questions; a worktree's ../shared is not there (BASTION_SHARED_DATA wins)


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def p50_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


# --- the store and its words (parent) ------------------------------------


def choose_words(db, hidden: int) -> dict:
    """``W``, the documents to hide, ``k`` and the control word ``C`` (see the module's docstring)."""
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_rows USING fts5vocab(main, 'chunks_fts', 'row')")
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.bench_inst USING fts5vocab(main, 'chunks_fts', 'instance')")
    doc_of = dict(db.execute("SELECT rowid, doc FROM chunks"))
    sizes: dict[str, int] = {}
    for doc in doc_of.values():
        sizes[doc] = sizes.get(doc, 0) + 1
    total = len(doc_of)
    from bastion_agent.searching.keyword import STOP_WORDS  # a stop word is never searched: it would time nothing

    for term, df in db.execute("SELECT term, doc FROM temp.bench_rows WHERE doc BETWEEN ? AND ? AND term GLOB '[a-z]*'"
                               " ORDER BY doc", (hidden, 2 * hidden)).fetchall():
        if term in STOP_WORDS:
            continue
        per_doc: dict[str, int] = {}
        for (rowid,) in db.execute("SELECT DISTINCT doc FROM temp.bench_inst WHERE term = ?", (term,)):
            per_doc[doc_of[rowid]] = per_doc.get(doc_of[rowid], 0) + 1
        if len(per_doc) < 2:
            continue
        keep = min(per_doc, key=lambda doc: (per_doc[doc], doc))
        hide = sorted(doc for doc in per_doc if doc != keep)
        hidden_windows = sum(sizes[doc] for doc in hide)
        if df - per_doc[keep] < hidden or hidden_windows > total / 2:
            continue
        control = control_word(db, doc_of, set(hide), per_doc[keep], term)
        if control:
            return {"word": term, "control": control, "k": per_doc[keep], "hidden_with_word": df - per_doc[keep],
                    "hidden_windows": hidden_windows, "windows": total, "hide": hide}
    raise SystemExit(f"no word in {hidden}-{2 * hidden} windows fits; try more --windows")


def control_word(db, doc_of: dict, hidden_docs: set, k: int, word: str) -> str | None:
    """A real word in exactly ``k`` windows, none of them hidden."""
    for (term,) in db.execute("SELECT term FROM temp.bench_rows WHERE doc = ? AND term GLOB '[a-z][a-z][a-z]*'"
                              " AND term != ? ORDER BY term", (k, word)).fetchall():
        docs = {doc_of[rowid] for (rowid,) in db.execute("SELECT DISTINCT doc FROM temp.bench_inst WHERE term = ?",
                                                          (term,))}
        if not docs & hidden_docs and term.isalpha():
            return term
    return None


def surface(db, term: str) -> str:
    """A word of the store's text that the index's tokenizer stems to ``term`` (what a person would type)."""
    import re
    import sqlite3

    from bastion_agent.embedding.vectorstore_schema import FTS_TOKENIZER

    (text,) = db.execute("SELECT c.text FROM chunks c JOIN temp.bench_inst i ON i.doc = c.rowid WHERE i.term = ?"
                         " LIMIT 1", (term,)).fetchone()
    stems = sqlite3.connect(":memory:")
    stems.execute(f"CREATE VIRTUAL TABLE w USING fts5(word, tokenize='{FTS_TOKENIZER}')")
    stems.execute("CREATE VIRTUAL TABLE v USING fts5vocab(w, 'instance')")
    for word in dict.fromkeys(re.findall(r"[a-z]+", text.lower())):
        stems.execute("DELETE FROM w")
        stems.execute("INSERT INTO w(rowid, word) VALUES (1, ?)", (word,))
        if [row[0] for row in stems.execute("SELECT term FROM v")] == [term]:
            return word
    return term


def prepare(folder: Path, windows: int, hidden: int) -> dict:
    import sqlite3

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    import _realtext

    built = _realtext.build(folder, windows, log=log)
    layout_db = folder / "out" / "vectors.db"
    db = sqlite3.connect(layout_db, isolation_level=None)
    try:
        chosen = choose_words(db, hidden)
        chosen["term"], chosen["control_term"] = chosen["word"], chosen["control"]
        chosen["word"], chosen["control"] = surface(db, chosen["word"]), surface(db, chosen["control"])
        db.execute("BEGIN")
        db.execute("UPDATE documents SET groups = ?", (json.dumps(["public"]),))
        db.executemany("UPDATE documents SET groups = ? WHERE doc = ?", ((json.dumps(["hr"]), doc)
                                                                           for doc in chosen["hide"]))
        db.execute("UPDATE documents SET modified = (SELECT json_group_array('2026-01-02T03:04:05Z')"
                   " FROM json_each(documents.paths))")  # dated, for the dated every-group search
        db.execute("COMMIT")
        chosen["reader_sets"] = keep_reader_sets(layout_db)
        chosen["hidden_chunk"] = db.execute(
            "SELECT c.chunk_id FROM chunks c JOIN temp.bench_inst i ON i.doc = c.rowid WHERE i.term = ?"
            " AND c.doc IN (SELECT doc FROM documents WHERE groups = '[\"hr\"]') LIMIT 1",
            (chosen["term"],)).fetchone()[0]
    finally:
        db.close()
    chosen["built"] = built
    return chosen


def keep_reader_sets(path: Path) -> dict:
    """What embed does after writing labelled windows: bring the kept reader-set keyword indexes up to date.

    The store is shared by both trees; the tree before ignores these tables.
    Also measured, in this run: building every set's index from nothing,
    against rebuilding ``chunks_fts`` (what embed already paid for the same
    windows), and a refresh after one document changed groups (a watch
    cycle's relabel) against that full build.
    """
    from bastion_agent.embedding import reader_sets, vectorstore

    db = vectorstore.connect(path, create=False)
    try:
        reader_sets.refresh(db)
        started = time.perf_counter()
        with vectorstore.transaction(db):
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        whole = time.perf_counter() - started
        with vectorstore.transaction(db):
            reader_sets._drop_all(db)
        started = time.perf_counter()
        work = reader_sets.refresh(db)
        full = time.perf_counter() - started
        doc, groups = db.execute("SELECT doc, groups FROM documents WHERE groups = '[\"public\"]' LIMIT 1").fetchone()
        timed = []
        for label in ('["hr"]', groups):  # there and back, so the store is labelled as before
            with vectorstore.transaction(db):
                db.execute("UPDATE documents SET groups = ? WHERE doc = ?", (label, doc))
            started = time.perf_counter()
            reader_sets.refresh(db)
            timed.append(time.perf_counter() - started)
    finally:
        db.close()
    figures = {"windows_indexed": work["added"], "full_build_over_chunks_fts_rebuild": round(full / whole, 2),
               "one_relabel_refresh_over_full_build": round(statistics.median(timed) / full, 3)}
    log(f"reader sets kept: {figures}")
    return figures


# --- one tree's in-process figures (a worker per tree) ---------------------


class Worker:
    """A child process that holds one tree's open index and times what the parent asks, one request at a time.

    Both trees' workers stay up side by side, so the parent can ask the same
    search of each in turn: the machine's drift (eight engineers share two
    cores) falls on both alike. The wall is measured inside the worker,
    around the search alone.
    """

    def __init__(self, tree: Path, folder: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
        env["PYTHONPATH"] = str(tree)
        env["BASTION_SHARED_DATA"] = os.environ.get("BASTION_SHARED_DATA") or SHARED_DATA
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), "--keep", str(folder.parent),
                "--windows", folder.name]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                        cwd=tree)

    def ask(self, **request) -> float:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped (exit {self.process.wait()})")
        return json.loads(line)["s"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)


def worker(tree: Path, folder: Path) -> None:
    """The worker's loop: ``{"op": "search", "text", "mode", "groups"}`` or ``{"op": "fetch", "chunk"}`` per line."""
    sys.path.insert(0, str(tree))
    import bastion_agent

    if not Path(bastion_agent.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"bastion_agent came from {bastion_agent.__file__}, not {tree}")
    sys.path.append(str(REPO / "bench"))
    import _realtext  # its own path entry comes after the package is bound to ``tree``
    from bastion_agent import embed
    from bastion_agent.core import dates
    from bastion_agent.core.layout import Layout
    from bastion_agent.testing.stub_server import bag_of_words

    index = embed.SearchIndex.load(_realtext.manifest_stub(), Layout(folder / "out"))
    fetch = fetcher(folder)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "fetch":
            started = time.perf_counter()
            fetch(request["chunk"])
        elif request["op"] == "cold":  # a fresh index: the caller's filter (and any keyword index) made by this query
            started = time.perf_counter()
            # what a one-off keyword search opens (search_cli): no vector file, no ANN index
            fresh = embed.SearchIndex.load(_realtext.manifest_stub(), Layout(folder / "out"), vectors=False)
            groups = None if request["groups"] is None else frozenset(request["groups"])
            fresh.search(request["text"], None, 10, "keyword", groups=groups,
                         dates=dates.date_range("1970-01-01", None) if request.get("dated") else None)
            fresh.close()
        else:
            groups = None if request["groups"] is None else frozenset(request["groups"])
            vector = bag_of_words(request["text"], _realtext.DIM) if request["mode"] != "keyword" else None
            started = time.perf_counter()
            index.search(request["text"], vector, 10, request["mode"], groups=groups)
        print(json.dumps({"s": time.perf_counter() - started}), flush=True)
    index.close()


def fetcher(folder: Path):
    """MCP ``fetch`` as the ``public`` caller (a miss and a hidden id both end in the same error)."""
    from bastion_agent.config import manifest as manifest_module
    from bastion_agent.core.errors import BastionError
    from bastion_agent.core.layout import Layout
    from bastion_agent.embedding.endpoint import EndpointConfig
    from bastion_agent.serving import mcp_server, tokens

    manifest = manifest_module.load(folder / "manifest.toml")
    tools = mcp_server.BastionTools(manifest, Layout(folder / "out"), EndpointConfig(url="http://127.0.0.1:9"))
    caller = tokens.Caller("bench", PUBLIC)

    def fetch(chunk: str) -> None:
        try:
            tools.fetch({"chunk_id": chunk}, caller)
        except BastionError:
            pass

    return fetch


def interleaved(ask, items: list, rounds: int, warm: int = 10) -> list[list[float]]:
    """Each of ``items`` asked once a round, ``rounds`` times after ``warm`` rounds, in a fresh random order each round.

    Not a fixed or a flipped order: the first request a worker gets after
    the other worker ran finds it cold (its caches, its core), and with
    a fixed pattern the same item would always be that one (measured: a
    hidden and an absent ``fetch`` 1.25 apart with identical SQLite work).
    """
    import random

    shuffle = random.Random(len(items) * 1000 + rounds).shuffle
    for _ in range(warm):
        for item in items:
            ask(item)
    walls: list[list[float]] = [[] for _ in items]
    order = list(range(len(items)))
    for _ in range(rounds):
        shuffle(order)
        for side in order:
            walls[side].append(ask(items[side]))
    return walls


def in_process(workers: dict, words: dict, queries: int) -> dict:
    """Per tree: W against C per mode, fetch hidden against absent, every-group p50s; both trees in turn."""
    import secrets

    names = list(workers)
    out: dict = {name: {"hidden_word": {}, "every_group": {}} for name in names}
    for mode in MODES:
        items = [(name, text) for name in names for text in (words["word"], words["control"])]
        walls = interleaved(lambda item, m=mode: workers[item[0]].ask(op="search", text=item[1], mode=m,
                                                                      groups=sorted(PUBLIC)), items, queries)
        for position, name in enumerate(names):
            out[name]["hidden_word"][mode] = walls[2 * position : 2 * position + 2]
    absent = secrets.token_hex(32)
    items = [(name, chunk) for name in names for chunk in (words["hidden_chunk"], absent)]
    walls = interleaved(lambda item: workers[item[0]].ask(op="fetch", chunk=item[1]), items, 50 * queries)
    for position, name in enumerate(names):
        out[name]["fetch"] = walls[2 * position : 2 * position + 2]
    walls = interleaved(lambda name: workers[name].ask(op="cold", text=words["word"], groups=sorted(PUBLIC)),
                        names, 5, warm=1)
    for position, name in enumerate(names):
        out[name]["cold_keyword"] = walls[position]
    walls = interleaved(lambda name: workers[name].ask(op="cold", text=words["word"], groups=None, dated=True),
                        names, 5, warm=1)
    for position, name in enumerate(names):
        out[name]["cold_dated_every_group"] = walls[position]
    asked = questions(queries)
    for mode in MODES:
        for label, groups in (("none", None), ("named_all", sorted(BOTH))):
            ask = lambda name, text, m=mode, g=groups: workers[name].ask(op="search", text=text, mode=m,  # noqa: E731
                                                                         groups=g)
            for text in asked[:10]:
                for name in names:
                    ask(name, text)
            walls: dict = {name: [] for name in names}
            for number, text in enumerate(asked):  # each question of both trees in turn, who goes first alternating
                for name in (names if number % 2 == 0 else names[::-1]):
                    walls[name].append(ask(name, text))
            for number, text in enumerate(asked):  # and again the other way round: each tree goes first as often
                for name in (names[::-1] if number % 2 == 0 else names):
                    walls[name].append(ask(name, text))
            for name in names:
                out[name]["every_group"][f"{mode}_{label}"] = walls[name]
    return out


def questions(n: int) -> list[str]:
    ir = Path(os.environ.get("BASTION_SHARED_DATA") or SHARED_DATA) / "ir"
    lists = [[json.loads(line)["text"] for line in (ir / name / "queries.jsonl").open(encoding="utf-8")]
             for name in ("scifact", "cranfield")]
    return [text for pair in zip(*lists) for text in pair][:n]


# --- serve over HTTP with a named token (parent) ---------------------------


def start_serve(tree: Path, folder: Path, stub_url: str, tokens_path: Path) -> tuple[subprocess.Popen, int]:
    import re

    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
    env.update(EMBED_URL=stub_url, PYTHONPATH=str(tree), BASTION_SERVE_TOKENS=str(tokens_path))
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "serve", str(folder / "manifest.toml"),
                                "--out", str(folder / "out"), "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree)
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stdout.readline())
    if not found:
        process.kill()
        raise SystemExit(f"serve ({tree}) did not start")
    return process, int(found.group(1))


def over_http(trees: dict, folder: Path, words: dict, stub_url: str, queries: int) -> dict:
    """``GET /search`` with a named ``public`` token, W against C per mode, both trees' servers asked in turn."""
    import urllib.parse

    from bastion_agent.serving import tokens

    manifest = folder / "manifest.toml"
    if "[serve]" not in manifest.read_text(encoding="utf-8"):  # a named token's searches are limited: not here
        with manifest.open("a", encoding="utf-8") as out:
            out.write("\n[serve]\nsearches_per_minute = 60000\nsearch_burst = 10000\n")

    tokens_path = folder / "tokens-public.json"
    named = tokens.new_token()
    tokens.write_tokens(tokens_path, [tokens.TokenEntry("reader", tokens.hash_token(named), ("public",), None,
                                                        tokens.now_utc())])
    servers = {name: start_serve(tree, folder, stub_url, tokens_path) for name, tree in trees.items()}
    out: dict = {name: {} for name in trees}
    try:
        for mode in MODES:
            items = [(port, "/search?" + urllib.parse.urlencode({"q": words[key], "k": "10", "mode": mode}))
                     for _, port in servers.values() for key in ("word", "control")]
            walls = interleaved(lambda item: get(*item, named), items, queries)
            for position, name in enumerate(servers):
                out[name][mode] = walls[2 * position : 2 * position + 2]
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(30)
    return out


def get(port: int, path: str, token: str) -> float:
    import http.client

    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"serve answered {answer.status} to {path}")
    finally:
        connection.close()
    return time.perf_counter() - started


# --- putting it together (parent) -----------------------------------------


def ratio(walls: list[list[float]]) -> dict:
    return {"p50_word_ms": p50_ms(walls[0]), "p50_control_ms": p50_ms(walls[1]),
            "ratio": round(statistics.median(walls[0]) / statistics.median(walls[1]), 3)}


def summary(runs: dict, http: dict) -> dict:
    out: dict = {}
    for name, run in runs.items():
        out[name] = {
            "in_process": {mode: ratio(walls) for mode, walls in run["hidden_word"].items()},
            "mcp_fetch_hidden_vs_absent": ratio(run["fetch"]),
            "http_named_token": {mode: ratio(walls) for mode, walls in http[name].items()},
            "every_group_p50_ms": {key: p50_ms(walls) for key, walls in run["every_group"].items()},
            "cold_keyword_public_p50_ms": p50_ms(run["cold_keyword"]),
            "cold_over_warm": round(statistics.median(run["cold_keyword"])
                                    / statistics.median(run["hidden_word"]["keyword"][0]), 2),
            "cold_dated_every_group_p50_ms": p50_ms(run["cold_dated_every_group"]),
        }
    before, after = out["before"]["every_group_p50_ms"], out["after"]["every_group_p50_ms"]
    out["every_group_after_over_before"] = {key: round(after[key] / before[key], 3) for key in before}
    out["cold_keyword_public_after_over_before"] = round(out["after"]["cold_keyword_public_p50_ms"]
                                                         / out["before"]["cold_keyword_public_p50_ms"], 3)
    out["cold_dated_every_group_after_over_before"] = round(out["after"]["cold_dated_every_group_p50_ms"]
                                                            / out["before"]["cold_dated_every_group_p50_ms"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the store in DIR/WINDOWS and reuse it")
    parser.add_argument("--windows", default="20000")
    parser.add_argument("--hidden", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--before", type=Path, default=Path("/work/main"), help="the tree of the code before")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.keep / str(args.windows)
    if args.worker:
        worker(args.worker, folder)
        return
    os.umask(0o077)
    words = prepare(folder, int(args.windows), args.hidden)
    log(f"W={words['word']!r} in {words['k']} public + {words['hidden_with_word']} hidden windows; "
        f"C={words['control']!r}")
    trees = {"before": args.before.resolve(), "after": REPO}
    workers = {name: Worker(tree, folder) for name, tree in trees.items()}
    try:
        log("in process…")
        runs = in_process(workers, words, args.queries)
    finally:
        for one in workers.values():
            one.close()
    sys.path.insert(0, str(REPO / "bench"))
    from serve import serve_latency

    log("over HTTP…")
    with serve_latency.stub_process() as stub_url:
        http = over_http(trees, folder, words, stub_url, args.queries)
    result = {"store": {key: words[key] for key in ("word", "control", "term", "control_term", "k",
                                                    "hidden_with_word", "hidden_windows", "windows")},
              "reader_sets_at_write": words["reader_sets"],
              "cpus": os.cpu_count(), "queries": args.queries}
    result.update(summary(runs, http))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
