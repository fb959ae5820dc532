"""Hybrid ranking and the relevance a person reads: a convex combination of calibrated evidence.

Reciprocal rank fusion, which hybrid search used before, gives the keyword
side's best window the same weight as the vector side's best, however weak
its match: "when do I have to pay the bill" found the invoices in vector
mode and lost them in hybrid to a window that shared "I", "do" and "the".
So each side's score is first turned into evidence between 0 and 1 that
means the same for every query, and the fused score is

    score = w * vector evidence + (1 - w) * keyword evidence

where ``w`` is the vector side's weight for this query (``query_weight``):
the prior ``VECTOR_WEIGHT``, shifted toward the side whose list separates
its first ten from the rest more. A fixed weight let hybrid fall below its
better half on a collection where one side's scores barely separate (a
hidden collection: 0.788 against vector's 0.796): that side's flat list
still took 40 % of every score.

- vector evidence: ``(cosine - floor) / (1 - floor)``, clipped to [0, 1],
  where ``floor`` is the median cosine between the query and windows of
  this store taken at random (``cosine_floor`` of
  ``SearchIndex.query_floor``): what an unrelated window scores for this
  query with this model. (Window against window scores higher with E5 than
  any query against a window, so that floor hid every cross-language hit.) A model whose cosines all sit near 0.8 and one whose cosines
  spread from 0 to 1 then read alike.
- keyword evidence: ``keyword.KeywordHit.evidence``, the BM25 score over the
  summed idf of the discriminating words searched: how much of the query a
  window holds. Stop words and words in most windows count for nothing.

A window only one side returned still gets the other side's evidence when
it can be had cheaply: a keyword hit's cosine is read from its stored
vector; a vector hit that the keyword side did not return has keyword
evidence 0 (its words were not among the best matches). Ties go to the
smaller chunk id.

``relevance`` (0-100) is the evidence the order was made by, in percent:
the fused evidence in hybrid, the vector evidence in vector mode, the
keyword evidence in keyword mode. It never rises down the list (when it was
the stronger side's evidence it read 85, 100, 76 for hits 1, 2, 3, which looks
like a bug), and means the same for every query (both evidences are
calibrated, so the blend is too): 100 in hybrid is a window both sides
call a full match. Each side's own evidence stays in ``vector_relevance``
and ``keyword_relevance``; ``score`` stays the ranking value.
"""

from __future__ import annotations

from dataclasses import dataclass

from bastion_agent.core import records

VECTOR_WEIGHT = 0.6  # the best nDCG@10 on Cranfield (docs/search.md): the prior, before each query's lists are read
FLOOR_SAMPLE = 48  # windows whose pairwise cosines calibrate the vector evidence
# How far each side's weight follows how well its list separates (``query_weight``): 0 keeps
# VECTOR_WEIGHT for every query; 1 scales each side's prior by its separation; below 0 the
# side whose list separates more gives up some weight. Each side's evidence already carries
# its separation (a rare-word match scores near 1 on the keyword side), so weighting the
# sharper side more counts it twice: on Cranfield every ADAPT above 0 lowered nDCG@10
# (0.404 fixed, 0.398 at 1, 0.387 at 3), and -0.25 was the best measured on both shared
# collections (Cranfield 0.406, SciFact sample 0.942 against 0.941 fixed: within noise,
# never below). bench/search/quality.py, docs/search.md.
ADAPT = -0.25
HEAD = 10  # the hits a person reads: a list separates when these stand out from the rest of it
WEIGHT_RANGE = (0.2, 0.9)  # neither side is ever ignored, nor trusted alone


@dataclass(frozen=True)
class Scored:
    """A ranked window before its text is read: the fused score and each side's own."""

    score: float
    chunk_id: str
    relevance: int
    vector_score: float | None = None
    vector_rank: int | None = None
    keyword_score: float | None = None
    keyword_rank: int | None = None
    vector_relevance: int | None = None  # the vector side's evidence in percent, where it was had
    keyword_relevance: int | None = None  # the keyword side's


def scored(score: float, chunk_id: str, relevance: int, vector_score: float | None = None,
           vector_rank: int | None = None, keyword_score: float | None = None, keyword_rank: int | None = None,
           vector_relevance: int | None = None, keyword_relevance: int | None = None) -> Scored:
    """``Scored(...)``, the same record, made by filling its fields at once (``records.filled``: ten to a
    hundred windows a query; ``test_fusion`` holds these parameters to the record's fields, in order, with
    their defaults)."""
    return records.filled(Scored, {"score": score, "chunk_id": chunk_id, "relevance": relevance,
                                   "vector_score": vector_score, "vector_rank": vector_rank,
                                   "keyword_score": keyword_score, "keyword_rank": keyword_rank,
                                   "vector_relevance": vector_relevance, "keyword_relevance": keyword_relevance})


