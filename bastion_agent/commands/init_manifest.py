"""``init FOLDER [--manifest PATH]``: a commented manifest that fits the model server at hand.

A newcomer's first manifest used to name a model the server did not have.
``init`` asks the server at ``EMBED_URL`` which models it serves (Ollama's
``GET /api/tags``, else the OpenAI-style ``GET /v1/models``), picks the
embedding model, measures its dimension with one probe embedding (a fixed
sentence, never a document), and writes model, dimension and the prefixes
that model was trained with, and a window size that fits the context the
server reports (``server_info``; see ``fitting_size``). When nothing answers, the manifest fits the
embedded model (``model-server``), and says so. An existing manifest is
never overwritten. The written file is loaded by the manifest reader before
it is put in place, so ``init`` never leaves an invalid manifest behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bastion_agent.config.manifest import DEFAULT_EXCLUDE, DEFAULT_MAX_FILE_MB
from bastion_agent.core.errors import BastionError, ConfigError, ManifestError
from bastion_agent.embedding.client import EmbedClient
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.embedding.failures import RequestFailure
from bastion_agent.embedding.wire_formats import WIRE_FORMATS, listed_names, listing_routes

TOKEN_RE = re.compile(r"\w+|[^\w\s]")  # the chunker's token (embed.TOKEN_RE)
DISCOVERY_TIMEOUT = 10.0
EMBEDDED_MODEL = "multilingual-e5-small"  # modelserver.DEFAULT_MODEL (kept here: that module is the extra's)
EMBEDDED_DIM = 384
EMBEDDED_CONTEXT = 512  # modelserver.E5_CONTEXT
# Model tokens per regex token that a window is sized for: about the largest
# ratio measured with multilingual-e5-small on 256-token windows of real text
# (/usr/share/doc 2.03, /usr/share/common-licenses 1.85; means 1.23 and 1.18,
# 95th percentiles 1.58 and 1.39: bench/embed/token_ratio.py, docs/embedding.md).
# The rare window above it is still counted by the embed stage.
INIT_RATIO = 2.0
SPECIAL_TOKENS = 2  # [CLS] and [SEP], or BOS and EOS

# Prefixes each model family was trained with (its model card), matched on the name.
# (name fragment, query_prefix, passage_prefix, size_tokens, overlap_tokens)
KNOWN_MODELS = (
    ("e5", "query: ", "passage: ", 128, 16),
    ("nomic-embed", "search_query: ", "search_document: ", 256, 32),
    ("mxbai-embed", "Represent this sentence for searching relevant passages: ", "", 256, 32),
    ("snowflake-arctic-embed", "Represent this sentence for searching relevant passages: ", "", 256, 32),
    ("bge", "Represent this sentence for searching relevant passages: ", "", 256, 32),
)
DEFAULT_CHUNK = (256, 32)
# Words in a model's name or family that say it makes embeddings (Ollama lists chat models too).
EMBEDDING_HINTS = ("embed", "e5", "bge", "minilm", "gte", "arctic", "bert")


@dataclass(frozen=True)
class Found:
    """What the model server told us, or the embedded model's settings when none answered."""

    model: str
    dim: int
    wire_format: str | None  # the name of the one that answered; None: no server answered
    where: str
    others: tuple[str, ...] = ()
    context: int | None = None  # the server's context in tokens, when it says

    @property
    def answered(self) -> bool:
        return self.wire_format is not None


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, nargs="?", help="the folder of documents to sweep")
    parser.add_argument("--manifest", type=Path, default=Path("bastion.toml"),
                        help="where to write the manifest (default: bastion.toml here); never overwritten")
    parser.add_argument("--update", type=Path, metavar="MANIFEST",
                        help="re-pin MANIFEST's model and dim to the server that answers at EMBED_URL, "
                             "keeping the rest of the file; prints the change")


