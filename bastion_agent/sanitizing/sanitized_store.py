"""Reading the sanitized store, for every stage after sanitize.

The listing comes after the sanitize-first guard (no text extract has read may
be missing from it), and each text is checked against its id, the sha256 of
the sanitized text, so a store written by an older agent or changed by hand is
refused with one line rather than embedded.
"""

from __future__ import annotations

import hashlib
import os

from bastion_agent.core.errors import StoreError
from bastion_agent.core import catalogue
from bastion_agent.core.layout import Layout
from bastion_agent.core.records import Document


def sanitized_documents(layout: Layout) -> list[Document]:
    """The sanitized listing, sorted by doc, after the sanitize-first guard.

    Chunk reads only sanitized text. It refuses to run when the sanitized
    store is missing, or when the extract store holds a text that sanitize
    has not mapped to a document of the listing (sanitize has not run since
    extract). A text sanitize skipped (over its budget: ``skipped.py``) was
    handled: the sweep goes on without it rather than stopping for good. When the extract store has been deleted after sanitizing, the
    sanitized store stands alone.
    """
    from bastion_agent.sanitizing import skipped
    from bastion_agent.sanitizing.sanitize import read_map

    if not layout.sanitized_listing.exists():
        raise StoreError(f"no sanitized store at {layout.sanitized_dir}: run sanitize first (chunk reads only sanitized text)")
    documents = catalogue.read_documents(layout.sanitized_listing)
    if layout.extract_listing.exists():
        sanitized = {document.doc for document in documents}
        mapped = read_map(layout)
        extracted = {row.key for row in catalogue.read_extract_listing(layout.extract_listing) if row.status == "extracted"}
        handled = skipped.read_keys(layout)
        missing = [key for key in extracted
                   if key not in handled and (key not in mapped or mapped[key].doc not in sanitized)]
        if missing:
            raise StoreError(
                f"the sanitized store lacks {len(missing)} text(s) that extract has read: run sanitize first"
            )
    return documents


LEGACY_STORE = ("the sanitized store names its documents by the raw files (an older agent wrote it), "
                "or was changed by hand: run sanitize again")


def read_checked_text(folder: str, doc: str) -> str:
    """A sanitized text, checked against its id (the sha256 of the text), without a Path per document."""
    try:
        with open(os.path.join(folder, doc + ".txt"), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise StoreError(f"the sanitized store lacks document {doc[:12]}: run sanitize again") from None
    if hashlib.sha256(data).hexdigest() != doc:
        raise StoreError(LEGACY_STORE)
    return data.decode("utf-8")


def read_sanitized_text(layout: Layout, doc: str) -> str:
    return read_checked_text(str(layout.sanitized_dir), doc)


def documents_to_erase(layout: Layout) -> set[str]:
    """Documents sanitize superseded, whose windows and vectors are still to be erased (``embedding.erase``).

    The list lives in the private extract store, like the map it comes from:
    an old document's id is the hash of text that the current sanitizer would
    redact. It holds ids, never text.
    """
    from bastion_agent.sanitizing.sanitize import read_erase_list

    return read_erase_list(layout)


def documents_erased(layout: Layout, docs: set[str]) -> None:
    """Forget documents once their windows and vectors are erased (others added meanwhile stay)."""
    from bastion_agent.sanitizing.sanitize import read_erase_list, write_erase_list

    write_erase_list(layout, read_erase_list(layout) - set(docs))
