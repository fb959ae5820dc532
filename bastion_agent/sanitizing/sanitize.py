"""The sanitize stage: every extracted text through the scanner, into the sanitized store.

It reads only the extract store and writes the sanitized store, the only
text the later stages (chunk, embed, search, serve) ever see. What is found
and how it is replaced is the scanner's (``scanner.py``); this module decides
which texts to scan again, runs the scan under the time budget, removes the
copies of values found in any text of the sweep, and writes the texts, the
listing, the private map and erase list, the summary and the figures.

Ids. A document's id (``doc``) is the sha256 of its sanitized text: nothing
computed from unsanitized bytes leaves the extract store, so no hit, listing
or table can be used to test guesses of what was redacted. The extract store
keys its texts by the raw bytes' sha256 (its private "key"); this stage keeps
a private map, ``extract/sanitized.jsonl``, from each key to the document it
became, so an unchanged raw text is not sanitized again under the same
sanitizer and settings, and so the stage knows which documents went stale.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bastion_agent.core import catalogue
from bastion_agent.core import layout as store
from bastion_agent.core.errors import StoreError
from bastion_agent.core.progress import Progress, escape_name
from bastion_agent.core.records import Document
from bastion_agent.sanitizing import copies, skipped
from bastion_agent.sanitizing.copy_readers import CopySources
from bastion_agent.sanitizing.detection_version import sanitizer_fingerprint
from bastion_agent.sanitizing.pages import page_map
from bastion_agent.sanitizing.scanner import Finding, Sanitizer, merge, replace_findings, sanitizer_for
from bastion_agent.sanitizing.settings import SanitizeSettings

DOC_ID = re.compile(r"[0-9a-f]{64}")

SANITIZED_MAP = "sanitized.jsonl"
# Documents to erase from vectors.db and index/ (``embedding.erase``): the ids
# of documents that the current sanitizer superseded. Private like the map:
# an old id is the hash of text holding what the current sanitizer removes.
ERASE_LIST = "erase.jsonl"


@dataclass
class _Extracted:
    """One extract key (one raw content): its raw paths, the kind of the first, and its pages read by OCR."""

    paths: list[str]
    kind: str
    ocr_pages: list[int] | None = None  # None: not a paged document (a PDF or an image is)
    modified: dict[str, str] = field(default_factory=dict)  # raw path -> its file's modification time


@dataclass
class _Document:
    """One sanitized document: the raw paths of every key whose sanitized text it is."""

    raw_paths: set[str] = field(default_factory=set)
    kind_by_path: dict[str, str] = field(default_factory=dict)
    ocr_pages_by_path: dict[str, list[int] | None] = field(default_factory=dict)
    modified_by_path: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MapRow:
    """A line of the private ``extract/sanitized.jsonl``: what one extract key became."""

    key: str
    doc: str
    sanitizer: str
    findings: dict
    bytes_in: int
    # Raw values (private, like the whole map): those this text's own findings found, value -> rule
    # id, and those found in other texts of the sweep whose copies were removed here (copies.py).
    values: dict = field(default_factory=dict)
    copies: list = field(default_factory=list)
    # Placeholders per rule put in for those copies: private, since a count of them moves with
    # what texts of other readers hold (copy_readers.py); ``findings`` counts the text's own.
    copy_findings: dict = field(default_factory=dict)


def map_path(layout) -> Path:
    return Path(layout.extract_dir) / SANITIZED_MAP


def read_map(layout) -> dict[str, MapRow]:
    """The private key -> document map of the last run ({} when missing or unreadable)."""
    try:
        rows = store.read_jsonl(map_path(layout))
        return {row["key"]: MapRow(**row) for row in rows}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def doc_id(clean_text: str) -> str:
    """A document's id: the lowercase hex sha256 of its sanitized text (UTF-8)."""
    import hashlib

    return hashlib.sha256(clean_text.encode("utf-8")).hexdigest()