def run_init(args: argparse.Namespace) -> int:
    if args.update is not None:
        if args.folder is not None:
            raise ConfigError("give either FOLDER (a new manifest) or --update MANIFEST, not both")
        return run_update(args.update)
    if args.folder is None:
        raise ConfigError("give the FOLDER of documents to sweep (or --update MANIFEST to re-pin one)")
    folder, target = args.folder, args.manifest
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder: give the folder of documents to sweep")
    if target.exists() or target.is_symlink():
        raise ConfigError(f"{target} exists; init never overwrites a manifest (give another --manifest PATH, "
                          f"or re-pin its model to the server at EMBED_URL: init --update {target})")
    config = EndpointConfig.from_env()
    found = discover(config)
    text = manifest_text(found, root_for(folder, target))
    write_new(target, text)
    print(f"wrote {target}: {found.model}, {found.dim} dims, source {folder}", file=sys.stderr)
    if found.answered:
        print(f"  found at {found.where} ({found.wire_format}); next: sweep {target}, then search {target} \"...\"",
              file=sys.stderr)
    else:
        print(f"  no model server answered at {found.where} (EMBED_URL): the manifest fits the embedded model; "
              "start it with: python3 -m bastion_agent model-server", file=sys.stderr)
    return 0


def discover(config: EndpointConfig) -> Found:
    """The embedding model the server serves and its dimension; the embedded model when none answers."""
    listed = [name for name in _listed_models(config) if name]
    candidates = sorted(listed, key=lambda name: (not _looks_like_embedding(name), listed.index(name)))
    for model in candidates or [EMBEDDED_MODEL]:
        measured = _measure(config, model)
        if measured is not None:
            name, dim = measured
            others = tuple(listed for listed in candidates if listed != model)
            return Found(model, dim, name, config.display_url, others, _context(config, name, model))
    return Found(EMBEDDED_MODEL, EMBEDDED_DIM, None, config.display_url, context=EMBEDDED_CONTEXT)


def _context(config: EndpointConfig, format_name: str, model: str) -> int | None:
    """The context the server reports for ``model`` (``server_info``), or None."""
    from bastion_agent.embedding import server_info

    quick = EndpointConfig(url=config.url, wire_format=format_name, timeout=min(config.timeout, DISCOVERY_TIMEOUT))
    try:
        return server_info.inspect(quick, format_name, model).context
    except ConfigError:  # a bad EMBED_CONTEXT: the embed stage says so; init sizes without it
        return None


