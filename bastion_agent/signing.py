"""Manifest signatures (OpenSSH SSHSIG). Placeholder until the signing issue lands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import SignatureError


@dataclass(frozen=True)
class SignatureStatus:
    """Whether the manifest was signed, and by which trusted principal."""

    signed: bool = False
    principal: str | None = None


def check_manifest(path: Path, raw: bytes, *, require_signed: bool) -> SignatureStatus:
    """Verify ``MANIFEST.sig`` over exactly ``raw``; refuse what does not verify."""
    sig = Path(str(path) + ".sig")
    if require_signed or sig.exists():
        raise SignatureError(f"manifest {path}: signature checking is not available in this build")
    return SignatureStatus()
