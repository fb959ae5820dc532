"""The stage contract's facade: the ``chunk``, ``embed`` and ``search`` stages by the names docs/contract.md gives them.

The code lives in the part it belongs to (docs/architecture.md): windows and
ids in ``chunking.chunker``, the embed stage in ``embedding.embed_stage``, search in
``searching.searcher``, the records that cross stages (``Hit``, ``ChunkRow``) in
``core.records``, reading the sanitized store in ``sanitizing.sanitized_store``. This
module only re-exports their public names, so ``from bastion_agent import
embed`` and ``bastion_agent/test_embed.py`` keep working; the package's own
code imports from where a name lives.
"""

from __future__ import annotations

from bastion_agent.chunking.chunker import (  # noqa: F401
    CHUNKER_VERSION,
    PIECE_TOKENS,
    TOKEN_RE,
    Window,
    chunk_document,
    chunk_id,
    run_chunk,
    windows,
)
from bastion_agent.core.records import ChunkRow, Hit  # noqa: F401
from bastion_agent.embedding.embed_stage import (  # noqa: F401
    all_embedded,
    current_windows,
    embed_missing,
    refresh_derived,
    run_embed,
)
from bastion_agent.sanitizing.sanitized_store import (  # noqa: F401
    LEGACY_STORE,
    read_sanitized_text,
    sanitized_documents,
)
from bastion_agent.searching.searcher import (  # noqa: F401
    DEFAULT_K,
    DEFAULT_MODE,
    FUSION_CANDIDATES,
    RESCORE_MARGIN,
    Answer,
    SearchIndex,
    answer,
    cosine,
    cosines,
    embed_query,
    fallback_notice,
    needs_vector,
    resolve_mode,
    search,
    store_version,
    top_k,
)

__all__ = ['TOKEN_RE', 'CHUNKER_VERSION', 'Window', 'ChunkRow', 'windows', 'PIECE_TOKENS', 'chunk_id', 'chunk_document', 'run_chunk', 'sanitized_documents', 'LEGACY_STORE', 'read_sanitized_text', 'run_embed', 'all_embedded', 'embed_missing', 'current_windows', 'refresh_derived', 'DEFAULT_K', 'Hit', 'Answer', 'DEFAULT_MODE', 'FUSION_CANDIDATES', 'RESCORE_MARGIN', 'needs_vector', 'resolve_mode', 'SearchIndex', 'cosines', 'store_version', 'embed_query', 'search', 'fallback_notice', 'answer', 'cosine', 'top_k']
