"""Load and validate the manifest: what to sweep and which model to use.

The manifest is read once, as bytes: the signature (when there is one) is
checked on exactly those bytes, and exactly those bytes are parsed, so the
file cannot change between the check and its use. Every problem is a
``ManifestError`` whose one line names the key and what is allowed.

The endpoint of the model server never comes from here: it is a property of
the machine (``EMBED_URL``), not of the documents.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bastion_agent.config import signing
from bastion_agent.core.access import AccessRule, AccessSettings, validate_groups
from bastion_agent.config.model_names import canonical_name
from bastion_agent.core.errors import ManifestError

DEFAULT_INCLUDE = ("**",)
DEFAULT_EXCLUDE = (".git/**", ".hg/**", ".svn/**", ".bastion/**", ".bastion-*/**", "**/.DS_Store")
# [embed.chunk] when a manifest leaves it out (or one of its keys): windows that fit a 512-token
# context even at 2 model tokens per regex token (multilingual-e5-small's, docs/embedding.md).
DEFAULT_SIZE_TOKENS = 128
DEFAULT_OVERLAP_TOKENS = 16
DEFAULT_MAX_FILE_MB = 64.0
MAX_MANIFEST_BYTES = 1 << 20
BASTION_NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
BASTION_NAME_MAX = 63
DEFAULT_BUDGET_SECONDS = 30.0   # per file read / document sanitized, plus 1 s per MiB (budget.py)
DEFAULT_BUDGET_MEMORY_MB = 1024  # address space of the worker reading one file

# Keys each table may hold; anything else is refused so that a typo
# ("overlap_token") cannot silently fall back to a default.
ALLOWED_KEYS = {
    "": {"source", "embed", "sanitize", "search", "publish", "access", "serve", "watch"},
    "source": {"root", "include", "exclude", "max_file_mb", "budget_seconds", "budget_memory_mb",
               "ocr", "ocr_languages", "groups_from_permissions"},
    "embed": {"model", "dim", "chunk", "query_prefix", "passage_prefix"},
    "embed.chunk": {"size_tokens", "overlap_tokens"},
    "search": {"mode", "ann_recall"},
    "publish": {"bastion"},
    "access": {"default", "rules", "local_groups"},
    "access.rules": {"paths", "groups"},
    "serve": {"audit_queries", "audit_retention_days", "searches_per_minute", "search_burst"},
    "watch": {"poll_seconds", "debounce_seconds"},
}
# [watch]: how often the polling fallback looks at the folder (a stat per file: cheap at rest on a
# laptop, even for 10,000 files), and how long a file must stay unchanged before it is read.
DEFAULT_POLL_SECONDS = 10.0
DEFAULT_DEBOUNCE_SECONDS = 0.5


@dataclass(frozen=True)
class SourceSettings:
    """``[source]``: the folder to sweep and which of its files to read."""

    root: Path
    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    max_file_mb: float = DEFAULT_MAX_FILE_MB
    budget_seconds: float = DEFAULT_BUDGET_SECONDS
    budget_memory_mb: int = DEFAULT_BUDGET_MEMORY_MB
    ocr: bool = True  # read scans (images, PDF pages without text) when Tesseract is installed
    ocr_languages: tuple[str, ...] | None = None  # Tesseract's names ("eng", "deu"); None: every installed one

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)


@dataclass(frozen=True)
class EmbedSettings:
    """``[embed]`` and ``[embed.chunk]``: the pinned model and the window shape."""

    model: str
    dim: int
    size_tokens: int
    overlap_tokens: int
    query_prefix: str = ""
    passage_prefix: str = ""

    @property
    def vector_key(self) -> str:
        """What a stored vector is keyed by besides its chunk id.

        The model name alone when no prefix is set (the ``model``
        column of docs/contract.md); with prefixes, the name plus the passage prefix,
        because a window embedded with another prefix is another vector and
        must never be reused or compared as if it were the same.

        The name is the model's canonical one (``model_names``): the same
        model under another form of its name (``:latest``, a hub owner,
        ``.gguf``) reuses its vectors instead of embedding everything again.
        """
        name = canonical_name(self.model)
        if not self.passage_prefix:
            return name
        return f"{name}+passage_prefix={json.dumps(self.passage_prefix)}"


@dataclass(frozen=True)
class ServeLimits:
    """``[serve]``: how fast a token may search, and how long the audit log keeps what it recorded.

    A token holder who could search without limit could push its own
    records out of the rotated audit log (a flush): the limit makes a flush
    take days, and a rotation that drops records younger than
    ``audit_retention_days`` says so (core/audit.py).
    """

    searches_per_minute: int = 120  # per token, sustained (a token bucket refilled at this rate)
    search_burst: int = 30  # per token, searches at once before the rate applies
    audit_retention_days: int = 90  # a rotation dropping younger records says so on stderr and in `audit`


SERVE_LIMIT_RANGES = {"searches_per_minute": (1, 60_000), "search_burst": (1, 10_000),
                      "audit_retention_days": (0, 36_500)}


@dataclass(frozen=True)
class WatchSettings:
    """``[watch]``: the polling fallback's interval and the quiet time a change must keep before a cycle."""

    poll_seconds: float = DEFAULT_POLL_SECONDS
    debounce_seconds: float = DEFAULT_DEBOUNCE_SECONDS