def vector_evidence(cosine: float, floor: float) -> float:
    """How far a cosine stands above what an unrelated window scores, from 0 to 1."""
    if floor >= 1.0:
        return 0.0
    return min(1.0, max(0.0, (cosine - floor) / (1.0 - floor)))


def percent(evidence: float) -> int:
    return int(round(100 * min(1.0, max(0.0, evidence))))


def cosine_floor(cosines: list[float]) -> float:
    """The median of cosines between windows taken at random (0 when there are none)."""
    return median(cosines) if cosines else 0.0


def median(values: list[float]) -> float:
    """The middle value, or the mean of the two middle ones: ``statistics.median``'s arithmetic, without
    importing ``statistics`` (and ``fractions``, ``decimal``) into every cold vector search."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def vector_only(ranked: list[tuple[float, str]], floor: float) -> list[Scored]:
    found = []
    for rank, (cos, chunk) in enumerate(ranked, start=1):
        relevance = percent(vector_evidence(cos, floor))
        found.append(scored(cos, chunk, relevance, cos, rank, vector_relevance=relevance))
    return found


def keyword_only(hits) -> list[Scored]:
    return [scored(hit.bm25, hit.chunk_id, percent(hit.evidence), keyword_score=hit.bm25, keyword_rank=rank,
                   keyword_relevance=percent(hit.evidence))
            for rank, hit in enumerate(hits, start=1)]


def separation(evidence: list[float], depth: int) -> float:
    """How far the first ``HEAD`` of a ranked list stand out from the rest of its ``depth`` (0 to 1).

    A list shorter than ``depth`` is padded with zeros: the windows a side
    did not return have no evidence from it (a keyword query whose rare
    words only a few windows hold separates well).
    """
    if depth <= HEAD or not evidence:
        return 0.0
    head = evidence[:HEAD] + [0.0] * max(0, HEAD - len(evidence))
    tail = evidence[HEAD:depth]
    return max(0.0, sum(head) / HEAD - sum(tail) / (depth - HEAD))


def query_weight(by_vector: list[tuple[float, str]], by_keyword, floor: float, prior: float = VECTOR_WEIGHT,
                 adapt: float = ADAPT) -> float:
    """The vector side's weight for this query: its prior, shifted by how far each side's list separates.

    A side whose best windows score much like its hundredth says little
    about which windows matter; a side whose best windows stand out says a
    lot, and already says it through its evidence (its first windows score
    high). The weights are the priors scaled by each side's separation to
    the power ``adapt`` (by default below 0: the sharper side gives up a
    little, so that its scale does not count twice and a flat side is not
    drowned), normalised, and kept within ``WEIGHT_RANGE``; a side with no
    list leaves the prior unchanged.
    """
    depth = max(len(by_vector), len(by_keyword))
    spread_v = separation([vector_evidence(cos, floor) for cos, _ in by_vector], depth)
    spread_k = separation([hit.evidence for hit in by_keyword], depth)
    if adapt == 0 or spread_v <= 0 or spread_k <= 0:
        return prior
    v, k = prior * spread_v ** adapt, (1 - prior) * spread_k ** adapt
    low, high = WEIGHT_RANGE
    return min(high, max(low, v / (v + k)))


def fuse(by_vector: list[tuple[float, str]], by_keyword, other_cosines: dict[str, float], floor: float, n: int,
         weight: float | None = None) -> list[Scored]:
    """The ``n`` best windows of both rankings by the convex combination of their evidence.

    ``by_vector`` is ``(cosine, chunk_id)`` best first; ``by_keyword`` is
    ``keyword.KeywordHit``s best first; ``other_cosines`` holds the cosine
    of keyword hits the vector side did not return. ``weight`` is the
    vector side's (None: ``query_weight``, read from the two lists).
    """
    if weight is None:
        weight = query_weight(by_vector, by_keyword, floor)
    vector_rank = {chunk: rank for rank, (_, chunk) in enumerate(by_vector, start=1)}
    cosine_of = {chunk: cos for cos, chunk in by_vector}
    keyword_rank = {hit.chunk_id: rank for rank, hit in enumerate(by_keyword, start=1)}
    keyword_of = {hit.chunk_id: hit for hit in by_keyword}
    fused_of = []
    for chunk in {**cosine_of, **keyword_of}:
        cos = cosine_of.get(chunk, other_cosines.get(chunk))
        v = vector_evidence(cos, floor) if cos is not None else 0.0
        hit = keyword_of.get(chunk)
        k = hit.evidence if hit else 0.0
        fused_of.append((weight * v + (1 - weight) * k, chunk, cos, v, hit, k))
    fused_of.sort(key=lambda item: (-item[0], item[1]))
    return [scored(fused, chunk, percent(fused), cosine_of.get(chunk), vector_rank.get(chunk),
                   hit.bm25 if hit else None, keyword_rank.get(chunk),
                   percent(v) if cos is not None else None, percent(k))
            for fused, chunk, cos, v, hit, k in fused_of[:n]]  # only the hits returned become rows
