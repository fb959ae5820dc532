"""Manifest signatures: OpenSSH SSHSIG, checked by ``ssh-keygen`` itself.

An operator decides what a bastion may index by signing its manifest with an
SSH key (``MANIFEST.sig``, exactly what ``ssh-keygen -Y sign -n
bastion-manifest`` writes). The agent trusts only what the operator's
environment names: ``BASTION_ALLOWED_SIGNERS``, an OpenSSH allowed_signers
file, and optionally ``BASTION_REVOKED_SIGNERS``, a revocation list. The
namespace is fixed here and the principal is looked up in the trust file, so
nothing the manifest (or its signature) says can choose either.

The decision is always ``ssh-keygen``'s, run by absolute path from a system
folder (never ``$PATH``, which a user or a stray tool could shadow) with no
shell and a timeout. It is fed exactly the bytes the manifest loader then
parses, and a private copy of the signature read once, so neither file can
change between the check and its use. This module parses the signature only to
explain a refusal in one line (garbage, wrong namespace, unknown key); it never
accepts anything on its own.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from bastion_agent.core.errors import SignatureError
from bastion_agent.core.layout import write_private

NAMESPACE = "bastion-manifest"
ALLOWED_SIGNERS_ENV = "BASTION_ALLOWED_SIGNERS"
REVOKED_SIGNERS_ENV = "BASTION_REVOKED_SIGNERS"
SIGNATURE_SUFFIX = ".sig"

# ssh-keygen is looked up only here, in this order; $PATH is not consulted.
SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/local/bin", "/opt/homebrew/bin")
VERIFY_TIMEOUT_S = 30
# Signing may wait for an operator typing a passphrase or touching a key.
SIGN_TIMEOUT_S = 300
# An SSHSIG is well under 4 KiB even for RSA-4096; anything far larger is garbage.
MAX_SIGNATURE_BYTES = 64 * 1024

_ARMOR_BEGIN = b"-----BEGIN SSH SIGNATURE-----"
_ARMOR_END = b"-----END SSH SIGNATURE-----"
_MAGIC = b"SSHSIG"
# ssh-keygen's generic failure lines; the specific reason is on another line.
_GENERIC_LINES = ("could not verify signature", "no principal matched")
# verify/find-principals need no user settings; a fixed locale keeps messages stable.
_VERIFY_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class SignatureStatus:
    """Whether the manifest was signed, and by which trusted principal.

    ``principal`` is the allowed_signers entry that accepted the signature
    (a pattern such as ``*@example.com`` when the file lists one); ``key`` is
    the signing key's ``SHA256:`` fingerprint.
    """

    signed: bool = False
    principal: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class SignatureInfo:
    """What an SSHSIG blob says about itself (for messages, never for trust)."""

    namespace: str
    key_type: str
    public_key: bytes
    hash_algorithm: str

    @property
    def fingerprint(self) -> str:
        """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
        digest = base64.b64encode(hashlib.sha256(self.public_key).digest()).decode("ascii")
        return "SHA256:" + digest.rstrip("=")


@dataclass(frozen=True)
class Trust:
    """The operator's trust files, named by the environment only."""

    allowed_signers: Path
    revoked: Path | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "Trust":
        """Read ``BASTION_ALLOWED_SIGNERS`` (required) and ``BASTION_REVOKED_SIGNERS``."""
        environ = os.environ if environ is None else environ
        allowed = environ.get(ALLOWED_SIGNERS_ENV, "").strip()
        if not allowed:
            raise SignatureError(
                f"{ALLOWED_SIGNERS_ENV} is not set: point it at the OpenSSH allowed_signers file "
                "of the keys you trust to sign manifests (see docs/signing.md)"
            )
        revoked = environ.get(REVOKED_SIGNERS_ENV, "").strip()
        return cls(
            allowed_signers=_readable_file(allowed, ALLOWED_SIGNERS_ENV),
            revoked=_readable_file(revoked, REVOKED_SIGNERS_ENV) if revoked else None,
        )

    def mentions(self, info: SignatureInfo) -> tuple[bool, bool]:
        """(listed in allowed_signers, listed in the revocation file) — for messages only."""
        blob = base64.b64encode(info.public_key)
        listed = blob in _read_or_empty(self.allowed_signers)
        revoked_text = _read_or_empty(self.revoked) if self.revoked else b""
        return listed, blob in revoked_text or info.public_key in revoked_text


