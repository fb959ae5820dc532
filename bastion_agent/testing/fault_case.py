"""A sanitized store chunked into windows of 8 tokens, embedded against a failing server with a fake clock.

``FakeTime`` is the injected clock and sleep: sleeping advances the clock
at once, so no test waits out a backoff and the tuner's timings are exact.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import unittest

from bastion_agent import embed
from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout
from bastion_agent.embedding import vectorstore
from bastion_agent.embedding.batch_sender import RetryPolicy
from bastion_agent.testing.stub_server import bag_of_words
from bastion_agent.testing.testsupport import TempFolder, clean_env, write_manifest, write_sanitized_store

POISON = "poison"


class FakeTime:
    """An injected clock and sleep: sleeping advances the clock at once."""

    def __init__(self, on_sleep=None):
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.lock = threading.Lock()
        self.on_sleep = on_sleep

    def clock(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)
            self.now += seconds
            count = len(self.sleeps)
        if self.on_sleep:
            self.on_sleep(count)


def documents(count: int, poison_in: int | None = None) -> dict[str, list[str]]:
    """``count`` documents of 24 distinct words (3 windows of 8 each); one word is ``poison`` if asked."""
    docs = {}
    for d in range(count):
        words = [f"d{d}w{j}" for j in range(24)]
        if d == poison_in:
            words[10] = POISON
        docs[" ".join(words)] = [f"folder/doc{d}.txt"]
    return docs


def has_poison(texts) -> bool:
    return any(POISON in text for text in texts)


class FaultCase(TempFolder, unittest.TestCase):
    """A sanitized store of ``docs`` chunked into windows of 8 tokens, no overlap."""

    doc_count = 4
    poison_in: int | None = None

    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest_path = write_manifest(self.tmp, size=8, overlap=0)
        self.layout = Layout(self.tmp / "out")
        ids = write_sanitized_store(self.layout, self.documents())
        self.doc_words = {doc: text.split() for text, doc in ids.items()}
        with clean_env():
            self.manifest = manifest_module.load(self.manifest_path)
        embed.run_chunk(self.manifest, self.layout)
        self.time = FakeTime()

    def documents(self) -> dict[str, list[str]]:
        """The store's documents: a subclass that needs other words overrides this."""
        return documents(self.doc_count, self.poison_in)

    def embed_with(self, stub, deadline: float = 60.0, **env):
        policy = RetryPolicy(deadline=deadline, sleep=self.time.sleep, clock=self.time.clock, rand=lambda: 0.5)
        with clean_env(EMBED_URL=stub.url, **env):
            return embed.run_embed(self.manifest, self.layout, retry=policy)

    def summary(self) -> dict:
        return json.loads(self.layout.summary_path("embed").read_text())

    def stored(self) -> dict[str, list[float]]:
        """chunk text -> stored vector, for the manifest's model."""
        with sqlite3.connect(self.layout.vectors_db) as db:
            rows = db.execute(
                "SELECT c.text, v.vec FROM vectors v JOIN chunks c USING (chunk_id) WHERE v.model = ?",
                (self.manifest.embed.vector_key,),
            ).fetchall()
        return {text: list(vectorstore.unpack(blob)) for text, blob in rows}

    def chunk_texts(self) -> list[str]:
        with sqlite3.connect(self.layout.vectors_db) as db:
            return [row[0] for row in db.execute("SELECT text FROM chunks")]

    def assert_every_vector_right(self, except_texts=()):
        stored = self.stored()
        for text in self.chunk_texts():
            if text in except_texts:
                self.assertNotIn(text, stored)
            else:
                self.assertEqual(stored.get(text), bag_of_words(text, 64), text)
