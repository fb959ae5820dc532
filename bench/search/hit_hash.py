"""Whether two checkouts give the same hits: the sha256 of the hits' JSON on 84 real queries, three modes.

A refactor that moves how a document's fields are carried (walk, listing,
vectors.db, hit) must not change one byte of what a search answers. This
bench builds a real store (a few hundred SciFact and Cranfield documents
from the shared data, in three folders labelled by ``[access]`` rules, one
text twice under two labels, fixed modification times), sweeps it with each
checkout's own code against the loopback stub model server (bag-of-words
vectors), and runs 84 queries in keyword, vector and hybrid mode: SciFact
and Cranfield questions, edge cases (blank-ish, unicode, a word in no
document, punctuation, a long question), date ranges and callers of a few
groups. Each answer is serialised as ``search --json`` prints it (the hit's
fields and how the vector side answered), an error as its one line.

Printed: JSON with the sha256 of all answers and of each mode's, per
checkout, and whether they are equal; with ``--code DIR`` the other
checkout (an ``git archive`` of another commit, say) runs the same in its own
process, with ``PYTHONPATH=DIR``, so before and after are compared in one
run. Where they differ, the first differing queries are named.

    BASTION_SHARED_DATA=/work/shared/data python3 bench/search/hit_hash.py --code /tmp/before
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IR = Path(os.environ.get("BASTION_SHARED_DATA") or ROOT.parent / "shared" / "data") / "ir"
MODES = ("keyword", "vector", "hybrid")
DIM = 64
BASE_TIME = 1_577_836_800  # 2020-01-01T00:00:00Z: the first document's modification time, a day more each
FOLDERS = ("public", "hr", "board")
MANIFEST = """[source]
root = "docs"

[embed]
model = "stub-model"
dim = {dim}

[embed.chunk]
size_tokens = 128
overlap_tokens = 16

[access]
default = ["staff"]

[[access.rules]]
paths = ["hr/**"]
groups = ["hr"]

[[access.rules]]
paths = ["board/**"]
groups = ["board", "hr"]
"""


def collection_docs(name: str, count: int) -> list[tuple[str, str]]:
    files = sorted((IR / name / "docs").glob("*.txt"))[:count]
    return [(f"{name}-{path.stem}.txt", path.read_text(encoding="utf-8")) for path in files]


def questions(name: str, count: int) -> list[str]:
    rows = [json.loads(line) for line in (IR / name / "queries.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return [row.get("text") or row.get("query") for row in rows[:count]]


def build_source(folder: Path, per_collection: int) -> Path:
    """The source folder and its manifest; every file's time fixed, so both checkouts read the same."""
    docs = collection_docs("scifact", per_collection) + collection_docs("cranfield", per_collection)
    root = folder / "docs"
    for number, (name, text) in enumerate(docs):
        path = root / FOLDERS[number % len(FOLDERS)] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (BASE_TIME + number * 86_400, BASE_TIME + number * 86_400))
    twin = root / "hr" / ("twin-" + docs[0][0])  # the same text under another label: per-path groups
    twin.write_text(docs[0][1], encoding="utf-8")
    os.utime(twin, (BASE_TIME + 5 * 86_400, BASE_TIME + 5 * 86_400))
    manifest = folder / "manifest.toml"
    manifest.write_text(MANIFEST.format(dim=DIM), encoding="utf-8")
    return manifest


def cases() -> list[dict]:
    """84 queries: 40 SciFact, 30 Cranfield, 14 edge cases, date ranges and groups."""
    science, cranfield = questions("scifact", 40), questions("cranfield", 30)
    found = [{"query": text} for text in science + cranfield]
    found += [
        {"query": "   the   "}, {"query": "?!"}, {"query": "xylophonequuxzz"},
        {"query": "Ünïcödé résumé ζ-potential 東京 naïve café"}, {"query": "AND OR NOT \"near\" * -"},
        {"query": " ".join(science[:6])},
        {"query": science[0], "since": "2020-03-01"}, {"query": cranfield[0], "before": "2020-04-01"},
        {"query": cranfield[1], "since": "2020-02-01", "before": "2020-06-01"},
        {"query": "boundary layer", "since": "2031-01-01"},
        {"query": science[1], "groups": ["hr"]}, {"query": cranfield[2], "groups": ["staff"]},
        {"query": "heat transfer", "groups": ["board"]}, {"query": science[2], "groups": []},
    ]
    assert len(found) == 84, len(found)
    return found


