"""Where each stage writes, and how: the output folder and private files.

Every file the agent writes is created 0600 inside folders created 0700, and
written atomically (a temporary file in the same folder, then ``os.replace``),
so a crash never leaves a half-written store file behind and no other local
user can read what the bastion holds.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

DEFAULT_OUT_NAME = ".bastion"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass(frozen=True)
class Layout:
    """The paths of one output folder (``--out DIR``)."""

    root: Path

    @classmethod
    def for_manifest(cls, manifest_path: Path, out: str | os.PathLike | None) -> "Layout":
        """``--out`` when given, else the manifest's own folder beside it (``default_out_dir``)."""
        if out is not None:
            return cls(Path(out))
        return cls(default_out_dir(Path(manifest_path)))

    @property
    def extract_dir(self) -> Path:
        return self.root / "extract"

    @property
    def extract_listing(self) -> Path:
        """Every file seen by extract; inside the private store (raw paths)."""
        return self.extract_dir / "listing.jsonl"

    @property
    def sanitized_dir(self) -> Path:
        return self.root / "sanitized"

    @property
    def sanitized_listing(self) -> Path:
        """One row per sanitized document: its doc id and sanitized paths."""
        return self.sanitized_dir / "listing.jsonl"

    @property
    def chunks_path(self) -> Path:
        return self.root / "chunks.jsonl"

    @property
    def vectors_db(self) -> Path:
        return self.root / "vectors.db"

    @property
    def audit_log(self) -> Path:
        """One JSON line per search (``core/audit.py``); rotated beside itself as ``audit.jsonl.1`` …"""
        return self.root / "audit.jsonl"

    def summary_path(self, stage: str) -> Path:
        return self.root / f"{stage}.summary.json"

    @staticmethod
    def doc_text_path(store: Path, doc: str) -> Path:
        """A document's text in a store (extract or sanitized), keyed by doc id."""
        return store / f"{doc}.txt"


DEFAULT_MANIFEST_STEM = "bastion"  # bastion.toml (or .json): the output folder is .bastion/


