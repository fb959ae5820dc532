"""The derived vector file: one model's vectors as a memory-mappable float32 matrix.

Loading a million vectors from SQLite BLOBs takes seconds; opening a raw
matrix by memory map takes a millisecond. So beside ``vectors.db`` each
vector key gets, under ``<out>/index/``:

- ``<name>.json``: the header, the only file a reader trusts first. It names
  the build, how many rows the data files hold, and the database state they
  were built from (``store_id``, the two generation counters and
  ``max(rowid)`` of ``vectors``, see ``vectorstore_schema._m003_search_state``),
  and how many windows ``chunks`` held in that state (``windows``: every
  insert or delete of a window moves ``chunks_generation``, so a header in
  step with the database says how many windows wait for a vector without a
  count of the store, which cost a cold search 40-50 ms at a million);
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

This module is the writer (``refresh``). ``vectorfile_header`` names a
key's files and reads their header and lock; ``vectorfile_view`` reads a
build and scans it. Their public names are re-exported here (``__all__``),
so a caller names the vector file through this one module.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
from array import array
from pathlib import Path

from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout, write_json
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.vectorfile_header import (
    DATA_FILES,
    FORMAT,
    HEADER_KEYS,
    ID_BYTES,
    INDEX_DIR,
    Files,
    StoreState,
    fingerprint,
    numpy_or_none,
    read_array,
    read_header,
    read_state,
    writer_lock,
)
from bastion_agent.embedding.vectorfile_view import RowFilter, VectorFile

# the vector file's names, wherever they live: callers name them through this module
__all__ = ["INDEX_DIR", "Files", "RowFilter", "VectorFile", "fingerprint", "inverse_norms", "numpy_or_none",
           "read_header", "read_state", "refresh", "writer_lock"]

SPOT_CHECKS = 8


FETCH_ROWS = 16_384


def counts_in_step(db, layout: Layout, key: str) -> tuple[int | None, int | None]:
    """How many current vectors of ``key`` the derived files hold, and how many windows the store held, when
    their header is in step with ``db`` (else None each): what a keyword-only load reads instead of counting."""
    with vectorstore.transaction(db, write=False):
        header = read_header(Files.for_key(layout, key))
        if header is None or header.get("state") != read_state(db).as_dict():
            return None, None
        current = header.get("current")
        return (current if isinstance(current, int) and current >= 0 else None), windows_of(header)


def windows_of(header: dict | None) -> int | None:
    """The windows ``chunks`` held in the header's state (None: a header written before it said)."""
    windows = header.get("windows") if header is not None else None
    return windows if isinstance(windows, int) and not isinstance(windows, bool) and windows >= 0 else None


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
            header["windows"] = vectorstore.count(db, "SELECT COUNT(*) FROM chunks")  # in the state's snapshot
            write_json(files.header, header)
        _remove_old_builds(files, header["build"])
    return header


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
    rowids = read_array(files.data(header["build"], "rowid"), "q", header["rows"])
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
    import uuid  # here, not at the top: a search that finds the files current never makes a build id

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
    rowids = read_array(files.data(header["build"], "rowid"), "q", header["rows"])
    mask = bytes(1 if rowid in current else 0 for rowid in rowids)
    from bastion_agent.core.layout import write_private

    write_private(files.data(header["build"], "mask"), mask)
    header["mask_rows"] = header["rows"]
    header["current"] = sum(mask)


def _extend_mask(db, files: Files, header: dict, key: str, dim: int) -> None:
    rowids = read_array(files.data(header["build"], "rowid"), "q", header["rows"])[header["mask_rows"] :]
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