@dataclass
class _Sweep:
    """What one run made of the extracted texts: the map's rows, the documents, and the counts."""

    mapped: list[MapRow] = field(default_factory=list)
    documents: dict[str, _Document] = field(default_factory=dict)
    by_rule: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)  # texts over budget, by reason, counted per file
    skipped: dict = field(default_factory=dict)  # extract key -> reason, for the texts counted in ``failed``
    changed: int = 0
    bytes_in: int = 0
    reused: int = 0
    sources: CopySources = field(default_factory=CopySources)
    copies_removed: int = 0  # placeholders put in for copies of other texts' values (private figure)
    superseded: set[str] = field(default_factory=set)


def run(manifest, layout, pool=None) -> dict:
    """Sanitize every extracted text into ``<out>/sanitized/<doc>.txt``; write the listing and summary.

    ``pool`` runs each text's scan under its budget (default: a ``WorkerPool`` of ``[source]``'s
    budget; a ``KeptPool``, the watcher's, is used when it serves that budget); a test passes one
    whose costs are known, so "over budget" needs no real race.
    """
    from bastion_agent.core import legacy_ids
    from bastion_agent.core.budget import KeptPool, budget_of, pool_for

    extracted = _extracted_keys(layout)
    settings = getattr(manifest, "sanitize", None) or SanitizeSettings()
    sanitizer = sanitizer_for(settings)
    _prepare_output(layout)
    if pool is None or isinstance(pool, KeptPool):
        pool = pool_for(budget_of(getattr(manifest, "source", None)), pool)
    previous = read_map(layout)
    if not previous and legacy_ids.sanitized_store_is_legacy(layout):
        legacy_ids.announce("sanitize")
    fingerprint = sanitizer_fingerprint(settings)
    sweep = _Sweep()
    with Progress("sanitize", len(extracted), "docs") as progress, pool:
        worker = (pool, settings)
        kept = _sanitize_texts(layout, worker, extracted, previous, fingerprint, sweep, progress)
        groups = _key_groups(manifest, sanitizer, extracted, kept)
        for key, row in kept:
            sweep.sources.add(groups[key], row.values)
        kept = _apply_copies(layout, worker, fingerprint, kept, sweep, groups, extracted)
        _gather_documents(sweep, kept, extracted)
        sweep.superseded = _superseded(layout, worker, previous, extracted, sweep.mapped, fingerprint,
                                       set(sweep.documents))
    store.sync_to_disk()
    paths_redacted, label_counts = _write_listing_and_map(manifest, layout, sanitizer, sweep)
    removed = _remove_stale(layout, set(sweep.documents))
    _write_raw_figures(layout, extracted, sweep)
    counts = _summary_counts(extracted, sweep, sanitizer, paths_redacted, label_counts, removed)
    # A skipped file's name is sanitized on its own: a value found in another text is no reason to change it
    # (copies stay within their readers, and a skipped text has no readers yet).
    counts["skipped_files"] = skipped.shown(
        ((path, reason) for key, reason in sweep.skipped.items() for path in extracted[key].paths),
        lambda name: escape_name(sanitizer.redact_path(name)))
    return store.write_summary(layout, "sanitize", counts, manifest.signature)


def _prepare_output(layout) -> None:
    """Claim the output folder, make the sanitized store private, and clear temporaries a killed run left."""
    store.claim_out_dir(layout.root)
    store.ensure_private_dir(layout.sanitized_dir)
    store.remove_stale_temps(layout.sanitized_dir)
    store.remove_stale_temps(layout.root, ("sanitize.summary.json",))


def _sanitize_texts(layout, worker, extracted: dict[str, _Extracted], previous: dict[str, MapRow],
                    fingerprint: str, sweep: _Sweep, progress) -> list[tuple[str, MapRow]]:
    """Each extracted text's map row, reused when the same sanitizer made it; a text over budget is counted, not kept."""
    kept: list[tuple[str, MapRow]] = []
    for key in sorted(extracted):
        row = _reusable(previous.get(key), fingerprint, layout)
        if row is None:
            row = _sanitize_one(layout, worker, key, fingerprint, ocr_pages=extracted[key].ocr_pages)
        else:
            sweep.reused += 1
        if isinstance(row, str):  # over budget: fails closed, not indexed, counted and named
            _skip(sweep, key, row, extracted)
        else:
            kept.append((key, row))
        progress.advance()
    return kept


