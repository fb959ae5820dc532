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
  hybrid and vector (k = 10), ratio W / C; and MCP ``fetch`` of a hidden
  window's id against an absent id (``BastionTools.fetch``), ratio;
- ``http``: ``GET /search`` through ``serve`` with a named token of group
  ``public`` (keyword, hybrid, vector), ratio W / C;
- ``every_group``: the same real questions (SciFact's and Cranfield's)
  asked with every group (no filter), and by a named caller whose groups
  label every document, per mode, p50; this tree over the tree before.

Each figure is taken for both trees: ``--before`` (default ``/work/main``,
the code before the change) and this repository, each in its own child
process, alternately (before, after, before, after), on the same store.

Usage: python3 bench/access_timing.py --keep /tmp/access-timing [--windows 20000] [--hidden 3000] [--queries 60]
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

REPO = Path(__file__).resolve().parent.parent
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
    for term, df in db.execute("SELECT term, doc FROM temp.bench_rows WHERE doc BETWEEN ? AND ? AND term GLOB '[a-z]*'"
                               " ORDER BY doc", (hidden, 2 * hidden)).fetchall():
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

    from bastion_agent.embedding.vectorstore import FTS_TOKENIZER

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
        db.execute("COMMIT")
        chosen["hidden_chunk"] = db.execute(
            "SELECT c.chunk_id FROM chunks c JOIN temp.bench_inst i ON i.doc = c.rowid WHERE i.term = ?"
            " AND c.doc IN (SELECT doc FROM documents WHERE groups = '[\"hr\"]') LIMIT 1",
            (chosen["term"],)).fetchone()[0]
    finally:
        db.close()
    chosen["built"] = built
    return chosen


# --- one tree's in-process figures (child) ---------------------------------


def child(tree: Path, folder: Path, words: dict, queries: int) -> dict:
    sys.path.insert(0, str(tree))
    import bastion_agent

    if not Path(bastion_agent.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"bastion_agent came from {bastion_agent.__file__}, not {tree}")
    sys.path.append(str(REPO / "bench"))
    import _realtext  # its own path entry comes after the package is bound to ``tree``
    from bastion_agent import embed
    from bastion_agent.core.layout import Layout
    from bastion_agent.testing.stub_server import bag_of_words

    vec = lambda text: bag_of_words(text, _realtext.DIM)  # noqa: E731
    index = embed.SearchIndex.load(_realtext.manifest_stub(), Layout(folder / "out"))
    try:
        result = {"hidden_word": {}, "every_group": {}}
        pair = [(words["word"], vec(words["word"])), (words["control"], vec(words["control"]))]
        for mode in MODES:
            walls = interleaved(lambda p, m=mode: index.search(p[0], p[1], 10, m, groups=PUBLIC), pair, queries)
            result["hidden_word"][mode] = walls
        asked = [(text, vec(text)) for text in questions(queries)]
        for mode in MODES:
            for name, groups in (("none", None), ("named_all", BOTH)):
                search = lambda p, m=mode, g=groups: index.search(p[0], p[1], 10, m, groups=g)  # noqa: E731
                for item in asked[:10]:
                    search(item)
                result["every_group"][f"{mode}_{name}"] = p50_ms(timed(search, asked))
    finally:
        index.close()
    result["fetch"] = fetch_times(folder, words, queries)
    return result


def fetch_times(folder: Path, words: dict, queries: int) -> list[list[float]]:
    """MCP ``fetch`` for the ``public`` caller: a hidden window's id and an absent one, interleaved."""
    import secrets

    from bastion_agent.config import manifest as manifest_module
    from bastion_agent.core.errors import BastionError
    from bastion_agent.core.layout import Layout
    from bastion_agent.embedding.endpoint import EndpointConfig
    from bastion_agent.serving import mcp_server, tokens

    manifest = manifest_module.load(folder / "manifest.toml")
    tools = mcp_server.BastionTools(manifest, Layout(folder / "out"), EndpointConfig(url="http://127.0.0.1:9"))
    caller = tokens.Caller("bench", PUBLIC)

    def fetch(chunk):
        try:
            tools.fetch({"chunk_id": chunk}, caller)
        except BastionError:
            pass

    ids = [words["hidden_chunk"], secrets.token_hex(32)]
    return interleaved(fetch, ids, max(200, 10 * queries))


def interleaved(function, pair: list, rounds: int) -> list[list[float]]:
    """Both arguments asked alternately ``rounds`` times each (after 10 warm-up rounds): the walls of each."""
    for _ in range(10):
        for item in pair:
            function(item)
    walls: list[list[float]] = [[], []]
    for number in range(rounds):
        order = (0, 1) if number % 2 == 0 else (1, 0)
        for side in order:
            started = time.perf_counter()
            function(pair[side])
            walls[side].append(time.perf_counter() - started)
    return walls


def timed(function, items) -> list[float]:
    walls = []
    for item in items:
        started = time.perf_counter()
        function(item)
        walls.append(time.perf_counter() - started)
    return walls


def questions(n: int) -> list[str]:
    import _realtext

    lists = [[json.loads(line)["text"] for line in (_realtext.IR / name / "queries.jsonl").open(encoding="utf-8")]
             for name in ("scifact", "cranfield")]
    return [text for pair in zip(*lists) for text in pair][:n]


