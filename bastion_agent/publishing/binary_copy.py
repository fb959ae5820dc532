"""PostgreSQL's binary COPY of a bastion's windows: the tuples, and one COPY sent in pieces.

Apart from the publisher because it is a wire format: the row layout of
``COPY_COLUMNS`` and pgvector's binary vector, which the owner's bulk load,
the publishing role's staging table and the benchmarks all send.
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Iterable, Iterator

from bastion_agent.publishing.bastion_documents import LocalDocument

COPY_COLUMNS = ("bastion", "model", "chunk_id", "doc", "idx", "start", '"end"', "text", "embedding")


STAGING_COLUMNS = COPY_COLUMNS[2:]


STAGING = "publish_staging"  # schema_access.STAGING: the temp table open_staging() makes


COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)


COPY_TRAILER = struct.pack(">h", -1)


def _text_field(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">i", len(data)) + data


def _vector_field(blob: bytes) -> bytes:
    """pgvector's binary form: int16 dim, int16 0, big-endian float4s (from our little-endian blob)."""
    values = array("f")
    values.frombytes(blob)
    if sys.byteorder == "little":
        values.byteswap()
    return struct.pack(">ihh", 4 + 4 * len(values), len(values), 0) + values.tobytes()


_INTS = struct.Struct(">ii" + "ii" + "ii")


def copy_rows(bastion: str | None, model: str | None, documents: Iterable[LocalDocument]) -> Iterator[bytes]:
    """The binary COPY tuples of these documents' windows (``COPY_COLUMNS``, in order; ``STAGING_COLUMNS``
    when ``bastion`` and ``model`` are None: the functions that read the staging table add them)."""
    if bastion is None or model is None:
        head = struct.pack(">h", len(STAGING_COLUMNS))
    else:
        head = struct.pack(">h", len(COPY_COLUMNS)) + _text_field(bastion) + _text_field(model)
    for document in documents:
        doc = _text_field(document.doc)
        for window in document.windows:
            yield b"".join((head, _text_field(window.chunk_id), doc, _INTS.pack(4, window.idx, 4, window.start, 4,
                            window.end), _text_field(window.text), _vector_field(window.vec)))


def copy_into(cur, table: str, rows: Iterable[bytes], columns=COPY_COLUMNS, pause: bool = False) -> None:
    """One binary COPY of ``rows`` (``copy_rows`` tuples) into ``table``, sent in pieces of about 1 MiB.

    ``pause``: the test hook, inside the COPY with every row sent (nothing
    committed) until a line arrives on stdin or the process is killed.
    """
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(COPY_HEADER)
        pending, size = [], 0
        for row in rows:
            pending.append(row)
            size += len(row)
            if size > 1 << 20:
                copy.write(b"".join(pending))
                pending, size = [], 0
        copy.write(b"".join(pending))
        if pause:
            print("bastion_agent publish: paused inside a transaction (test hook)", file=sys.stderr, flush=True)
            sys.stdin.readline()
        copy.write(COPY_TRAILER)