def _skip(sweep: _Sweep, key: str, reason: str, extracted: dict[str, _Extracted]) -> None:
    """Count a text sanitize could not finish, per file, and remember its key for the guard and the report."""
    sweep.failed[reason] += max(1, len(extracted[key].paths))
    sweep.skipped[key] = reason


def _gather_documents(sweep: _Sweep, kept: list[tuple[str, MapRow]], extracted: dict[str, _Extracted]) -> None:
    """Group the kept texts into documents (equal sanitized texts are one) and count their findings per file."""
    for key, row in kept:
        sweep.mapped.append(row)
        paths = extracted[key].paths
        files = max(1, len(paths))  # counted per file, never per distinct raw content
        sweep.by_rule.update({rule: count * files for rule, count in row.findings.items()})
        sweep.changed += files if row.findings else 0
        sweep.copies_removed += sum(row.copy_findings.values())
        sweep.bytes_in += row.bytes_in
        document = sweep.documents.setdefault(row.doc, _Document())
        document.raw_paths.update(paths)
        document.kind_by_path.update((path, extracted[key].kind) for path in paths)
        document.ocr_pages_by_path.update((path, extracted[key].ocr_pages) for path in paths)
        document.modified_by_path.update(extracted[key].modified)


def _write_listing_and_map(manifest, layout, sanitizer: Sanitizer, sweep: _Sweep):
    """Write the listing, the erase list and the private map, in that order.

    Returns how many paths changed and the labeller's counts (groups dropped, documents without one).
    """
    labeller = _labeller(manifest, sanitizer, sweep.sources)
    rows, paths_redacted = _listing_rows(sweep.documents, sanitizer, sweep.sources, labeller, layout)
    catalogue.write_documents(layout.sanitized_listing, rows)
    # The erase list before the map: once the map is rewritten, nothing else remembers the old documents.
    write_erase_list(layout, (read_erase_list(layout) | sweep.superseded) - set(sweep.documents))
    store.write_jsonl(map_path(layout), [asdict(row) for row in sweep.mapped])
    skipped.write_keys(layout, sweep.skipped)
    return paths_redacted, labeller.counts


def _write_raw_figures(layout, extracted: dict[str, _Extracted], sweep: _Sweep) -> None:
    """The raw-side figures, kept inside the extract store.

    Counts of files and of sanitized documents only go to the summary: a
    count of distinct raw texts, or of those reused by raw key, says which
    raw files are equal, and a raw byte total (even bytes_out, beside the
    files' sizes) measures what was removed.
    """
    bytes_out = sum(layout.doc_text_path(layout.sanitized_dir, doc).stat().st_size for doc in sweep.documents)
    store.write_figures(layout, "sanitize", {"texts": len(extracted), "reused": sweep.reused,
                                             "bytes_in": sweep.bytes_in, "bytes_out": bytes_out,
                                             "copies_removed": sweep.copies_removed})


def _summary_counts(extracted: dict[str, _Extracted], sweep: _Sweep, sanitizer: Sanitizer,
                    paths_redacted: int, label_counts, removed: int) -> dict:
    """The summary's counts: files, documents and findings (by rule, category and kind), never a raw figure."""
    categories: Counter = Counter()
    kinds: Counter = Counter()
    for rule_id, count in sweep.by_rule.items():
        rule = next((active.rule for active in sanitizer.rules if active.rule.id == rule_id), None)
        categories[rule.category if rule else "unknown"] += count
        kinds[rule.kind if rule else "unknown"] += count
    return {
        "documents": len(sweep.documents),
        "files": sum(max(1, len(item.paths)) for item in extracted.values()),
        "files_changed": sweep.changed,
        "findings": sum(sweep.by_rule.values()),
        "findings_by_rule": dict(sorted(sweep.by_rule.items())),
        "findings_by_category": dict(sorted(categories.items())),
        "findings_by_kind": dict(sorted(kinds.items())),
        "paths_redacted": paths_redacted,
        "groups_dropped": label_counts.groups_dropped,
        "documents_without_group": label_counts.without_group,
        "removed_stale": removed,
        "rules_active": len(sanitizer.rules),
        "skipped": sum(sweep.failed.values()),
        "skipped_by_reason": dict(sorted(sweep.failed.items())),
    }


