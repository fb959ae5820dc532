"""The derived vector file: one model's vectors as a memory-mappable float32 matrix.

Loading a million vectors from SQLite BLOBs takes seconds; opening a raw
matrix by memory map takes a millisecond. So beside ``vectors.db`` each
vector key gets, under ``<out>/index/``:

- ``<name>.json``: the header, the only file a reader trusts first. It names
  the build, how many rows the data files hold, and the database state they
  were built from (``store_id``, the two generation counters and
  ``max(rowid)`` of ``vectors``, see ``vectorstore._m003_search_state``);
- ``<name>.<build>.f32``: every vector of the key, in ``vectors.rowid``
  order, as little-endian float32 rows (the BLOBs as they are);
- ``<name>.<build>.rowid`` (int64) and ``.inv`` (float32 1/norm, 0 for a
  zero vector): which database row each matrix row is, and its scale;
- ``<name>.<build>.ids``: each row's chunk id (64 ASCII bytes), so a search
  names its candidates without reading their rows of ``vectors`` (each
  holds its BLOB: one page of the database per candidate, which cost more
  than the ANN search itself);
- ``<name>.<build>.mask``: one byte per row, 1 when its chunk is in this
  sweep. Stale rows stay in the matrix (vectors are only ever added, like
  the table) but never rank.

The files are derived and never trusted over the database: ``refresh``
compares the header with the database's state, checks the files' sizes and
spot-checks rows against their BLOBs, then appends what is new (vectors are
only added), recomputes the mask when the chunks changed, or rebuilds from
scratch when anything disagrees. Search scores its hits from these rows
(not from the BLOBs), so the header also records each data file's size,
inode and change times as written (``fingerprint``): a file changed by
anything but ``refresh`` (a row edited in place, which a spot check may
miss, or an older build copied back) does not match it, and the build is
rebuilt before it is used. All of this happens once, when a search or
serve loads the files, never per query. Data files only grow, and the
header is written last and atomically, so a reader that read a header can
always use the first ``rows`` rows; a rebuild writes a new build's files, so an
open memory map keeps its old ones. Writers take a lock file.

Standard library only; numpy (extra ``fast``) makes building and scanning
fast, the pure scan gives the same candidates.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import heapq
import math
import operator
import os
import random
import sys
import uuid
from array import array
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.core.errors import StoreError
from bastion_agent.core.extras import optional
from bastion_agent.core.layout import Layout, ensure_private_dir, write_json
from bastion_agent.embedding import vectorstore

FORMAT = 1
INDEX_DIR = "index"
SPOT_CHECKS = 8
FETCH_ROWS = 16_384
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


def refresh(db, layout: Layout, key: str, dim: int) -> dict:
    """Bring ``key``'s derived files in step with ``db``; return the header to read them by.

    A current header is checked without the lock (readers never wait for a
    writer that is only building an ANN index); an update takes it.
    """
    files = Files.for_key(layout, key)
    with vectorstore.transaction(db, write=False):
        header = read_header(files)
        if header is not None and header.get("state") == read_state(db).as_dict() and "files" in header \
                and _consistent(db, files, header, key, dim, read_state(db)):
            return header
    with writer_lock(files), vectorstore.transaction(db, write=False):
        state = read_state(db)
        header = read_header(files)
        if _lacks_ids(files, header):
            _add_ids(db, files, header, key, dim)
        trusted = header is not None and _consistent(db, files, header, key, dim, state)
        if not trusted:
            header = _rebuild(db, files, key, dim, state)
        elif header["max_rowid"] != state.max_rowid:
            header = _append(db, files, header, key, dim)
        if header["chunks_generation"] != state.chunks_generation or header["mask_rows"] > header["rows"]:
            _write_mask(db, files, header, key, dim)
        elif header["mask_rows"] != header["rows"]:
            _extend_mask(db, files, header, key, dim)  # only vectors were added (embed at work): mark just those
        written = fingerprint(files, header["build"])
        if header["state"] != state.as_dict() or not trusted or header.get("files") != written:
            header.update(state.as_dict())
            header["state"] = state.as_dict()
            header["files"] = written
            write_json(files.header, header)
        _remove_old_builds(files, header["build"])
    return header


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


def _lacks_ids(files: Files, header: dict | None) -> bool:
    """A build whose other files are there but which was written before the ids file existed."""
    try:
        build = header["build"]
        if not isinstance(build, str) or not build.isalnum() or files.data(build, "ids").exists():
            return False
        return all(files.data(build, kind).exists() for kind in DATA_FILES if kind != "ids")
    except (KeyError, TypeError):
        return False


def _untouched(files: Files, header: dict) -> bool:
    """Whether the data files are as the header's writer left them (a header without a fingerprint: checked rows only)."""
    recorded = header.get("files")
    if recorded is None:
        return True
    current = fingerprint(files, header["build"])
    if "ids" not in recorded:  # fingerprinted before the ids file existed: it was added since, by refresh
        current.pop("ids")
    return recorded == current