@dataclass(frozen=True)
class Manifest:
    """A validated manifest and how it was signed."""

    path: Path
    data: dict[str, Any]
    source: SourceSettings
    embed: EmbedSettings
    sanitize: Any
    search_mode: str | None
    signature: signing.SignatureStatus = field(default_factory=signing.SignatureStatus)
    publish_bastion: str | None = None  # [publish] bastion: this bastion's name in the central index
    access: AccessSettings = field(default_factory=AccessSettings)  # [access]: documents' groups, the local user's
    audit_queries: bool = False  # [serve] audit_queries: the audit log keeps each query's text (core/audit.py)
    serve_limits: "ServeLimits" = field(default_factory=lambda: ServeLimits())  # [serve]: per-token limits, retention
    watch: WatchSettings = field(default_factory=WatchSettings)  # [watch]: the watch command's timing
    ann_recall: float = 0.95  # [search] ann_recall: the recall@10 the ANN graph is built to deliver (embedding/ann_recall.py)

    def section(self, name: str) -> dict[str, Any]:
        """A top-level table as parsed (empty when absent)."""
        value = self.data.get(name, {})
        return value if isinstance(value, dict) else {}


def load(path: str | Path, *, require_signed: bool = False) -> Manifest:
    """Read, verify and validate the manifest at ``path``."""
    path = Path(path)
    raw = read_manifest_bytes(path)
    status = signing.check_manifest(path, raw, require_signed=require_signed)
    data = parse(path, raw)
    return validate(path, data, status)


def read_manifest_bytes(path: Path) -> bytes:
    """The manifest's bytes, read once; one line naming the file when that fails."""
    from bastion_agent.core.confine import NotRegular, read_regular

    try:
        raw = read_regular(path, MAX_MANIFEST_BYTES)
    except NotRegular:
        raise ManifestError(f"manifest {path}: not a regular file (a FIFO, socket or device)") from None
    except FileNotFoundError:
        raise ManifestError(f"manifest {path}: no such file") from None
    except IsADirectoryError:
        raise ManifestError(f"manifest {path}: is a folder, expected a .toml or .json file") from None
    except OSError as exc:
        raise ManifestError(f"manifest {path}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest {path}: larger than {MAX_MANIFEST_BYTES // (1 << 20)} MiB; a manifest is a few lines")
    return raw