def erase_list_path(layout) -> Path:
    return Path(layout.extract_dir) / ERASE_LIST


def read_erase_list(layout) -> set[str]:
    """The superseded documents still to erase (``embedding.erase`` reads this through ``sanitized_store``)."""
    try:
        return {row["doc"] for row in store.read_jsonl(erase_list_path(layout)) if DOC_ID.fullmatch(row.get("doc", ""))}
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, TypeError, AttributeError):
        raise StoreError(f"{erase_list_path(layout)} is unreadable: run sanitize again") from None


def write_erase_list(layout, docs: set[str]) -> None:
    """Keep the documents still to erase; no file when there are none."""
    path = erase_list_path(layout)
    if docs:
        store.write_jsonl(path, [{"doc": doc} for doc in sorted(docs)])
    elif path.exists():
        path.unlink()


def _superseded(layout, sanitizer, previous: dict[str, MapRow], extracted: dict, mapped: list[MapRow],
                fingerprint: str, current: set[str]) -> set[str]:
    """Last run's documents that another sanitizer made and the current one would not make again.

    An unchanged raw text (the same key) that now sanitizes to another
    document supersedes its old one (a new rule, an allow-list change, an
    upgrade): the old windows were computed from text the current sanitizer
    would not let out, so they are erased. A text that left (its file changed
    or removed) under another sanitizer has no new document to compare
    with: its old sanitized text is sanitized again, and erased when the
    current sanitizer would change it (or cannot say, over its budget).
    Documents of this run are never superseded.
    """
    now = {row.key: row for row in mapped}
    superseded = set()
    for key, old in previous.items():
        if old.doc in current or not DOC_ID.fullmatch(old.doc):
            continue
        if old.sanitizer == fingerprint:
            # The same sanitizer, other copies: a value found since in a text of wider readers (or one
            # whose readers changed) made this text another document; the old one held the value.
            if key in now and list(now[key].copies) != list(old.copies) and now[key].doc != old.doc:
                superseded.add(old.doc)
            continue
        if key in extracted:
            if key not in now or now[key].doc != old.doc:
                superseded.add(old.doc)
        elif old.doc not in superseded and _would_change(layout, sanitizer, old.doc):
            superseded.add(old.doc)
    return superseded


def _would_change(layout, sanitizer, doc: str) -> bool:
    """Whether the current sanitizer changes this sanitized text (True when it is gone or over budget)."""
    try:
        text = layout.doc_text_path(layout.sanitized_dir, doc).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    clean = _redact_in_budget(*sanitizer, text)[0]
    return clean != text


def _reusable(row: MapRow | None, fingerprint: str, layout) -> MapRow | None:
    """Last run's result for this key, when the same sanitizer made it and its text is still there."""
    if row is None or row.sanitizer != fingerprint or not DOC_ID.fullmatch(row.doc):
        return None
    if not layout.doc_text_path(layout.sanitized_dir, row.doc).is_file():
        return None
    return row


def _sanitize_one(layout, sanitizer: Sanitizer, key: str, fingerprint: str, others: dict | None = None,
                  ocr_pages=None) -> MapRow:
    """Sanitize one extracted text (with the copies of ``others``, values of other texts), store it, say what it became.

    ``ocr_pages``: its pages that OCR read, which the scanner reads with tolerance (``recognised.py``).
    """
    raw = _read_extracted(layout, key)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StoreError("a text in the extract store is not UTF-8: run extract again") from None
    clean, counts, values, copied = _redact_in_budget(*sanitizer, text, others, ocr_pages)
    if clean is None:
        return counts  # the reason it was not sanitized
    doc = doc_id(clean)
    _write_if_changed(layout.doc_text_path(layout.sanitized_dir, doc), clean.encode("utf-8"))
    return MapRow(key, doc, fingerprint, dict(sorted(counts.items())), len(raw), values, sorted(others or ()),
                  dict(sorted(copied.items())))


