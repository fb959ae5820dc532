"""The page of one sanitized document (``GET /doc/ID``): its text in full, the hit marked, its pages shown.

Rendered on the server from a ``searching.document_view.DocumentView``: every
piece of the document (its text, its paths) is escaped into a text node, and
the page carries no script, so nothing in a document can run in the reader's
browser. Its policy allows its one inline style block, by hash, and nothing
else. The hit a reader came from (``?hit=CHUNK_ID``) is marked and scrolled
to by its fragment; a scanned document says that its text was read by OCR.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from bastion_agent.searching.document_view import DocumentView

STYLE = r"""
:root { color-scheme: light dark; --bg: #fbfbfa; --text: #1d1f21; --muted: #5d6166; --mark: #fff1a8; --line: #d9dadc; }
@media (prefers-color-scheme: dark) { :root { --bg: #16181b; --text: #e6e6e3; --muted: #a2a6ab; --mark: #5b4c00; --line: #34373c; } }
html { background: var(--bg); color: var(--text); }
body { font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif;
  max-width: 52rem; margin: 0 auto; padding: 1.25rem; }
h1 { font-size: 1.2rem; margin: .5rem 0; overflow-wrap: anywhere; }
.meta, .back { color: var(--muted); font-size: .9rem; }
.ocr { border-left: 3px solid var(--line); padding-left: .6rem; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font: inherit; border-top: 1px solid var(--line); padding-top: 1rem; }
mark { background: var(--mark); color: inherit; scroll-margin-top: 4rem; }
.page { display: block; color: var(--muted); font-size: .85rem; border-top: 1px dashed var(--line); margin: .6rem 0; }
"""


def render(view: DocumentView, hit: str | None = None) -> bytes:
    """The HTML page of ``view``, with the window ``hit`` (a chunk id) marked when it is one of the document's."""
    marked = view.window_at(hit) if hit else None
    title = escape(", ".join(view.paths) or f"document {view.doc[:12]}")
    meta = [f"document {escape(view.doc[:12])}", f"{len(view.windows)} window{'s' if len(view.windows) != 1 else ''}"]
    if view.modified:
        meta.insert(0, f"modified {escape(view.modified.replace('T', ' '))}")
    notes = []
    if view.ocr:
        notes.append('<p class="ocr">scanned: OCR text, it may hold recognition errors</p>')
    if view.truncated:
        notes.append('<p class="ocr">this document is long: the text below stops before its end</p>')
    body = (f'<p class="back"><a href="/">&larr; back to search</a></p>\n<h1>{title}</h1>\n'
            f'<p class="meta">{" &middot; ".join(meta)}</p>\n{"".join(notes)}'
            f"<pre>{_text(view, marked)}</pre>\n")
    page = ('<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="no-referrer">\n<link rel="icon" href="data:,">\n'
            f"<title>{title} - bastion</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")
    return page.encode("utf-8")


def content_security_policy() -> str:
    """The page's own style block by hash; no script, no request to anywhere."""
    digest = base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; base-uri 'none'; form-action 'none'"


def _text(view: DocumentView, marked: dict | None) -> str:
    """The text escaped, a page marker where each page starts, and the hit's window marked."""
    cuts = sorted({0, len(view.text), *(page.start for page in view.pages),
                   *((marked["start"], marked["end"]) if marked else ())})
    starts = {page.start: page for page in view.pages}
    out = []
    for begin, end in zip(cuts, cuts[1:] + [None]):
        page = starts.get(begin)
        if page is not None and view.pages and (page.page or 0) > 1:
            label = f"page {page.page}" + (" (scanned)" if page.ocr else "")
            out.append(f'<span class="page">{escape(label)}</span>')
        if end is None:
            break
        piece = escape(view.text[begin:end].replace("\f", ""))
        if marked and begin == marked["start"]:
            out.append(f'<mark id="hit">{piece}')
        else:
            out.append(piece)
        if marked and end == marked["end"]:
            out.append("</mark>")
    return "".join(out)