def signature_path(manifest_path: str | os.PathLike) -> Path:
    """``MANIFEST.sig``: the detached signature beside the manifest."""
    return Path(str(manifest_path) + SIGNATURE_SUFFIX)


def check_manifest(path: Path, raw: bytes, *, require_signed: bool) -> SignatureStatus:
    """Verify ``MANIFEST.sig`` over exactly ``raw``; refuse what does not verify.

    No ``.sig``: unsigned, allowed unless ``require_signed``. A ``.sig`` that
    is there is always checked and must verify, flag or not: a signature that
    fails (or that cannot be checked because no trust file is configured) means
    the manifest is not what its signer approved.
    """
    sig_path = signature_path(path)
    signature = _read_signature(sig_path)
    if signature is None:
        if require_signed:
            raise SignatureError(
                f"manifest {path} is not signed (no {sig_path.name}) and --require-signed is set: "
                f"sign it with `python3 -m bastion_agent sign {path} --key KEY`"
            )
        return SignatureStatus()
    try:
        trust = Trust.from_environment()
    except SignatureError as exc:
        raise SignatureError(f"manifest {path} has a signature ({sig_path.name}) that cannot be checked: {exc}") from None
    return verify_bytes(raw, signature, trust, label=f"manifest {path}")


def verify_bytes(raw: bytes, signature: bytes, trust: Trust, *, label: str) -> SignatureStatus:
    """Check ``signature`` over ``raw`` against ``trust``; return who signed it."""
    info = _parse_or_refuse(signature, label)
    if info.namespace != NAMESPACE:
        raise SignatureError(
            f"{label}: the signature is for namespace {info.namespace!r}, not {NAMESPACE!r}: "
            f"re-sign it with `python3 -m bastion_agent sign`"
        )
    with _private_copy(signature) as sig_copy:
        principals, detail = _find_principals(sig_copy, trust)
        if not principals:
            raise SignatureError(_untrusted_message(label, info, trust, detail))
        for principal in principals:
            ok, detail = _verify_as(principal, raw, sig_copy, trust)
            if ok:
                return SignatureStatus(signed=True, principal=principal, key=info.fingerprint)
    raise SignatureError(_rejected_message(label, info, principals[0], trust, detail))


def parse_signature(data: bytes) -> SignatureInfo:
    """Decode an armored SSHSIG (PROTOCOL.sshsig); ``ValueError`` if it is not one."""
    text = data.strip()
    if not text.startswith(_ARMOR_BEGIN) or not text.endswith(_ARMOR_END):
        raise ValueError("it is not an SSH signature (no -----BEGIN SSH SIGNATURE----- armor)")
    body = b"".join(text[len(_ARMOR_BEGIN) : -len(_ARMOR_END)].split())
    try:
        blob = base64.b64decode(body, validate=True)
    except binascii.Error:
        raise ValueError("its body is not valid base64") from None
    reader = _Reader(blob)
    if reader.take(len(_MAGIC)) != _MAGIC:
        raise ValueError("it does not start with the SSHSIG magic")
    version = reader.uint32()
    if version != 1:
        raise ValueError(f"SSHSIG version {version} is not supported")
    public_key = reader.string()
    namespace = reader.string()
    reader.string()  # reserved
    hash_algorithm = reader.string()
    reader.string()  # the signature itself: ssh-keygen checks it
    reader.end()
    key_type = _Reader(public_key).string()
    return SignatureInfo(
        namespace=_text(namespace, "namespace"),
        key_type=_text(key_type, "key type"),
        public_key=public_key,
        hash_algorithm=_text(hash_algorithm, "hash algorithm"),
    )