def _key_groups(manifest, sanitizer: Sanitizer, extracted: dict[str, _Extracted], kept: list) -> dict[str, frozenset]:
    """Each kept text's access groups: the union of its raw paths' (``labels.py``), for the readers rule of copies.

    A labeller of its own, so that the listing's labeller counts each dropped
    group name once; its group-name check sees every value of the sweep, as
    the listing's does, so both give a path the same groups.
    """
    from bastion_agent.sanitizing.labels import open_root

    every = CopySources()
    for _, row in kept:
        every.add(frozenset(), row.values)
    labeller = _labeller(manifest, sanitizer, every)
    source = open_root(labeller.settings, labeller.root)
    try:
        return {key: frozenset(group for path in extracted[key].paths for group in labeller.path_groups(path, source))
                for key, _ in kept}
    finally:
        if source is not None:
            source.close()


def _apply_copies(layout, worker, fingerprint: str, kept: list, sweep: _Sweep, groups: dict[str, frozenset],
                  extracted: dict[str, _Extracted]) -> list:
    """Remove, in each text of the sweep, the copies of values found in texts whose readers include its own.

    Each text's own sanitizing (``_sanitize_one``) already removed the copies
    of its own values; this pass takes the values of the texts that may
    reach it (``copy_readers``: one matcher per group set of the targets,
    one pass per text whatever their number) and finds which of them its raw
    text holds. A text whose stored result was made with another set of
    copies (it holds a value found elsewhere, a value appeared in or left
    some other file since, or the labels changed) is sanitized again from
    its raw text with those values, in the same pass as its own findings
    (``Sanitizer.redact_found``'s ``others``), so a re-sweep that finds a
    value in a new file cleans the older documents that hold it.
    """
    result = []
    for key, row in kept:
        present: list[str] = []
        matcher = sweep.sources.matcher_for(groups[key])
        if matcher is not None:
            raw = _read_extracted(layout, key).decode("utf-8", "replace")
            present = sorted(matcher.present(raw) - set(row.values))
        if present != list(row.copies):
            row = _sanitize_one(layout, worker, key, fingerprint, {value: matcher.values[value] for value in present},
                                extracted[key].ocr_pages)
            if isinstance(row, str):
                _skip(sweep, key, row, extracted)
                continue
        result.append((key, row))
    return result


def _redact_in_budget(pool, settings: SanitizeSettings, text: str, others: dict | None = None, ocr_pages=None):
    """``(clean, counts, values, copies)`` from a budgeted worker, or ``(None, reason, {}, {})`` when it overran.

    ``others`` are values of other texts whose copies go too (``copies`` counts them, apart);
    ``ocr_pages`` the pages OCR read, scanned with tolerance (``recognised.py``).

    A custom pattern that backtracks without end (``(a+)+$``) is stopped by
    the time budget like a runaway reader; the reason names the rule that
    was running, so the manifest's author knows which pattern to fix.
    """
    import pickle

    from bastion_agent.core.budget import Call

    data = text.encode("utf-8")
    answer = pool.run(Call("redact", (pickle.dumps(settings), data, pickle.dumps(others or {}), ocr_pages), len(data)))
    if answer.reason is not None:
        rule = answer.progress
        return None, f"{answer.reason} (rule {rule})" if rule and rule != "built-in" else answer.reason, {}, {}
    if "error" in answer.header:
        raise StoreError(f"sanitize failed on a text of the extract store ({answer.header['error']}); run it again")
    values = answer.header.get("values", {})
    return (answer.data.decode("utf-8"), Counter(answer.header.get("findings", {})), values,
            Counter(answer.header.get("copies", {})))