def fitting_size(context: int | None, passage_prefix: str, size: int, overlap: int) -> tuple[int, int]:
    """``(size_tokens, overlap_tokens)``: the model's default, lowered until a window fits ``context``.

    A window of N regex tokens is sized for ``INIT_RATIO * N`` model tokens,
    plus its passage prefix and the special tokens.
    """
    if not context:
        return size, overlap
    prefix = len(TOKEN_RE.findall(passage_prefix))
    fits = int((context - SPECIAL_TOKENS) / INIT_RATIO) - prefix
    if fits >= size:
        return size, overlap
    fits = max(8, fits)
    return fits, min(overlap, fits // 8)


def _listed_models(config: EndpointConfig) -> list[str]:
    """Names from the first listing route that lists any (each wire format's ``listing_routes``:
    ``/api/tags`` of Ollama and the embedded server, ``/v1/models`` of OpenAI-style servers).

    Asked as every introspection request is (``server_info.request_json``):
    within a deadline and a size, and an answer that is not JSON (nested
    past the parser's depth included) is no answer, never a crash.
    """
    from bastion_agent.embedding import server_info

    for path in listing_routes():
        try:
            names = listed_names(path, server_info.request_json(config.url + path, None, DISCOVERY_TIMEOUT, 1 << 20))
        except server_info.Unanswered:
            continue
        if names:
            return names
    return []


def _looks_like_embedding(name: str) -> bool:
    return any(hint in name.lower() for hint in EMBEDDING_HINTS)


def _measure(config: EndpointConfig, model: str) -> tuple[str, int] | None:
    """``(wire format name, dim)`` from one probe embedding of ``model``, or None when no wire format answers."""
    quick = EndpointConfig(url=config.url, wire_format=config.wire_format, batch=1,
                           timeout=min(config.timeout, DISCOVERY_TIMEOUT))
    for name in [config.wire_format.name] if config.wire_format else list(WIRE_FORMATS):
        client = EmbedClient(quick, model)  # the name exactly as the server lists it
        try:
            dim = client.measure(name)
        except RequestFailure:
            continue
        if dim:
            return name, dim
    return None


def settings_for(model: str) -> tuple[str, str, int, int]:
    """``(query_prefix, passage_prefix, size_tokens, overlap_tokens)`` for a model name."""
    lowered = model.lower()
    for fragment, query, passage, size, overlap in KNOWN_MODELS:
        if fragment in lowered:
            return query, passage, size, overlap
    return ("", "", *DEFAULT_CHUNK)


def root_for(folder: Path, target: Path) -> str:
    """``source.root`` as the manifest reader resolves it: relative to the manifest's folder."""
    base = target.resolve().parent
    return Path(os.path.relpath(folder.resolve(), base)).as_posix()


def manifest_text(found: Found, root: str) -> str:
    query, passage, size, overlap = settings_for(found.model)
    size, overlap = fitting_size(found.context, passage, size, overlap)
    if found.context:
        fitted = (f"# The model's context is {found.context} tokens; {size} tokens fit it even at "
                  f"{INIT_RATIO:g} model tokens each (the usual is 1.2).\n")
    else:
        fitted = "# The server did not say its context: embed counts the windows over it when it can.\n"
    if found.answered:
        origin = f"# Found at {found.where} ({found.wire_format} API) by `init`; its probe vector has {found.dim} dimensions."
        # Names as the server gives them, in a comment: one with a line break would write TOML, so those are left out.
        listed = [name for name in found.others if name.isprintable()][:8]
        if listed:
            origin += f"\n# The server also lists: {', '.join(listed)}."
    else:
        origin = (f"# No model server answered at {found.where} (EMBED_URL) when `init` ran: these settings fit the\n"
                  "# embedded model. Start it with: python3 -m bastion_agent model-server  (pip install -e '.[model]')")
    known = "the model card's prefixes" if query or passage else "no prefixes (none known for this model)"
    excludes = ", ".join(json.dumps(pattern) for pattern in DEFAULT_EXCLUDE)
    return f"""\
# bastion agent manifest, written by `init`. Every key is explained in README.md.
# The model server's address is never here: it comes from EMBED_URL.

[source]
root = {json.dumps(root)}   # the folder to sweep, relative to this file's folder
# include = ["**"]         # globs relative to root (default: everything)
# exclude = [{excludes}]   # the default; giving exclude replaces it
# max_file_mb = {DEFAULT_MAX_FILE_MB:g}         # larger files are skipped (the default)

[embed]
{origin}
model = {json.dumps(found.model)}
dim = {found.dim}
# {known}; a changed passage_prefix embeds everything again.
query_prefix = {json.dumps(query)}
passage_prefix = {json.dumps(passage)}

[embed.chunk]
{fitted}size_tokens = {size}            # window length in tokens
overlap_tokens = {overlap}          # 0 <= overlap < size

# [search]
# mode = "hybrid"          # vector | keyword | hybrid

# [sanitize]               # see docs/sanitize.md
# allow = []               # exact strings never redacted (a public support address)
"""


def write_new(target: Path, text: str) -> None:
    """Write ``target`` only if it does not exist, whole or not at all, after checking it loads."""
    from bastion_agent.config import manifest

    folder = target.resolve().parent
    if not folder.is_dir():
        raise ConfigError(f"cannot write {target}: its folder {folder} does not exist")
    handle, temp = tempfile.mkstemp(prefix=".init-", suffix=target.suffix or ".toml", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        try:
            manifest.load(Path(temp))
        except ManifestError as exc:  # a bug here, never the user's: say so plainly
            raise BastionError(f"init made a manifest the reader refuses ({exc}); nothing was written") from None
        try:
            os.link(temp, target)  # fails if the target appeared meanwhile: never overwrites
        except FileExistsError:
            raise ConfigError(f"{target} exists; init never overwrites a manifest") from None
    finally:
        os.unlink(temp)


# --- init --update MANIFEST ------------------------------------------------------

PIN_RE = {
    "model": re.compile(r"""^(?P<lead>[ \t]*model[ \t]*=[ \t]*)(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*')""", re.M),
    "dim": re.compile(r"^(?P<lead>[ \t]*dim[ \t]*=[ \t]*)(?P<value>[0-9_]+)", re.M),
}
TABLE_RE = re.compile(r"^[ \t]*\[(?P<name>[^\]\n]*)\][ \t]*(?:#.*)?$", re.M)


def run_update(target: Path) -> int:
    """Re-pin ``target`` to the model server that answers: its ``model`` and ``dim``, nothing else.

    A manifest written while no server answered names the embedded model in
    the form ``init`` knows; the server may list it as ``NAME:latest``, or
    serve another model. The same model (the canonical name,
    ``config.model_names``) is pinned as the server names it and keeps every
    vector; another model is pinned only when the server serves no form of
    the current one, and the line says that it embeds everything again.
    Comments, order and every other key stay as they are: the two values are
    replaced in the text of the ``[embed]`` table, the result is loaded by the
    manifest reader and put in place atomically.
    """
    from bastion_agent.config import manifest
    from bastion_agent.config.model_names import canonical_name

    current = manifest.load(target)
    if target.suffix.lower() == ".json":
        raise ConfigError(f"{target}: --update rewrites TOML manifests only; edit [embed] model and dim by hand")
    config = EndpointConfig.from_env()
    listed = [name for name in _listed_models(config) if name]
    same = [name for name in listed if canonical_name(name) == canonical_name(current.embed.model)]
    found = None
    for model in same:
        measured = _measure(config, model)
        if measured is not None:
            found = Found(model, measured[1], measured[0], config.display_url)
            break
    if found is None:
        found = discover(config)
        if not found.answered:
            raise ConfigError(f"no model server answered at {found.where} (EMBED_URL): {target} was left as it is")
    raw = manifest.read_manifest_bytes(target).decode("utf-8")
    text = _repinned(target, raw, found.model, found.dim)
    if text == raw:
        print(f"{target} already pins {found.model!r}, {found.dim} dims, as {found.where} serves it: unchanged",
              file=sys.stderr)
        return 0
    import difflib

    diff = difflib.unified_diff(raw.splitlines(keepends=True), text.splitlines(keepends=True),
                                f"{target} (before)", f"{target} (after)", n=1)
    sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in diff)
    _replace_checked(target, text, found)
    kept = canonical_name(found.model) == canonical_name(current.embed.model) and found.dim == current.embed.dim
    consequence = ("the same model: every stored vector is reused" if kept
                   else "another model: the next embed embeds every window again")
    print(f"updated {target}: {found.model}, {found.dim} dims, found at {found.where} ({found.wire_format}); {consequence}",
          file=sys.stderr)
    if current.signature.signed:
        print(f"  {target} was signed: the signature no longer matches; sign it again", file=sys.stderr)
    return 0


def _repinned(target: Path, raw: str, model: str, dim: int) -> str:
    """``raw`` with the ``[embed]`` table's ``model`` and ``dim`` values replaced."""
    tables = list(TABLE_RE.finditer(raw))
    start = next((m.end() for m in tables if m.group("name").strip() == "embed"), None)
    if start is None:
        raise ConfigError(f"{target}: no [embed] table written as such; edit model and dim by hand")
    end = next((m.start() for m in tables if m.start() > start), len(raw))
    section = raw[start:end]
    for key, value in (("model", json.dumps(model)), ("dim", str(dim))):
        match = PIN_RE[key].search(section)
        if match is None:
            raise ConfigError(f"{target}: [embed] {key} is not on a line of its own; edit it by hand")
        section = section[: match.start("value")] + value + section[match.end("value"):]
    return raw[:start] + section + raw[end:]


def _replace_checked(target: Path, text: str, found: Found) -> None:
    """Put ``text`` in place of ``target`` only if the reader loads it with the new pins (mode kept)."""
    from bastion_agent.config import manifest

    folder = target.resolve().parent
    handle, temp = tempfile.mkstemp(prefix=".init-", suffix=target.suffix or ".toml", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temp, target.stat().st_mode & 0o777)
        try:
            loaded = manifest.load(Path(temp))
        except ManifestError as exc:
            raise BastionError(f"init --update made a manifest the reader refuses ({exc}); nothing was changed") from None
        if (loaded.embed.model, loaded.embed.dim) != (found.model, found.dim):
            raise BastionError("init --update could not re-pin model and dim; nothing was changed")
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