def _consistent(db, files: Files, header: dict, key: str, dim: int, state: StoreState) -> bool:
    """Whether the header and its files can be used or extended rather than rebuilt."""
    try:
        if not HEADER_KEYS <= set(header) or not isinstance(header["build"], str) or not header["build"].isalnum():
            return False
        if (header["key"], header["dim"], header["store_id"]) != (key, dim, state.store_id):
            return False
        if header["vectors_generation"] != state.vectors_generation or header["max_rowid"] > state.max_rowid:
            return False
        rows = header["rows"]
        sizes = {"f32": 4 * dim, "rowid": 8, "inv": 4, "mask": 1 if header["mask_rows"] == rows else 0, "ids": ID_BYTES}
        for kind, width in sizes.items():
            if files.data(header["build"], kind).stat().st_size < rows * width:
                return False
        return _untouched(files, header) and _spot_check(db, files, header, key, dim)
    except (KeyError, TypeError, ValueError, OSError):
        return False


def _spot_check(db, files: Files, header: dict, key: str, dim: int) -> bool:
    """A few rows (first, last, random) must be byte for byte the database's."""
    rows = header["rows"]
    if rows == 0:
        return True
    picks = {0, rows - 1, *(random.randrange(rows) for _ in range(SPOT_CHECKS))}
    build = header["build"]
    with open(files.data(build, "rowid"), "rb") as rowids, open(files.data(build, "f32"), "rb") as matrix, \
            open(files.data(build, "ids"), "rb") as ids:
        for position in sorted(picks):
            rowids.seek(8 * position)
            rowid = int.from_bytes(rowids.read(8), "little", signed=True)
            matrix.seek(4 * dim * position)
            ids.seek(ID_BYTES * position)
            found = db.execute("SELECT vec, chunk_id FROM vectors WHERE rowid = ? AND model = ? AND dim = ?",
                               (rowid, key, dim)).fetchone()
            if found is None or found[0] != matrix.read(4 * dim) or _id_bytes(found[1]) != ids.read(ID_BYTES):
                return False
    return True


def _id_bytes(chunk_id) -> bytes:
    """A chunk id as its fixed-width field; anything but 64 ASCII characters cannot be stored (a StoreError)."""
    data = chunk_id.encode("ascii", "replace") if isinstance(chunk_id, str) else b""
    if len(data) != ID_BYTES:
        raise StoreError("vectors.db holds a chunk id that is not a sha256 in hex: run sweep (or chunk and embed) to rebuild it")
    return data