_WORKER_SANITIZERS: dict[bytes, "Sanitizer"] = {}


def budget_task_redact(note, settings_blob: bytes, data: bytes, others_blob: bytes = b"", ocr_pages=None):
    """The worker's side of ``_redact_in_budget``: redact, saying which custom rule is running."""
    import hashlib
    import pickle

    digest = hashlib.sha256(settings_blob).digest()
    sanitizer = _WORKER_SANITIZERS.get(digest)
    if sanitizer is None:
        _WORKER_SANITIZERS.clear()
        sanitizer = _WORKER_SANITIZERS[digest] = Sanitizer(pickle.loads(settings_blob))
    text = data.decode("utf-8")
    others = pickle.loads(others_blob) if others_blob else {}
    clean, counts, values = sanitizer.redact_found_noting(text, note, others, ocr_pages)
    copied = Counter(rule for _, _, rule in copies.occurrences(text, others)) if others else Counter()
    # values: raw, handed back to the stage through the worker's pipe, kept in the private map
    return {"findings": dict(counts), "values": values, "copies": dict(copied)}, clean.encode("utf-8")


def _labeller(manifest, sanitizer: Sanitizer, sources: CopySources):
    """The access labeller of this run: the manifest's rules, and the path rules a group name must pass.

    A group name from the file system must also hold no value found anywhere in the sweep: the
    check only drops a label (the document is then read by fewer), it never shows a value.
    """
    from bastion_agent.core.access import AccessSettings
    from bastion_agent.sanitizing.labels import Labeller

    settings = getattr(manifest, "access", None) or AccessSettings()
    source = getattr(manifest, "source", None)
    every = sources.every_value()
    matcher = copies.Matcher(every) if every else None
    return Labeller(settings, getattr(source, "root", None),
                    lambda name: escape_name(_without_copies(sanitizer.redact_path(name), matcher)))


def _listing_rows(documents: dict[str, _Document], sanitizer: Sanitizer, sources: CopySources | None = None,
                  labeller=None, layout=None) -> tuple[list[Document], int]:
    """``sanitized/listing.jsonl`` rows (doc, sanitized paths, kind of the first raw path, groups) and how many paths changed.

    A paged document (a PDF, an image) also gets its page map (``pages.py``), made from its
    sanitized text and the pages extract recognised by OCR.

    A value found in a text of the sweep is removed from the path names too, under the readers
    rule of the texts (``copy_readers``): only values of texts whose groups include the document's.
    The paths are sanitized, then their control characters escaped, so search, serve, MCP and
    publish show no name that can forge a line or drive a terminal. The groups are computed
    from the raw paths (``labels``); only their names are written.
    """
    from bastion_agent.sanitizing.labels import open_root

    source = open_root(labeller.settings, labeller.root) if labeller is not None else None
    try:
        return _rows(documents, sanitizer, sources or CopySources(), labeller, source, layout)
    finally:
        if source is not None:
            source.close()


def _rows(documents, sanitizer, sources: CopySources, labeller, source, layout) -> tuple[list[Document], int]:
    rows, paths_redacted = [], 0
    for doc in sorted(documents):
        document = documents[doc]
        groups, by_path = labeller.labelled(document.raw_paths, source) if labeller is not None else (None, None)
        matcher = sources.matcher_for(frozenset(groups or ()))
        redacted = {path: _without_copies(sanitizer.redact_path(path), matcher) for path in document.raw_paths}
        paths_redacted += sum(1 for path, clean_path in redacted.items() if clean_path != path)
        shown = {path: escape_name(clean_path) for path, clean_path in redacted.items()}  # every output's form
        rows.append(catalogue.merge(_file_documents(doc, document, shown, by_path, layout)))
    return rows, paths_redacted


