"""Shared by the search benchmarks: a store of up to a million windows of REAL prose, built once and reused.

Real text matters for keyword search: every window of real prose holds
"the", "of" and "and", which synthetic random words never do, and that is
what makes an OR-of-all-terms query cost grow with the folder.

Sources, in this order (each file read once, each window kept once):
the two shared test collections (``../shared/data/ir``), the licence
texts (``/usr/share/common-licenses``), then every text file under
``/usr/share/doc`` (changelogs decompressed, HTML tags stripped, binaries
skipped). There is about 45 million tokens of it, so to reach a million
windows they are cut with the product's own chunker into windows of
``WINDOW`` tokens advancing by ``WINDOW - OVERLAP`` (a heavier overlap than the
default 256/32, which makes every word's document frequency higher: a
harsher test for keyword search, not an easier one). Windows whose text was
already seen are dropped.

Vectors are the loopback stub's bag of words (``stub_server.bag_of_words``,
computed here in-process, word buckets cached) with the manifest's passage
prefix, so a query the stub embeds lands near the windows that share its
words, as the cold CLI measurement needs.

``build(folder, n)`` writes ``folder/out`` (a normal output folder:
``vectors.db`` with its FTS5 index, the derived vector file and the ANN
index) and ``folder/manifest.toml``, then ``folder/complete.json``; a folder
that has ``complete.json`` for the same ``n`` is reused as it is.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bastion_agent import embed  # noqa: E402
from bastion_agent.chunking import chunker  # noqa: E402
from bastion_agent.embedding import vectorstore  # noqa: E402
from bastion_agent.core import records  # noqa: E402
from bastion_agent.core.layout import Layout, ensure_private_dir  # noqa: E402
from bastion_agent.core.records import DocumentRow, StoredChunk  # noqa: E402

DIM = 384
MODEL = "bench-real"
WINDOW = 128
OVERLAP = 96
IR = Path(os.environ.get("BASTION_SHARED_DATA") or ROOT.parent / "shared" / "data") / "ir"
SKIP_SUFFIXES = (".png", ".gif", ".jpg", ".jpeg", ".svg", ".ico", ".pdf", ".woff", ".ttf", ".zip", ".bz2", ".xz")
TAG_RE = re.compile(r"<[^>]{0,2000}>")
WORD_RE = re.compile(r"\w+")


def source_files() -> list[Path]:
    """Every source file, in a fixed order."""
    files: list[Path] = []
    for name in ("scifact", "cranfield"):
        files += sorted((IR / name / "docs").glob("*.txt"))
    files += sorted(p for p in Path("/usr/share/common-licenses").iterdir() if p.is_file())
    for root, dirs, names in os.walk("/usr/share/doc"):
        dirs.sort()
        for name in sorted(names):
            path = Path(root, name)
            if not path.is_symlink() and not name.lower().endswith(SKIP_SUFFIXES):
                files.append(path)
    return files


def read_prose(path: Path) -> str | None:
    """The file's text (decompressed, tags stripped), or None for a binary or unreadable file."""
    try:
        data = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError):
        return None
    if b"\0" in data[:8192]:
        return None
    text = data.decode("utf-8", "replace")
    if path.suffix in (".html", ".htm") or path.name.endswith((".html.gz", ".htm.gz")):
        text = html.unescape(TAG_RE.sub(" ", text))
    return text if WORD_RE.search(text) else None


def documents():
    """``(doc, text)`` per source file; the doc is the hash of the text, as the sanitized store names it."""
    seen = set()
    for path in source_files():
        text = read_prose(path)
        if text is None:
            continue
        doc = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if doc not in seen:
            seen.add(doc)
            yield doc, text, path


def chunk_rows(n: int, documents_out: list):
    """Up to ``n`` distinct windows as ``chunks`` rows; fills ``documents_out`` with their ``DocumentRow``."""
    seen: set[bytes] = set()
    made = 0
    for doc, text, path in documents():
        spans, _ = chunker._windows(text, WINDOW, OVERLAP)
        used = 0
        for start, end, _tokens in spans:
            window = text[start:end]
            key = hashlib.sha256(window.encode("utf-8")).digest()[:16]
            if key in seen:
                continue
            seen.add(key)
            yield StoredChunk(embed.chunk_id(doc, window), doc, used, start, end, window)
            used += 1
            made += 1
            if made >= n:
                break
        if used:
            documents_out.append(DocumentRow(doc, json.dumps([str(path)])))
        if made >= n:
            return


