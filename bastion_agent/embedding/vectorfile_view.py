"""Reading one build of the vector file: a view of its rows and the exact scan by cosine.

Apart from ``vectorfile.refresh``, which writes the files, because a
search reads them many times for each time they are written, and reads
them the same way whether numpy maps them or the pure scan reads them.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from array import array
from dataclasses import dataclass

from bastion_agent.core.errors import StoreError
from bastion_agent.embedding.vectorfile_header import ID_BYTES, Files, numpy_or_none, read_array

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
            self.flat = read_array(files.data(build, "f32"), "f", self.rows * self.dim)
            self.rowids = read_array(files.data(build, "rowid"), "q", self.rows)
            self.inverse = read_array(files.data(build, "inv"), "f", self.rows)
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
        if norms.all():  # no zero vector (the rule): the same quotients, without the mask and its array
            return dots / norms
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
