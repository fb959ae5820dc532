"""Output folders written with the old document ids (sha256 of the raw file).

Agents before this one named a document by the sha256 of the original
file's bytes. Next to a hit's sanitized text that hash is an offline oracle
(hash guesses of what was redacted until one matches), and so is every
``chunk_id`` made from it. A folder written that way is never mixed with
the current ids: each stage that meets it rebuilds what derives from the old
ids, and the first to do so in a process says so in one line on stderr.

- sanitize: a sanitized store without the private map
  (``extract/sanitized.jsonl``) whose documents are not named by the sha256
  of their text is rebuilt; its old files go as stale documents.
- chunk and embed refuse a sanitized store or ``chunks.jsonl`` whose ids do
  not match the texts ("run sanitize/chunk again"), which a sweep never meets.
- ``vectors.db``: migration ``m004_sanitized_ids`` (vectorstore.py) forgets
  every old id (windows, documents, failures, the keyword index) and keeps
  each vector only under its window's text; embed then gives those vectors
  the new chunk ids of the same text, and drops the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys

from bastion_agent.core import catalogue
from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import Layout

_announced: bool | None = None  # None: not inside a sweep, every stage says it

MESSAGE = ("this output folder was written with document ids taken from the raw files; rebuilding what derives "
           "from them (sanitized store, chunks, windows in vectors.db); vectors of unchanged text are reused")


def announce(stage: str, stream=None) -> None:
    """Print the one line (once per sweep: a sweep meets the old folder in several stages)."""
    global _announced
    if _announced:
        return
    if _announced is not None:
        _announced = True
    print(f"bastion_agent {stage}: {MESSAGE}", file=stream if stream is not None else sys.stderr, flush=True)


@contextlib.contextmanager
def once():
    """``with once():`` the stages run inside say it at most once."""
    global _announced
    _announced = False
    try:
        yield
    finally:
        _announced = None


def sanitized_store_is_legacy(layout: Layout) -> bool:
    """True when the sanitized listing names a document that is not the sha256 of its text."""
    try:
        documents = catalogue.read_documents(layout.sanitized_listing)
    except (OSError, StoreError):
        return False  # no listing, or one the stage that reads it refuses in its own words
    for document in documents:
        doc = document.doc
        try:
            data = layout.doc_text_path(layout.sanitized_dir, doc).read_bytes()
        except OSError:
            return True
        if hashlib.sha256(data).hexdigest() != doc:
            return True
    return False