def run_child(tree: Path, folder: Path, words: dict, queries: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
    env["PYTHONPATH"] = str(tree)
    env["BASTION_SHARED_DATA"] = os.environ.get("BASTION_SHARED_DATA") or SHARED_DATA
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", str(tree), "--keep", str(folder.parent),
            "--windows", folder.name, "--queries", str(queries), "--words", json.dumps(words)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    if done.returncode:
        raise SystemExit(f"the child for {tree} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


# --- serve over HTTP with a named token (parent) ---------------------------


def http_walls(tree: Path, folder: Path, words: dict, stub_url: str, queries: int) -> dict:
    import re
    import urllib.parse

    sys.path.insert(0, str(REPO))
    from bastion_agent.serving import tokens

    tokens_path = folder / "tokens-public.json"
    named = tokens.new_token()
    tokens.write_tokens(tokens_path, [tokens.TokenEntry("reader", tokens.hash_token(named), ("public",), None,
                                                        tokens.now_utc())])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
    env.update(EMBED_URL=stub_url, PYTHONPATH=str(tree), BASTION_SERVE_TOKENS=str(tokens_path))
    process = subprocess.Popen([sys.executable, "-m", "bastion_agent", "serve", str(folder / "manifest.toml"),
                                "--out", str(folder / "out"), "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree)
    try:
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", process.stdout.readline())
        if not found:
            raise SystemExit(f"serve ({tree}) did not start")
        port = int(found.group(1))
        result = {}
        for mode in MODES:
            paths = ["/search?" + urllib.parse.urlencode({"q": words[key], "k": "10", "mode": mode})
                     for key in ("word", "control")]
            result[mode] = interleaved(lambda path: get(port, path, named), paths, queries)
        return result
    finally:
        process.terminate()
        process.wait(30)


def get(port: int, path: str, token: str) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"serve answered {answer.status} to {path}")
    finally:
        connection.close()


# --- putting it together (parent) -----------------------------------------


def ratio(walls: list[list[float]]) -> dict:
    return {"p50_word_ms": p50_ms(walls[0]), "p50_control_ms": p50_ms(walls[1]),
            "ratio": round(statistics.median(walls[0]) / statistics.median(walls[1]), 3)}


def merged(runs: list[dict], key: str) -> dict:
    """Each mode's walls of every run of one tree, pooled."""
    pooled: dict = {}
    for run in runs:
        for mode, walls in run[key].items():
            sides = pooled.setdefault(mode, [[], []])
            sides[0].extend(walls[0])
            sides[1].extend(walls[1])
    return pooled


def summary(trees: dict, runs: dict, http: dict) -> dict:
    out: dict = {}
    for name in trees:
        out[name] = {
            "in_process": {mode: ratio(walls) for mode, walls in merged(runs[name], "hidden_word").items()},
            "mcp_fetch_hidden_vs_absent": ratio([sum((run["fetch"][side] for run in runs[name]), [])
                                                 for side in (0, 1)]),
            "http_named_token": {mode: ratio(walls) for mode, walls in merged(http[name], "walls").items()},
            "every_group_p50_ms": {key: round(statistics.mean(run["every_group"][key] for run in runs[name]), 3)
                                   for key in runs[name][0]["every_group"]},
        }
    before, after = out["before"]["every_group_p50_ms"], out["after"]["every_group_p50_ms"]
    out["every_group_after_over_before"] = {key: round(after[key] / before[key], 3) for key in before}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="build the store in DIR/WINDOWS and reuse it")
    parser.add_argument("--windows", default="20000")
    parser.add_argument("--hidden", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--before", type=Path, default=Path("/work/main"), help="the tree of the code before")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--words", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.keep / str(args.windows)
    if args.child:
        print(json.dumps(child(args.child, folder, json.loads(args.words), args.queries)))
        return
    os.umask(0o077)
    words = prepare(folder, int(args.windows), args.hidden)
    log(f"W={words['word']!r} in {words['k']} public + {words['hidden_with_word']} hidden windows; "
        f"C={words['control']!r}")
    trees = {"before": args.before.resolve(), "after": REPO}
    child_words = {key: words[key] for key in ("word", "control", "hidden_chunk")}
    runs: dict = {name: [] for name in trees}
    http: dict = {name: [] for name in trees}
    sys.path.insert(0, str(REPO / "bench"))
    import serve_latency

    with serve_latency.stub_process() as stub_url:
        for round_number in range(2):
            for name, tree in trees.items():
                log(f"round {round_number + 1}: {name} in process…")
                runs[name].append(run_child(tree, folder, child_words, args.queries))
                log(f"round {round_number + 1}: {name} over HTTP…")
                http[name].append({"walls": http_walls(tree, folder, child_words, stub_url, args.queries)})
    result = {"store": {key: words[key] for key in ("word", "control", "term", "control_term", "k",
                                                    "hidden_with_word", "hidden_windows", "windows")}, "cpus": os.cpu_count(), "queries": args.queries}
    result.update(summary(trees, runs, http))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