def sign_file(manifest: Path, raw: bytes, key: Path) -> tuple[Path, SignatureInfo]:
    """Sign ``raw``, the bytes of ``manifest`` read once by the caller, with ``key``; write ``MANIFEST.sig``.

    ssh-keygen signs a private copy of those bytes (as ``ssh-keygen -Y sign
    -n bastion-manifest``), so the signature covers exactly what was read;
    its terminal stays the operator's for a passphrase prompt. The ``.sig``
    replaces any older one atomically.
    """
    if not key.is_file():
        raise SignatureError(f"signing key {key}: no such file (make one with `ssh-keygen -t ed25519 -f {key}`)")
    import tempfile  # here, not at the top: a search that checks no signature never loads it

    with tempfile.TemporaryDirectory(prefix="bastion-sign-") as tmp:
        copy = Path(tmp) / "manifest"
        copy.write_bytes(raw)
        args = ["-Y", "sign", "-f", str(key.resolve()), "-n", NAMESPACE, str(copy)]
        result = _run(args, data=None, timeout=SIGN_TIMEOUT_S, env=None)
        out = Path(str(copy) + SIGNATURE_SUFFIX)
        if result.returncode != 0 or not out.is_file():
            raise SignatureError(f"ssh-keygen could not sign with {key}{_detail(_reason(result))}")
        signature = out.read_bytes()
    try:
        info = parse_signature(signature)
    except ValueError as exc:
        raise SignatureError(f"ssh-keygen wrote an unreadable signature: {exc}") from None
    target = signature_path(manifest)
    _write_signature(target, signature, like=manifest)
    return target, info


def ssh_keygen_path() -> str | None:
    """The absolute path of ``ssh-keygen`` in a system folder, or None."""
    for folder in SYSTEM_BIN_DIRS:
        candidate = os.path.join(folder, "ssh-keygen")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def _private_copy(signature: bytes):
    """The signature as a file in a fresh 0700 folder, for ssh-keygen's ``-s``."""
    import tempfile  # here, not at the top: a search that checks no signature never loads it

    try:
        tmp = tempfile.TemporaryDirectory(prefix="bastion-sig-")
        sig_copy = Path(tmp.name) / "manifest.sig"
        sig_copy.write_bytes(signature)
    except OSError as exc:
        raise SignatureError(f"cannot copy the signature to a private temporary folder ({exc.strerror})") from None
    with tmp:
        yield sig_copy


def _read_signature(sig_path: Path) -> bytes | None:
    """The ``.sig`` bytes, None when there is none; refuse one we cannot read."""
    if not os.path.lexists(sig_path):
        return None
    from bastion_agent.core.confine import NotRegular, read_regular

    try:
        data = read_regular(sig_path, MAX_SIGNATURE_BYTES)
    except NotRegular:  # a FIFO would block every command for ever
        raise SignatureError(f"signature {sig_path} is not a regular file (a FIFO, socket or device): remove it") from None
    except OSError as exc:
        raise SignatureError(f"signature {sig_path} exists but cannot be read ({exc.strerror}): fix or remove it") from None
    if len(data) > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"signature {sig_path} is larger than {MAX_SIGNATURE_BYTES} bytes: it is not an SSH signature")
    return data


def _readable_file(value: str, variable: str) -> Path:
    path = Path(value).expanduser().absolute()
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except FileNotFoundError:
        raise SignatureError(f"{variable}={value}: no such file") from None
    except IsADirectoryError:
        raise SignatureError(f"{variable}={value}: is a folder, expected an allowed_signers file") from None
    except OSError as exc:
        raise SignatureError(f"{variable}={value}: cannot read it ({exc.strerror})") from None
    return path


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _parse_or_refuse(signature: bytes, label: str) -> SignatureInfo:
    try:
        return parse_signature(signature)
    except ValueError as exc:
        raise SignatureError(f"{label}: its .sig is unusable: {exc}; re-sign it with `python3 -m bastion_agent sign`") from None


def _find_principals(sig_copy: Path, trust: Trust) -> tuple[list[str], str]:
    """Principals the trust file lists for the signature's key, valid now."""
    args = ["-Y", "find-principals", "-s", str(sig_copy), "-f", str(trust.allowed_signers)]
    result = _run(args, data=b"", timeout=VERIFY_TIMEOUT_S, env=_VERIFY_ENV)
    if result.returncode != 0:
        return [], _reason(result)
    found: list[str] = []
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        principal = line.strip()
        if principal and principal not in found and principal.isprintable():
            found.append(principal)
    return found, ""