def default_out_dir(manifest_path: Path) -> Path:
    """``.bastion/`` beside ``bastion.toml``, ``.bastion-NAME/`` beside any other ``NAME.toml``.

    Two manifests in one folder shared ``.bastion/``: the second
    sweep replaced the first one's windows. Each manifest now has its own
    folder. An older agent's ``.bastion/`` keeps working for the manifest
    that made it: when ``.bastion-NAME/`` does not exist yet, ``.bastion/``
    is an output folder and no ``bastion.toml``/``bastion.json`` lies beside
    it (which would own it), ``NAME.toml`` goes on using it; rename it to
    ``.bastion-NAME/`` to give a second manifest a folder of its own.
    """
    folder = manifest_path.resolve().parent
    stem = manifest_path.stem
    if stem == DEFAULT_MANIFEST_STEM:
        return folder / DEFAULT_OUT_NAME
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-") or "manifest"
    own, legacy = folder / f"{DEFAULT_OUT_NAME}-{name}", folder / DEFAULT_OUT_NAME
    owner_beside = any((folder / f"{DEFAULT_MANIFEST_STEM}{suffix}").exists() for suffix in (".toml", ".json"))
    if not own.exists() and legacy.is_dir() and is_out_dir(legacy) and not owner_beside:
        return legacy
    return own


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) 0700; a folder that exists is left as it is, if it is ours.

    Only folders the agent creates get its mode: an existing folder may be
    shared (a 1777 folder, the current folder under ``--out .``), and
    changing its mode would break it for its owners. What the agent puts
    inside is private anyway (files 0600, folders 0700). But a folder that
    exists and belongs to another user is refused: in a shared folder,
    anyone could make ``extract/`` before the agent's first run, then list
    (and delete, or swap) what the agent writes in it.
    """
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    made = set()
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:  # made meanwhile by another process: not ours to chmod
            continue
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode is reduced by the umask
        made.add(folder)
    if not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a folder")
    if path not in made:
        refuse_foreign_owner(path)
    return path


def refuse_foreign_owner(folder: Path) -> None:
    """``StoreError`` when ``folder`` (followed, if a link) belongs to a user other than the one running."""
    from bastion_agent.core.errors import StoreError

    owner = folder.stat().st_uid
    if owner != os.geteuid():
        raise StoreError(f"folder {folder} belongs to another user (uid {owner}), who could read the names of what "
                         "the agent writes there and replace it; choose a folder of your own for --out")


OUT_MARKER = ".bastion-out"
_OUT_MARKER_TEXT = "This folder is a bastion agent output folder (made by `python3 -m bastion_agent`).\n"
_KNOWN_DIRS = ("extract", "sanitized")
_KNOWN_FILES = ("vectors.db", "chunks.jsonl")


def is_out_dir(path: Path) -> bool:
    """Whether ``path`` is an output folder of ours: the marker, or (made before the marker
    existed) an extract/ or sanitized/ folder, a vectors.db or a stage summary."""
    path = Path(path)
    if (path / OUT_MARKER).is_file():
        return True
    if any((path / name).is_dir() for name in _KNOWN_DIRS) or any((path / name).is_file() for name in _KNOWN_FILES):
        return True
    return any(entry.is_file() for entry in path.glob("*.summary.json"))


def claim_out_dir(path: Path) -> Path:
    """Make sure ``--out`` may be written: missing (created 0700), empty, or ours; mark it ours.

    A folder that holds anything else (``--out .`` in a project, ``--out
    ~/Documents``) is refused with one line: the stages replace and delete
    files by name there, and must not do so among someone else's files.
    """
    from bastion_agent.core.errors import StoreError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StoreError(f"output folder {path} exists and is not a folder; choose another --out")
    if path.is_dir():
        try:
            with os.scandir(path) as scan:
                empty = not any(scan)
        except OSError as exc:
            raise StoreError(f"output folder {path} cannot be read ({exc.strerror}); choose another --out") from None
        if not empty and not is_out_dir(path):
            raise StoreError(
                f"output folder {path} already holds files that are not a bastion output folder; "
                "choose an empty or new folder for --out"
            )
    ensure_private_dir(path)
    marker = path / OUT_MARKER
    if not marker.is_file():
        write_private(marker, _OUT_MARKER_TEXT)
    return path


def remove_stale_temps(folder: Path, stems: tuple[str, ...] | None = None) -> int:
    """Delete the temporary files ``write_private`` leaves when a run is killed mid-write.

    Each stage calls it at its start for the files it writes (``stems``, or
    every ``.*.tmp`` in a folder of its own), so a ``kill -9`` leaves
    nothing behind for ever. Returns how many were removed.
    """
    removed = 0
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for name in names:
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        if stems is not None and not any(name.startswith(f".{stem}.") for stem in stems):
            continue
        try:
            os.unlink(Path(folder) / name)
            removed += 1
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    return removed


def write_private(path: Path, data: bytes | str, *, durable: bool = True, mode: int = PRIVATE_FILE_MODE) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600 (or ``mode``).

    ``durable=False`` skips the per-file ``fsync``: a stage writing thousands
    of document texts calls ``sync_to_disk()`` once instead, before it writes
    the listing that makes those texts count (one fsync per file was most of
    extract's time on a folder of small files).
    """
    import tempfile  # here, not at the top: a one-off search, which writes no file this way, never loads it

    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # the folder is made once, not checked per file
        ensure_private_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if not durable:
            _note_unsynced(path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path`` (created 0600, never through a final link), for logs.

    Every ``write`` on it lands at the end of the file, whole, even with
    other writers (O_APPEND); the caller writes each record in one call.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o077:  # made by someone else, or by hand: ours is private
            os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


# Files written with ``durable=False`` since the last ``sync_to_disk``, while they are few: a watch cycle
# writes a text or two, and ``os.sync()`` flushes every file system of the machine, whatever other
# programs wrote (a tenth of a second on a busy machine, more than the rest of such a cycle's writes).
SYNC_EACH_MAX = 64
_unsynced: set[str] = set()
_unsynced_overflow = False
_unsynced_lock = threading.Lock()


def _note_unsynced(path: Path) -> None:
    global _unsynced_overflow
    with _unsynced_lock:
        if len(_unsynced) < SYNC_EACH_MAX:
            _unsynced.add(str(path))
        else:
            _unsynced_overflow = True


def sync_to_disk() -> None:
    """Flush every file written with ``durable=False``: each one and its folder when they are few
    (``SYNC_EACH_MAX``), else the whole file system (one ``os.sync()``)."""
    global _unsynced_overflow
    with _unsynced_lock:  # held while flushing: another thread's sync returns once these are on disk too
        paths, overflow = sorted(_unsynced), _unsynced_overflow
        _unsynced.clear()
        _unsynced_overflow = False
        if overflow:
            os.sync()
            return
        for path in paths:
            _fsync_path(path, os.O_RDONLY)
        for folder in sorted({os.path.dirname(path) for path in paths}):
            _fsync_path(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync_path(path: str, flags: int) -> None:
    """``fsync`` a file or folder by name; one removed since it was written needs nothing."""
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, value: object) -> None:
    """Write ``value`` as pretty, key-sorted JSON, privately and atomically."""
    write_private(path, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl(path: Path, rows) -> None:
    """Write an iterable of JSON-able rows, one per line, privately and atomically."""
    lines = [json.dumps(row, sort_keys=True, ensure_ascii=False) for row in rows]
    write_private(path, "".join(line + "\n" for line in lines))


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSON-lines file written by ``write_jsonl``."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_summary(layout: Layout, stage: str, counts: dict, signature) -> dict:
    """Write ``STAGE.summary.json``: the stage's counts and how the manifest was signed.

    ``signature`` is the manifest's ``SignatureStatus``. Summaries hold counts
    and settings only, never a document's text or a found secret.
    """
    summary = {
        "stage": stage,
        **counts,
        "manifest_signed": bool(signature.signed),
        "signed_by": signature.principal,
        "signed_key": signature.key,
    }
    ensure_private_dir(layout.root)
    write_json(layout.summary_path(stage), summary)
    return summary


def figures_path(layout: Layout, stage: str) -> Path:
    """``extract/STAGE.figures.json``: the figures of a stage measured from raw bytes, private."""
    return layout.extract_dir / f"{stage}.figures.json"


def write_figures(layout: Layout, stage: str, figures: dict) -> None:
    """Write the raw-side figures of a stage (bytes read, contents reused) inside the extract store.

    A summary is read by whoever runs the agent or its scripts, and by
    anyone who can read the output folder; a total of raw bytes, or a count
    of equal raw contents, lets them measure or test what sanitize removed.
    Such figures stay in ``extract/`` (0700, files 0600), beside the raw text.
    """
    ensure_private_dir(layout.extract_dir)
    write_json(figures_path(layout, stage), {"stage": stage, **figures})
