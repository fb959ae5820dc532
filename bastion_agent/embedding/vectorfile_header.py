"""What a build of the derived vector files is and where it lies: its paths, its header, the writers' lock.

The base of the vector file (``vectorfile`` says what the files hold and
how ``refresh`` keeps them in step with vectors.db): the one place that
names the files of a key, reads a header, tells the database state a build
was built from, and fingerprints the data files as written. Both the
writer (``vectorfile.refresh``) and the reader (``vectorfile_view``) stand
on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.extras import optional
from bastion_agent.core.layout import Layout, ensure_private_dir

FORMAT = 1


INDEX_DIR = "index"


DATA_FILES = ("f32", "rowid", "inv", "mask", "ids")


ID_BYTES = 64  # a chunk id: the hex sha256 of its window (docs/contract.md)


def numpy_or_none():
    """numpy when the ``fast`` extra is installed, else None (the pure scan)."""
    return optional("numpy")


@dataclass(frozen=True)
class StoreState:
    """What a derived file must have been built from to be current."""

    store_id: str
    chunks_generation: int
    vectors_generation: int
    max_rowid: int

    def as_dict(self) -> dict:
        return {"store_id": self.store_id, "chunks_generation": self.chunks_generation,
                "vectors_generation": self.vectors_generation, "max_rowid": self.max_rowid}


def read_state(db) -> StoreState:
    values = dict(db.execute("SELECT name, value FROM search_state"))
    max_rowid = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM vectors").fetchone()[0]
    return StoreState(str(values["store_id"]), int(values["chunks_generation"]),
                      int(values["vectors_generation"]), int(max_rowid))


@dataclass(frozen=True)
class Files:
    """The paths of one vector key's derived files."""

    folder: Path
    name: str

    @classmethod
    def for_key(cls, layout: Layout, key: str) -> "Files":
        return cls(layout.root / INDEX_DIR, hashlib.sha256(key.encode("utf-8")).hexdigest()[:24])

    @property
    def header(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.name}.lock"

    def data(self, build: str, kind: str) -> Path:
        return self.folder / f"{self.name}.{build}.{kind}"


@contextlib.contextmanager
def writer_lock(files: Files, wait: bool = True):
    """One writer at a time per key (embed's refresh, a search, serve's reload).

    Yields whether the lock is held: with ``wait=False`` it is False when
    another process holds it, and the caller does without.
    """
    ensure_private_dir(files.folder)
    fd = os.open(files.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def read_header(files: Files) -> dict | None:
    import json

    try:
        header = json.loads(files.header.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) and header.get("format") == FORMAT else None


HEADER_KEYS = {"key", "dim", "store_id", "vectors_generation", "chunks_generation", "max_rowid", "rows", "mask_rows",
               "current", "build", "state"}


def fingerprint(files: Files, build: str) -> dict:
    """Each data file's size, inode and change times: what the header says ``refresh`` left them as.

    The change time (ctime) moves with any write and cannot be set back, so a
    file edited in place, or put back from a copy, no longer matches.
    """
    found = {}
    for kind in DATA_FILES:
        stat = files.data(build, kind).stat()
        found[kind] = [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns]
    return found


def read_array(path: Path, typecode: str, count: int) -> array:
    values = array(typecode)
    with open(path, "rb") as handle:
        values.frombytes(handle.read(count * values.itemsize))
    if sys.byteorder != "little":
        values.byteswap()
    return values