def _verify_as(principal: str, raw: bytes, sig_copy: Path, trust: Trust) -> tuple[bool, str]:
    args = ["-Y", "verify", "-f", str(trust.allowed_signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig_copy)]
    if trust.revoked is not None:
        args += ["-r", str(trust.revoked)]
    result = _run(args, data=raw, timeout=VERIFY_TIMEOUT_S, env=_VERIFY_ENV)
    return result.returncode == 0, _reason(result)


def _untrusted_message(label: str, info: SignatureInfo, trust: Trust, detail: str) -> str:
    listed, _ = trust.mentions(info)
    if not listed:
        return (
            f"{label}: signed by key {info.fingerprint} ({info.key_type}), which {trust.allowed_signers} "
            f"does not list: add it there if you trust it"
        )
    return (
        f"{label}: key {info.fingerprint} is in {trust.allowed_signers} but not trusted now for "
        f"namespace {NAMESPACE!r} (check its valid-after, valid-before and namespaces options){_detail(detail)}"
    )


def _rejected_message(label: str, info: SignatureInfo, principal: str, trust: Trust, detail: str) -> str:
    """Why ``ssh-keygen -Y verify`` refused a signature whose key the trust file lists."""
    _, revoked = trust.mentions(info)
    who = f"the signature by {principal} (key {info.fingerprint})"
    if revoked:
        return f"{label}: {who} is refused: the key is revoked in {trust.revoked}"
    if "incorrect signature" in detail.lower():
        return (
            f"{label}: {who} does not match the manifest's bytes: the manifest or its .sig was changed "
            f"after signing; re-sign it if the change is yours"
        )
    maybe_revoked = f" or the key is revoked in {trust.revoked}" if trust.revoked else ""
    return (
        f"{label}: {who} is refused by {trust.allowed_signers} for namespace {NAMESPACE!r}"
        f"{maybe_revoked}{_detail(detail)}"
    )


def _run(args: list[str], *, data: bytes | None, timeout: float, env: dict | None) -> subprocess.CompletedProcess:
    """Run ssh-keygen by absolute path, no shell; ``data=None`` leaves stdin to the operator."""
    exe = ssh_keygen_path()
    if exe is None:
        raise SignatureError(
            f"ssh-keygen not found in {', '.join(SYSTEM_BIN_DIRS)}: install the OpenSSH client "
            "(e.g. `apt-get install openssh-client`) to sign or verify manifests"
        )
    import subprocess  # here, not at the top: a search that checks no signature never starts ssh-keygen

    try:
        return subprocess.run(
            [exe, *args],
            input=data,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SignatureError(f"{exe} did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise SignatureError(f"cannot run {exe}: {exc.strerror}") from None


def _reason(result: subprocess.CompletedProcess) -> str:
    """ssh-keygen's specific complaint, as one line (its generic lines dropped)."""
    text = (result.stderr + b"\n" + result.stdout).decode("utf-8", "replace")
    lines = [line.strip() for line in text.splitlines()]
    useful = [line for line in lines if line and not line.lower().startswith(_GENERIC_LINES)]
    useful = [line for line in useful if not line.startswith(("Signing ", "Write signature", "sig_find_principals:"))]
    return "; ".join(useful)[:300]


def _detail(reason: str) -> str:
    return f" (ssh-keygen: {reason})" if reason else ""


def _write_signature(target: Path, signature: bytes, *, like: Path) -> None:
    """Replace ``target`` atomically; as readable as the manifest, never more.

    A signature holds a public key and a namespace, nothing secret, but it
    travels with its manifest: copying the manifest's read bits (owner always
    read/write, never executable or writable by others) keeps it exactly as
    visible as the file it vouches for.
    """
    try:
        mode = (os.stat(like).st_mode & 0o444) | 0o600
    except OSError:
        mode = 0o600
    write_private(target, signature, mode=mode)


def _text(value: bytes, what: str) -> str:
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"its {what} is not ASCII") from None
    if not text.isprintable():
        raise ValueError(f"its {what} holds control characters")
    return text


class _Reader:
    """Reads the SSH wire format (uint32 lengths, big-endian)."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("it is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def string(self) -> bytes:
        return self.take(self.uint32())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError("it has trailing bytes")