def _file_documents(doc: str, document: _Document, shown: dict[str, str], by_path: dict[str, tuple] | None,
                    layout) -> list[Document]:
    """The document as each of its files makes it (one path each), in raw-path order, for ``catalogue.merge``:
    its path as shown, its kind, its time and its own groups (kept per path, so that a caller who may read
    only some of a document's paths is shown only their times), the text's size, and for the first file
    the page map made from the sanitized text and the pages extract recognised by OCR in that file."""
    labelled = by_path is not None
    raw_paths = sorted(document.raw_paths)
    size = pages = None
    if layout is not None:
        text_path = layout.doc_text_path(layout.sanitized_dir, doc)
        size = text_path.stat().st_size
        ocr_pages = document.ocr_pages_by_path.get(raw_paths[0]) if raw_paths else None
        if ocr_pages is not None:
            pages = page_map(text_path.read_bytes().decode("utf-8"), ocr_pages)
    if not raw_paths:
        return [Document(doc, groups=[] if labelled else None, path_groups=[] if labelled else None, size=size)]
    return [Document(doc, paths=[shown[raw]], kind=document.kind_by_path.get(raw, ""),
                     modified=[document.modified_by_path.get(raw)],
                     groups=list(by_path.get(raw, ())) if labelled else None,
                     path_groups=[list(by_path.get(raw, ()))] if labelled else None,
                     size=size, pages=pages if index == 0 else None)
            for index, raw in enumerate(raw_paths)]


def _without_copies(text: str, matcher) -> str:
    if matcher is None:
        return text
    found = [Finding(s, e, -1, rule) for s, e, rule in matcher.finditer(text)]
    return replace_findings(text, merge(found))[0] if found else text


def _extracted_keys(layout) -> dict[str, _Extracted]:
    """The texts extract read, by extract key: their raw paths (sorted) and the kind of the first."""
    listing = Path(layout.extract_listing)
    if not listing.is_file():
        raise StoreError(f"no extract store at {layout.extract_dir}: run extract first")
    try:
        rows = catalogue.read_extract_listing(layout.extract_listing)
    except OSError as exc:
        raise StoreError(f"extract listing {listing} is unreadable ({exc.__class__.__name__}): run extract again") from None
    found: dict[str, list[tuple[str, str]]] = {}
    ocr_pages: dict[str, list[int] | None] = {}  # the same for every path of a key: they hold the same bytes
    modified: dict[str, dict[str, str]] = {}
    for row in rows:
        if row.status != "extracted":
            continue
        key = row.key
        if not isinstance(key, str) or not DOC_ID.fullmatch(key):
            raise StoreError(f"extract listing {listing} has an invalid or missing key: run extract again")
        found.setdefault(key, []).append((row.path, row.kind))
        ocr_pages.setdefault(key, _ocr_pages(row.ocr_pages))
        if isinstance(row.modified, str) and row.path:
            modified.setdefault(key, {})[row.path] = row.modified
    keys = {}
    for key, entries in found.items():
        entries.sort()
        keys[key] = _Extracted(paths=sorted({path for path, _ in entries if path}), kind=entries[0][1],
                               ocr_pages=ocr_pages[key], modified=modified.get(key, {}))
    return keys


def _ocr_pages(value) -> list[int] | None:
    """A listing row's ``ocr_pages`` (page numbers from 1), or None when the text has no pages."""
    if not isinstance(value, list):
        return None
    return [page for page in value if isinstance(page, int) and not isinstance(page, bool) and page > 0]


def _read_extracted(layout, key: str) -> bytes:
    try:
        return layout.doc_text_path(layout.extract_dir, key).read_bytes()
    except FileNotFoundError:
        # No key in the message: it is a hash of raw bytes, and stderr is outside the extract store.
        raise StoreError(f"extract store at {layout.extract_dir} lacks a text its listing names: run extract again") from None


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    store.write_private(path, data, durable=False)


def _remove_stale(layout, keep: set[str]) -> int:
    """Delete sanitized texts that are no document of this run (their file left, changed, or an old id)."""
    removed = 0
    for path in Path(layout.sanitized_dir).glob("*.txt"):
        if DOC_ID.fullmatch(path.stem) and path.stem not in keep:
            path.unlink()
            removed += 1
    return removed