def _add_ids(db, files: Files, header: dict, key: str, dim: int) -> None:
    """Write the chunk ids of a build made before the ids file existed (once; its other files and the ANN index stay)."""
    rowids = _read_array(files.data(header["build"], "rowid"), "q", header["rows"])
    chunk_of = {}
    for first in range(0, len(rowids), 500):
        part = rowids[first : first + 500].tolist()
        marks = ",".join("?" * len(part))
        chunk_of.update(db.execute(f"SELECT rowid, chunk_id FROM vectors WHERE rowid IN ({marks}) AND model = ? AND dim = ?",
                                   (*part, key, dim)))
    if len(chunk_of) != len(rowids):
        return  # rows that are gone: the build no longer matches, and is rebuilt
    from bastion_agent.core.layout import write_private

    write_private(files.data(header["build"], "ids"), b"".join(_id_bytes(chunk_of[rowid]) for rowid in rowids))


def _rebuild(db, files: Files, key: str, dim: int, state: StoreState) -> dict:
    header = {"format": FORMAT, "key": key, "dim": dim, "build": uuid.uuid4().hex[:12], "rows": 0,
              "mask_rows": -1, "current": 0, "max_rowid": 0, "chunks_generation": -1,
              "store_id": state.store_id, "vectors_generation": state.vectors_generation, "state": {}}
    for kind in DATA_FILES:
        _create_empty(files.data(header["build"], kind))
    return _append(db, files, header, key, dim)


def _append(db, files: Files, header: dict, key: str, dim: int) -> dict:
    """Add the key's vectors with a rowid above the header's, in rowid order."""
    build, rows = header["build"], header["rows"]
    for kind, width in (("f32", 4 * dim), ("rowid", 8), ("inv", 4), ("ids", ID_BYTES)):
        with open(files.data(build, kind), "r+b") as handle:
            handle.truncate(rows * width)  # drop what a crashed writer left past the header's rows
    cursor = db.execute("SELECT rowid, vec, chunk_id FROM vectors WHERE model = ? AND dim = ? AND rowid > ? ORDER BY rowid",
                        (key, dim, header["max_rowid"]))
    with open(files.data(build, "f32"), "ab") as matrix, open(files.data(build, "rowid"), "ab") as rowids, \
            open(files.data(build, "inv"), "ab") as inverse, open(files.data(build, "ids"), "ab") as ids:
        while batch := cursor.fetchmany(FETCH_ROWS):
            blob = b"".join(row[1] for row in batch)
            matrix.write(blob)
            rowids.write(_little(array("q", (row[0] for row in batch))))
            inverse.write(_little(inverse_norms(blob, dim)))
            ids.write(b"".join(_id_bytes(row[2]) for row in batch))
            rows += len(batch)
            header["max_rowid"] = batch[-1][0]
    header["rows"] = rows
    return header


