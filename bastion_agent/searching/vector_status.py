"""How the vector side of a search answers: through the ANN graph at its measured beam, or by the exact scan.

The recall the graph delivers is measured when it is built
(``embedding.ann_recall``); a person and a script can read it beside the
hits (``search --json``) and in serve's ``/healthz``, and when it falls
below the manifest's ``[search] ann_recall`` the exact scan answers and the
notice says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class VectorSearch:
    """The vector side's method, its measured recall@10 and beam, the target, and why the scan answers."""

    method: str  # "ann" (the graph) or "exact" (every row scanned)
    recall: float | None  # measured recall@10: 1.0 for the scan; None for a graph no build has measured
    beam: int | None  # the graph's search beam (None for the scan)
    target: float  # [search] ann_recall
    notice: str | None = None  # set when the scan answers because the graph's recall is below the target

    @classmethod
    def exact(cls, target: float, notice: str | None = None) -> "VectorSearch":
        return cls("exact", 1.0, None, target, notice)

    @classmethod
    def of_graph(cls, ann_index, target: float) -> "VectorSearch":
        measured = ann_index.calibration
        return cls("ann", measured.recall if measured is not None else None, ann_index.expansion, target)

    def as_dict(self) -> dict:
        return asdict(self)

    def hit_fields(self) -> dict:
        """What ``search --json`` adds to each hit of a vector or hybrid search."""
        return {"vector_search": self.method, "vector_recall": self.recall, "vector_beam": self.beam}