def answers(case_list: list[dict], manifest: Path, out: Path) -> list[dict]:
    """Each case in each mode: the JSON ``search --json`` prints (its list), or the error's one line."""
    from dataclasses import asdict
    from bastion_agent.config import manifest as manifests
    from bastion_agent.core import dates
    from bastion_agent.core.layout import Layout
    from bastion_agent.searching import searcher

    loaded = manifests.load(manifest)
    layout = Layout.for_manifest(loaded.path, str(out))
    results = []
    for number, case in enumerate(case_list):
        for mode in MODES:
            groups = None if case.get("groups") is None else frozenset(case["groups"])
            try:
                within = dates.date_range(case.get("since"), case.get("before"))
                result = searcher.answer(loaded, layout, case["query"], 10, mode=mode, groups=groups, dates=within)
                extra = (result.vector_search.hit_fields()
                         if result.vector_search is not None and result.mode != "keyword" else {})
                printed = json.dumps([{**asdict(hit), **extra} for hit in result.hits], ensure_ascii=False, indent=2)
            except Exception as error:  # noqa: BLE001 - an error is an answer too, compared like one
                printed = json.dumps({"error": f"{type(error).__name__}: {error}"})
            results.append({"case": number, "mode": mode, "json": printed})
    return results


def worker(manifest: Path, out: Path) -> None:
    """Run in the checkout under test (``PYTHONPATH``): sweep, then answer every case; JSON on stdout."""
    from contextlib import redirect_stdout
    import bastion_agent
    from bastion_agent.commands import cli

    with redirect_stdout(sys.stderr):
        status = cli.main(["sweep", str(manifest), "--out", str(out)])
    if status != 0:
        raise SystemExit(f"hit_hash: the sweep failed ({status})")
    print(json.dumps({"code": str(Path(bastion_agent.__file__).parent.parent),
                      "answers": answers(cases(), manifest, out)}))


def run_checkout(code: Path, manifest: Path, out: Path, url: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "EMBED_URL": url}
    done = subprocess.run([sys.executable, __file__, "--worker", str(manifest), str(out)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"hit_hash: {code}: {done.stderr.strip().splitlines()[-1:]}")
    found = json.loads(done.stdout)
    if Path(found["code"]).resolve() != code.resolve():
        raise SystemExit(f"hit_hash: imported {found['code']}, not {code}")
    return found


def digest(parts) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def summary(found: dict) -> dict:
    rows = found["answers"]
    return {"code": found["code"], "answers": len(rows),
            "hits": sum(len(json.loads(row["json"])) for row in rows if row["json"].startswith("[")),
            "errors": sum(1 for row in rows if not row["json"].startswith("[")),
            "sha256": digest(row["json"] for row in rows),
            "by_mode": {mode: digest(row["json"] for row in rows if row["mode"] == mode) for mode in MODES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="another checkout to compare with this one")
    parser.add_argument("--docs", type=int, default=150, help="documents of each collection (default 150)")
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    sys.path.insert(0, str(ROOT))
    from bastion_agent.testing.stub_server import StubServer

    checkouts = [ROOT] + ([args.code] if args.code else [])
    with tempfile.TemporaryDirectory(prefix="hit-hash-") as work, StubServer(dim=DIM) as stub:
        manifest = build_source(Path(work), args.docs)
        found = [run_checkout(code, manifest, Path(work) / f"out{number}", stub.url)
                 for number, code in enumerate(checkouts)]
    report = {"cases": 84, "modes": list(MODES), "checkouts": [summary(one) for one in found]}
    if len(found) == 2:
        pairs = list(zip(found[0]["answers"], found[1]["answers"]))
        differing = [(mine["case"], mine["mode"]) for mine, theirs in pairs if mine["json"] != theirs["json"]]
        report["same"] = not differing and len(found[0]["answers"]) == len(found[1]["answers"])
        report["differing"] = len(differing)
        report["first_differing"] = differing[:10]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
