"""A stand-in for the embedded model's ``encode``: the model server's HTTP layer in milliseconds.

Unit bag-of-words vectors of the real model's dimension, so the model
server, ``init`` and the hints can be tested without loading the model.
"""

from __future__ import annotations

import math

from bastion_agent.testing.stub_server import bag_of_words

DIM = 384  # the dimension of the model the server embeds


class FakeModel:
    """``encode(texts)``: unit bag-of-words vectors; remembers every text it was given."""

    def __init__(self, dim: int = DIM):
        self.dim = dim
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        vectors = []
        for text in texts:
            vector = bag_of_words(text, self.dim)
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vectors.append([x / norm for x in vector])
        return vectors