class BagOfWords:
    """``stub_server.bag_of_words`` with each word's bucket computed once."""

    def __init__(self, dim: int):
        self.dim = dim
        self.buckets: dict[str, int] = {}

    def bucket(self, word: str) -> int:
        bucket = self.buckets.get(word)
        if bucket is None:
            bucket = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") % self.dim
            self.buckets[word] = bucket
        return bucket

    def matrix(self, texts: list[str]):
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype="<f4")
        for row, text in enumerate(texts):
            columns = [self.bucket(w) for w in WORD_RE.findall(text.lower())] or [0]
            np.add.at(out[row], columns, 1.0)
        return out


def write_manifest(folder: Path) -> Path:
    (folder / "docs").mkdir(exist_ok=True)
    path = folder / "manifest.toml"
    path.write_text(f'[source]\nroot = "docs"\n\n[embed]\nmodel = "{MODEL}"\ndim = {DIM}\n\n'
                    f"[embed.chunk]\nsize_tokens = {WINDOW}\noverlap_tokens = {OVERLAP}\n", encoding="utf-8")
    return path


def manifest_stub():
    from types import SimpleNamespace

    return SimpleNamespace(embed=SimpleNamespace(vector_key=MODEL, dim=DIM, query_prefix="", passage_prefix=""),
                           search_mode=None)


def stderr(line: str) -> None:
    """A bench's progress line, on stderr so that stdout holds only its JSON figures."""
    print(line, file=sys.stderr, flush=True)


def build(folder: Path, n: int, log=print) -> dict:
    """The store of ``n`` windows in ``folder`` (reused when complete); returns its ``complete.json``."""
    marker = folder / "complete.json"
    if marker.exists():
        done = json.loads(marker.read_text())
        if done.get("windows_wanted") == n and done.get("window") == WINDOW:
            return done
    ensure_private_dir(folder)
    layout = Layout(folder / "out")
    if layout.root.exists():
        import shutil

        shutil.rmtree(layout.root)
    ensure_private_dir(layout.root)
    started = time.monotonic()
    db = vectorstore.connect(layout.vectors_db, create=True)
    db.execute("PRAGMA cache_size = -262144")
    documents_out: list = []
    vectorstore.replace_chunks(db, chunk_rows(n, documents_out), [])
    with vectorstore.transaction(db):
        db.executemany(records.insert_sql("documents", DocumentRow), map(records.values(DocumentRow), documents_out))
    chunks_s = time.monotonic() - started
    log(f"chunks and FTS index: {chunks_s:.0f} s")
    total = vectorstore.count(db, "SELECT COUNT(*) FROM chunks")
    bag = BagOfWords(DIM)
    last = 0
    while True:
        rows = db.execute("SELECT rowid, chunk_id, text FROM chunks WHERE rowid > ? ORDER BY rowid LIMIT 20000",
                          (last,)).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        block = bag.matrix([text for _, _, text in rows])
        vectorstore.add_vectors(db, MODEL, DIM, ((chunk, block[i].tobytes()) for i, (_, chunk, _) in enumerate(rows)),
                                "2026-01-01T00:00:00+00:00")
    db.close()
    vectors_s = time.monotonic() - started - chunks_s
    log(f"vectors: {vectors_s:.0f} s")
    embed.refresh_derived(layout, manifest_stub())
    derived_s = time.monotonic() - started - chunks_s - vectors_s
    log(f"vector file and ANN index: {derived_s:.0f} s")
    write_manifest(folder)
    done = {"windows_wanted": n, "windows": total, "documents": len(documents_out), "window": WINDOW,
            "overlap": OVERLAP, "chunks_and_fts_s": round(chunks_s), "vectors_s": round(vectors_s),
            "derived_s": round(derived_s), "vectors_db_bytes": layout.vectors_db.stat().st_size}
    marker.write_text(json.dumps(done))
    return done


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="build (or reuse) a real-prose search store")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--windows", type=int, default=1_000_000)
    args = parser.parse_args()
    print(json.dumps(build(args.folder, args.windows, log=lambda m: print(m, file=sys.stderr, flush=True))))