def inverse_norms(blob: bytes, dim: int) -> array:
    """1/‖v‖ of each float32 row in ``blob`` (0.0 for a zero vector)."""
    np = numpy_or_none()
    if np is not None:
        matrix = np.frombuffer(blob, dtype="<f4").reshape(-1, dim).astype(np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        inv = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        return array("f", inv.astype(np.float32).tobytes()) if sys.byteorder == "little" else array("f", inv.tolist())
    values = vectorstore.unpack(blob)
    result = array("f")
    for first in range(0, len(values), dim):
        norm = math.sqrt(math.fsum(x * x for x in values[first : first + dim]))
        result.append(1.0 / norm if norm else 0.0)
    return result


def _write_mask(db, files: Files, header: dict, key: str, dim: int) -> None:
    """One byte per row: 1 when the row's chunk is in this sweep."""
    current = {row[0] for row in db.execute(
        "SELECT v.rowid FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id WHERE v.model = ? AND v.dim = ?",
        (key, dim))}
    rowids = _read_array(files.data(header["build"], "rowid"), "q", header["rows"])
    mask = bytes(1 if rowid in current else 0 for rowid in rowids)
    from bastion_agent.core.layout import write_private

    write_private(files.data(header["build"], "mask"), mask)
    header["mask_rows"] = header["rows"]
    header["current"] = sum(mask)


def _extend_mask(db, files: Files, header: dict, key: str, dim: int) -> None:
    rowids = _read_array(files.data(header["build"], "rowid"), "q", header["rows"])[header["mask_rows"] :]
    current = {row[0] for row in db.execute(
        "SELECT v.rowid FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id WHERE v.model = ? AND v.dim = ?"
        " AND v.rowid >= ?", (key, dim, rowids[0]))}
    added = bytes(1 if rowid in current else 0 for rowid in rowids)
    with open(files.data(header["build"], "mask"), "rb") as handle:
        mask = handle.read(header["mask_rows"])
    from bastion_agent.core.layout import write_private

    write_private(files.data(header["build"], "mask"), mask + added)
    header["mask_rows"] = header["rows"]
    header["current"] += sum(added)


def _remove_old_builds(files: Files, build: str) -> None:
    """Delete the data files of earlier builds (an open memory map keeps its own)."""
    for path in files.folder.glob(f"{files.name}.*.*"):
        if path.name.split(".")[1] != build and not path.name.endswith(".lock"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _create_empty(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))


def _little(values: array) -> bytes:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _read_array(path: Path, typecode: str, count: int) -> array:
    values = array(typecode)
    with open(path, "rb") as handle:
        values.frombytes(handle.read(count * values.itemsize))
    if sys.byteorder != "little":
        values.byteswap()
    return values


# Below this share of visible rows, a filtered scan gathers the visible rows
# and scores only them; above it, it scores every row and masks the others
# (a gather copies the rows, which costs more than scoring them in place).
GATHER_SHARE = 0.5


@dataclass(frozen=True)
class RowFilter:
    """The rows of a vector file one caller may see (``searching.visible`` builds it).

    ``positions`` are the visible current rows, ascending (a numpy int64
    array with numpy, else a list); ``mask`` is one flag per row (a numpy
    bool array, else bytes). A row outside the caller's groups is never
    scored, so no score or count depends on it.
    """

    positions: object
    mask: object

    @property
    def count(self) -> int:
        return len(self.positions)

    def allows(self, position: int) -> bool:
        return 0 <= position < len(self.mask) and bool(self.mask[position])


class VectorFile:
    """A read-only view of one build: the first ``rows`` rows, by memory map when numpy is there.

    ``top(query, n)`` gives ``(score, position)`` of the ``n`` best current
    rows by cosine, best first. Positions are stable within a build (rows
    are only appended), which is what the ANN index keys by.
    """

    def __init__(self, files: Files, header: dict, use_numpy: bool | None = None):
        self.files = files
        self.header = header
        self.dim = header["dim"]
        self.rows = header["rows"]
        self.current = header["current"]
        np = numpy_or_none() if use_numpy in (None, True) else None
        if use_numpy and np is None:
            raise StoreError("numpy is not installed: pip install 'bastion-agent[fast]'")
        self.np = np
        build = header["build"]
        if np is not None:
            self.matrix = self._map(np, "f32", "<f4", (self.rows, self.dim))
            self.rowids = self._map(np, "rowid", "<i8", (self.rows,))
            self.inverse = np.array(self._map(np, "inv", "<f4", (self.rows,)))
            mask = self._map(np, "mask", "u1", (self.rows,)).astype(bool)
            self.stale = None if mask.all() else ~mask
            self.weights = self.inverse
            self.ids = self._map(np, "ids", f"S{ID_BYTES}", (self.rows,))
        else:
            self.flat = _read_array(files.data(build, "f32"), "f", self.rows * self.dim)
            self.rowids = _read_array(files.data(build, "rowid"), "q", self.rows)
            self.inverse = _read_array(files.data(build, "inv"), "f", self.rows)
            with open(files.data(build, "mask"), "rb") as handle:
                self.mask = handle.read(self.rows)
            with open(files.data(build, "ids"), "rb") as handle:
                self.ids = handle.read(self.rows * ID_BYTES)

    def _map(self, np, kind: str, dtype: str, shape: tuple):
        """The file as a read-only array over a memory map (a plain ndarray view: ``memmap`` indexing costs
        microseconds in Python per access, which a query's few hundred accesses add up)."""
        if not shape[0]:
            return np.zeros(shape, dtype=dtype)
        return np.asarray(np.memmap(self.files.data(self.header["build"], kind), dtype=dtype, mode="r", shape=shape))

    def is_current_row(self, position: int) -> bool:
        if self.np is not None:
            return self.stale is None or not self.stale[position]
        return bool(self.mask[position])

    def top(self, query, n: int, first: int = 0, allowed: RowFilter | None = None) -> list[tuple[float, int]]:
        """The ``n`` best current rows at or after ``first``, by cosine with ``query``.

        With ``allowed``, only its rows are scored: the ``n`` best of them,
        never fewer because others ranked higher.
        """
        if n <= 0 or first >= self.rows:
            return []
        if allowed is not None:
            return self._top_allowed(query, n, first, allowed)
        if self.np is not None:
            return self._top_numpy(query, n, first)
        return self._top_python(query, n, first)

    def _top_allowed(self, query, n: int, first: int, allowed: RowFilter) -> list[tuple[float, int]]:
        if self.np is None:
            q = array("f", query)
            view, dim, mul, inverse = memoryview(self.flat), self.dim, operator.mul, self.inverse
            scored = ((sum(map(mul, q, view[i * dim : (i + 1) * dim])) * inverse[i], i)
                      for i in allowed.positions if i >= first)
            return heapq.nlargest(n, scored)
        np = self.np
        positions = allowed.positions
        if first:
            positions = positions[np.searchsorted(positions, first):]
        if not len(positions):
            return []
        if len(positions) < GATHER_SHARE * (self.rows - first):
            return self._best_of(query, n, positions)
        q = np.asarray(query, dtype=np.float32)
        scores = np.einsum("ij,j->i", self.matrix[first:], q)
        scores *= self.weights[first:]
        scores[~allowed.mask[first : self.rows]] = -np.inf
        return self._pick(scores, n, first)

    def _best_of(self, query, n: int, positions) -> list[tuple[float, int]]:
        """The ``n`` best of the chosen rows (ascending positions), gathered and scored."""
        np = self.np
        scores = np.einsum("ij,j->i", self.matrix[positions], np.asarray(query, dtype=np.float32))
        scores *= self.weights[positions]
        return [(score, int(positions[i])) for score, i in self._pick(scores, n, 0)]

    def _pick(self, scores, n: int, first: int) -> list[tuple[float, int]]:
        """``(score, index + first)`` of the ``n`` best finite scores, best first (ties: the lower index)."""
        np = self.np
        if n < len(scores):
            picked = np.argpartition(scores, len(scores) - n)[len(scores) - n :]
        else:
            picked = np.arange(len(scores))
        picked = picked[np.isfinite(scores[picked])]
        order = picked[np.argsort(-scores[picked], kind="stable")]
        return [(float(scores[i]), int(i) + first) for i in order]

    def _top_numpy(self, query, n: int, first: int) -> list[tuple[float, int]]:
        np = self.np
        q = np.asarray(query, dtype=np.float32)
        # einsum, not "@": a matrix-vector product through a threaded BLAS waits for
        # its worker threads, which costs milliseconds on a busy machine (bench/search/search_latency.py)
        scores = np.einsum("ij,j->i", self.matrix[first:], q)
        scores *= self.weights[first:]
        if self.stale is not None:
            scores[self.stale[first:]] = -np.inf
        return self._pick(scores, n, first)

    def _top_python(self, query, n: int, first: int) -> list[tuple[float, int]]:
        q = array("f", query)
        view = memoryview(self.flat)
        dim, mul, inverse, mask = self.dim, operator.mul, self.inverse, self.mask
        scored = (
            (sum(map(mul, q, view[i * dim : (i + 1) * dim])) * inverse[i], i)
            for i in range(first, self.rows) if mask[i]
        )
        return heapq.nlargest(n, scored)

    def rowid(self, position: int) -> int:
        return int(self.rowids[position])

    def chunk_ids_of(self, positions: list[int]) -> list[str]:
        """The chunk id of each listed row, from the ids file (no database page is read)."""
        if self.np is None:
            return [self.ids[p * ID_BYTES : (p + 1) * ID_BYTES].decode("ascii") for p in positions]
        if not positions:
            return []
        return [value.decode("ascii") for value in self.ids[self.np.asarray(positions, dtype=self.np.int64)].tolist()]

    def rowids_of(self, positions: list[int]) -> list[int]:
        """``rowid`` of each listed row, in one step (element by element, a memory map costs microseconds each)."""
        if self.np is None or not positions:
            return [self.rowids[p] for p in positions]
        return self.rowids[self.np.asarray(positions, dtype=self.np.int64)].tolist()

    def positions_of(self, rowids: list[int]) -> list[int | None]:
        """The row holding each ``vectors.rowid`` (rows are in rowid order); None where this build lacks it."""
        if self.np is None:
            found = [bisect.bisect_left(self.rowids, rowid) for rowid in rowids]
            stored = [self.rowids[p] if p < self.rows else None for p in found]
        else:
            found = self.np.searchsorted(self.rowids, self.np.asarray(rowids, dtype=self.np.int64)).tolist()
            stored = self.rowids[self.np.minimum(found, self.rows - 1)].tolist() if self.rows else [None] * len(found)
        return [p if p < self.rows and row == rowid else None for p, row, rowid in zip(found, stored, rowids)]

    def cosines(self, query, positions) -> list[float]:
        """The float64 cosine of ``query`` with each listed row (0.0 for a zero vector), read once from the map.

        The same arithmetic as scoring the database's BLOBs (the rows are
        those BLOBs' bytes), so numpy and pure Python report the same scores.
        ``positions`` is a list, or with numpy an int64 array.
        """
        if not len(positions):
            return []
        if self.np is None:
            query = [float(x) for x in query]
            query_norm = math.sqrt(math.fsum(x * x for x in query))
            dim, view = self.dim, memoryview(self.flat)
            return [_cosine(query, query_norm, view[p * dim : (p + 1) * dim]) for p in positions]
        return self._cosines_numpy(query, self.np.asarray(positions, dtype=self.np.int64)).tolist()

    def _cosines_numpy(self, query, positions):
        np = self.np
        matrix = np.asarray(self.matrix[positions], dtype=np.float64)
        q = np.asarray(query, dtype=np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix)) * math.sqrt(float(q @ q))
        dots = np.einsum("ij,j->i", matrix, q)
        return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)

    def ranked(self, query, positions, limit: int | None = None) -> list[tuple[float, int]]:
        """``(float64 cosine, position)`` of the listed rows, best first (ties by position); the first ``limit`` of them.

        With numpy the order is one ``lexsort`` over the scores: sorting
        Python tuples by a key function cost a sixth of the ANN path's own
        Python time for its hundred candidates.
        """
        if self.np is None or not len(positions):
            return sorted(zip(self.cosines(query, positions), positions), key=lambda item: (-item[0], item[1]))[:limit]
        np = self.np
        positions = np.asarray(positions, dtype=np.int64)
        scores = self._cosines_numpy(query, positions)
        order = np.lexsort((positions, -scores))[:limit]
        return list(zip(scores[order].tolist(), positions[order].tolist()))


def _cosine(query, query_norm: float, row) -> float:
    """Cosine of a query (floats) with one float32 row; 0.0 when either has no length."""
    norm = math.sqrt(math.fsum(map(operator.mul, row, row)))
    if norm == 0.0 or query_norm == 0.0:
        return 0.0
    return sum(map(operator.mul, query, row)) / (query_norm * norm)
