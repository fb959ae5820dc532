"""What ``SearchIndex`` reads of a manifest, and nothing more: search tests over synthetic vectors need no manifest file."""

from __future__ import annotations

from types import SimpleNamespace

DIM = 16


def fake_manifest(key: str = "synthetic", dim: int = DIM, mode: str | None = None, ann_recall: float = 0.95):
    """What SearchIndex reads from a manifest."""
    return SimpleNamespace(embed=SimpleNamespace(vector_key=key, dim=dim), search_mode=mode, ann_recall=ann_recall)