def parse(path: Path, raw: bytes) -> dict[str, Any]:
    """Parse TOML, or JSON when the file's name ends in ``.json``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"manifest {path}: not UTF-8 (byte {exc.start})") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest {path}: invalid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"manifest {path}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"manifest {path}: the top level must be a table of sections")
    return data


def validate(path: Path, data: dict[str, Any], status: signing.SignatureStatus) -> Manifest:
    """Check every key the stages read; return the typed settings."""
    where = _Where(path)
    where.known_keys("", data)
    source = where.table(data, "source", required=True)
    embed = where.table(data, "embed", required=True)
    chunk = where.table(embed, "chunk", required=False, name="embed.chunk")
    search = where.table(data, "search", required=False)
    publish = where.table(data, "publish", required=False)
    access = where.table(data, "access", required=False)
    serve = where.table(data, "serve", required=False)
    watch = where.table(data, "watch", required=False)
    for name, table in (("source", source), ("embed", embed), ("embed.chunk", chunk), ("search", search),
                        ("publish", publish), ("access", access), ("serve", serve), ("watch", watch)):
        where.known_keys(name, table)
    return Manifest(
        path=path,
        data=data,
        source=_source_settings(where, source),
        embed=_embed_settings(where, embed, chunk),
        sanitize=_sanitize_settings(path, data.get("sanitize", {})),
        search_mode=_search_mode(where, search),
        signature=status,
        publish_bastion=_publish_bastion(where, data, publish),
        access=_access_settings(where, access, source),
        audit_queries=_audit_queries(where, serve),
        serve_limits=_serve_limits(where, serve),
        watch=WatchSettings(
            poll_seconds=float(_positive(where, watch, "poll_seconds", DEFAULT_POLL_SECONDS, "seconds", table="watch")),
            debounce_seconds=float(_positive(where, watch, "debounce_seconds", DEFAULT_DEBOUNCE_SECONDS, "seconds",
                                             table="watch", zero=True)),
        ),
        ann_recall=_ann_recall(where, search),
    )


def _access_settings(where: "_Where", access: dict, source: dict) -> AccessSettings:
    """``[access]`` (default groups, path rules, the local user's groups) and ``[source] groups_from_permissions``."""
    from_permissions = source.get("groups_from_permissions", False)
    if not isinstance(from_permissions, bool):
        where.fail("source", "groups_from_permissions", f"must be true or false; got {from_permissions!r}")
    local = None
    if "local_groups" in access:
        local = frozenset(_group_list(where, "access", "local_groups", access["local_groups"]))
    rules = access.get("rules", [])
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        where.fail("access", "rules", "must be a list of tables ([[access.rules]] with paths and groups)")
    return AccessSettings(
        default=_group_list(where, "access", "default", access.get("default", [])),
        rules=tuple(_access_rule(where, index, rule) for index, rule in enumerate(rules)),
        local_groups=local,
        from_permissions=from_permissions,
    )


def _access_rule(where: "_Where", index: int, rule: dict) -> AccessRule:
    table = f"access.rules[{index}]"
    for key in rule:
        if key not in ALLOWED_KEYS["access.rules"]:
            where.fail(table, key, f"is not a key of a rule; allowed: {', '.join(sorted(ALLOWED_KEYS['access.rules']))}")
    for key in ("paths", "groups"):
        if key not in rule:
            where.fail(table, key, "is missing (a rule needs paths and groups)")
    paths = rule["paths"]
    if not isinstance(paths, list) or not paths or not all(isinstance(item, str) and item.strip() for item in paths):
        where.fail(table, "paths", f"must be a non-empty list of glob strings (e.g. [\"hr/**\"]); got {paths!r}")
    built = AccessRule(tuple(paths), _group_list(where, table, "groups", rule["groups"]))
    try:
        built.globs  # the same grammar as [source] include: a bad pattern is refused now, not at sanitize
    except ManifestError as exc:
        where.fail(table, "paths", str(exc))
    return built


def _group_list(where: "_Where", table: str, key: str, value) -> tuple[str, ...]:
    if not isinstance(value, list):
        where.fail(table, key, f"must be a list of group names (e.g. [\"hr\", \"staff\"]); got {value!r}")
    try:
        return validate_groups(value)
    except ValueError as exc:
        where.fail(table, key, str(exc))


def _audit_queries(where: "_Where", serve: dict) -> bool:
    """``[serve] audit_queries``: whether the audit log keeps query texts (off: they can be sensitive)."""
    value = serve.get("audit_queries", False)
    if not isinstance(value, bool):
        where.fail("serve", "audit_queries", "must be true or false")
    return value


def _serve_limits(where: "_Where", serve: dict) -> "ServeLimits":
    """``[serve]``'s limits on audited searches and the audit log's retention; whole numbers in their ranges."""
    values = {}
    for key, (low, high) in SERVE_LIMIT_RANGES.items():
        value = serve.get(key, getattr(ServeLimits, key))
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            where.fail("serve", key, f"must be a whole number from {low} to {high}; got {value!r}")
        values[key] = value
    return ServeLimits(**values)


def _publish_bastion(where: "_Where", data: dict, publish: dict) -> str | None:
    """``[publish] bastion``: required when the table is there (lowercase letters, digits, dashes)."""
    if "publish" not in data:
        return None
    if "bastion" not in publish:
        where.fail("publish", "bastion", "is missing (this bastion's name, e.g. \"finance-fs01\")")
    try:
        return validate_bastion_name(publish["bastion"])
    except ValueError as exc:
        where.fail("publish", "bastion", str(exc))


def validate_bastion_name(name) -> str:
    """A bastion's name: lowercase letters, digits and single dashes, 1-63 characters (a DNS label)."""
    if not isinstance(name, str) or len(name) > BASTION_NAME_MAX or not BASTION_NAME_RE.fullmatch(name):
        raise ValueError(f"must be 1-{BASTION_NAME_MAX} lowercase letters, digits and dashes"
                         f" (e.g. \"finance-fs01\"); got {name!r}")
    return name


def _source_settings(where: "_Where", source: dict) -> SourceSettings:
    root_text = where.string(source, "source", "root")
    root = Path(root_text).expanduser()
    if not root.is_absolute():
        root = where.path.resolve().parent / root
    if not root.exists():
        where.fail("source", "root", f"the folder {root} does not exist")
    if not root.is_dir():
        where.fail("source", "root", f"{root} is not a folder")
    max_mb = source.get("max_file_mb", DEFAULT_MAX_FILE_MB)
    if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)) or not max_mb > 0:
        where.fail("source", "max_file_mb", f"must be a number > 0 (megabytes); got {max_mb!r}")
    return SourceSettings(
        root=root,
        include=where.globs(source, "include", DEFAULT_INCLUDE),
        exclude=where.globs(source, "exclude", DEFAULT_EXCLUDE),
        max_file_mb=float(max_mb),
        budget_seconds=float(_positive(where, source, "budget_seconds", DEFAULT_BUDGET_SECONDS, "seconds")),
        budget_memory_mb=int(_positive(where, source, "budget_memory_mb", DEFAULT_BUDGET_MEMORY_MB, "megabytes", minimum=64)),
        ocr=_ocr_switch(where, source),
        ocr_languages=_ocr_languages(where, source),
    )


def _ocr_switch(where: "_Where", source: dict) -> bool:
    value = source.get("ocr", True)
    if not isinstance(value, bool):
        where.fail("source", "ocr", f"must be true or false; got {value!r}")
    return value


_LANGUAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]{1,31}")


def _ocr_languages(where: "_Where", source: dict) -> tuple[str, ...] | None:
    """Tesseract language names; whether they are installed is checked by extract, on the machine that reads."""
    if "ocr_languages" not in source:
        return None
    value = source["ocr_languages"]
    if (not isinstance(value, list) or not value
            or not all(isinstance(item, str) and _LANGUAGE.fullmatch(item) for item in value)):
        where.fail("source", "ocr_languages",
                   f"must be a non-empty list of Tesseract language names (e.g. [\"eng\", \"deu\"]); got {value!r}")
    return tuple(dict.fromkeys(value))


def _positive(where: "_Where", source: dict, key: str, default, unit: str, minimum: float = 0,
              table: str = "source", zero: bool = False):
    """A number above ``minimum`` (or equal to 0, when ``zero``); one line naming the key otherwise."""
    value = source.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > minimum or (zero and value == 0)):
        bound = "a number >= 0" if zero else f"a number > {minimum:g}"
        where.fail(table, key, f"must be {bound} ({unit}); got {value!r}")
    return value


def _embed_settings(where: "_Where", embed: dict, chunk: dict) -> EmbedSettings:
    model = where.string(embed, "embed", "model")
    dim = where.integer(embed, "embed", "dim", minimum=1)
    size = where.integer(chunk, "embed.chunk", "size_tokens", minimum=1) if "size_tokens" in chunk else DEFAULT_SIZE_TOKENS
    overlap = (where.integer(chunk, "embed.chunk", "overlap_tokens", minimum=0) if "overlap_tokens" in chunk
               else min(DEFAULT_OVERLAP_TOKENS, size // 8))
    if overlap >= size:
        where.fail("embed.chunk", "overlap_tokens", f"must be >= 0 and < size_tokens ({size}); got {overlap}")
    prefixes = {}
    for key in ("query_prefix", "passage_prefix"):
        value = embed.get(key, "")
        if not isinstance(value, str):
            where.fail("embed", key, f"must be a string (e.g. \"query: \"); got {value!r}")
        prefixes[key] = value
    return EmbedSettings(model=model, dim=dim, size_tokens=size, overlap_tokens=overlap, **prefixes)


SEARCH_MODES = ("vector", "keyword", "hybrid")


def _search_mode(where: "_Where", search: dict) -> str | None:
    mode = search.get("mode")
    if mode is not None and mode not in SEARCH_MODES:
        where.fail("search", "mode", f"must be one of {', '.join(SEARCH_MODES)}; got {mode!r}")
    return mode


ANN_RECALL_RANGE = (0.5, 0.999)


def _ann_recall(where: "_Where", search: dict) -> float:
    """``[search] ann_recall``: below 0.5 a graph answers worse than a coin; 1.0 is the exact scan (``--exact``)."""
    value = search.get("ann_recall", 0.95)
    low, high = ANN_RECALL_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        where.fail("search", "ann_recall", f"must be a number from {low} to {high} (the recall@10 the ANN index "
                                           f"must deliver; --exact scans every vector); got {value!r}")
    return float(value)


def _sanitize_settings(path: Path, raw: Any):
    """``[sanitize]`` is validated by the sanitizer, which owns its rules."""
    from bastion_agent.sanitizing.settings import parse_settings

    if not isinstance(raw, dict):
        raise ManifestError(f"manifest {path}: [sanitize] must be a table; got {type(raw).__name__}")
    try:
        return parse_settings(raw)
    except ManifestError as exc:
        raise ManifestError(f"manifest {path}: {exc}") from None


@dataclass(frozen=True)
class _Where:
    """Builds error messages that name the manifest, the table and the key."""

    path: Path

    def fail(self, table: str, key: str, message: str):
        name = f"[{table}] {key}" if table else key
        raise ManifestError(f"manifest {self.path}: {name} {message}")

    def known_keys(self, table: str, value: dict) -> None:
        allowed = ALLOWED_KEYS[table]
        for key in value:
            if key not in allowed:
                where = f"[{table}]" if table else "the top level"
                raise ManifestError(
                    f"manifest {self.path}: unknown key {key!r} in {where}; allowed: {', '.join(sorted(allowed))}"
                )

    def table(self, parent: dict, key: str, *, required: bool, name: str | None = None) -> dict:
        name = name or key
        if key not in parent:
            if required:
                raise ManifestError(f"manifest {self.path}: missing table [{name}]")
            return {}
        value = parent[key]
        if not isinstance(value, dict):
            raise ManifestError(f"manifest {self.path}: [{name}] must be a table; got {type(value).__name__}")
        return value

    def string(self, table: dict, name: str, key: str) -> str:
        if key not in table:
            self.fail(name, key, "is missing (a non-empty string)")
        value = table[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(name, key, f"must be a non-empty string; got {value!r}")
        return value

    def integer(self, table: dict, name: str, key: str, *, minimum: int) -> int:
        if key not in table:
            self.fail(name, key, f"is missing (a whole number >= {minimum})")
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(name, key, f"must be a whole number >= {minimum}; got {value!r}")
        return value

    def globs(self, table: dict, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = table.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            self.fail("source", key, f"must be a list of glob strings (e.g. [\"**/*.md\"]); got {value!r}")
        return tuple(value)
