"""The main content of an HTML page: the article, not the site around it.

A saved site repeats its chrome on every page (the Rust book's theme menu
``Auto / Light / Rust / Coal / Navy / Ayu``, Sphinx's "previous | next |
index" bars, a cookie banner): indexed, it matches the site's name in every
query and pushes the prose down. This module finds the spans of the markup
that are chrome and cuts them out before ``htmltext`` turns the rest into
text, so how text is laid out stays ``htmltext``'s alone.

What is chrome, in this order:

1. The page's own semantics. With a ``<main>`` (or ``role="main"``) only
   the main content is kept (and the ``<title>``); without one, the
   ``<article>`` elements. Inside what is kept, and everywhere when there is
   neither, these are dropped: ``nav``; a ``header``/``footer`` that is the
   page's banner or footer (not one inside an article, section, main or
   aside); an ``aside`` outside main/article; ARIA roles ``navigation``,
   ``banner``, ``contentinfo``, ``complementary``, ``search``, ``menu``,
   ``menubar``, ``toolbar``, ``tablist``, ``dialog``; ``button`` and
   ``select``; elements marked ``hidden``; elements whose id or class names
   a cookie or consent bar, a sidebar, a navigation bar, a breadcrumb.
2. Pages with neither main nor article (DocBook, old generators): a block
   (``div``, ``ul``, ``ol``, ``table``, ``section``, ``dl``, ``td``) whose
   text is mostly link text (``LINK_DENSITY``) and that holds at least
   ``MIN_LINKS`` links is a menu.
3. When that leaves nothing (a page that is a table of contents), the whole
   visible text is kept: a page is never emptied by this step.

Script, style, template and noscript are dropped by ``htmltext`` as before.
What is dropped here is not indexed; the byte-level scan of extract still
reads the whole page (``reading.py`` compares its view with the whole
visible text), so nothing hidden in a menu escapes it.

Linear in the size of the page: one parse, a stack whose end tags are
matched through a count per tag name (an end tag that matches nothing costs
nothing), and one pass over the sorted spans.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from bastion_agent.extracting.formats import htmltext
from bastion_agent.extracting.formats.base import decode_text

LINK_DENSITY = 0.5  # share of a block's text inside links above which it is a menu (no main, no article)
MIN_LINKS = 3  # ... and the links it needs: one linked sentence is not a menu

_CHROME_ROLES = frozenset(
    "navigation banner contentinfo complementary search menu menubar toolbar tablist dialog alertdialog".split()
)
_CHROME_TAGS = frozenset({"nav", "button", "select"})
_LANDMARK_PARENTS = frozenset({"article", "main", "section", "aside", "nav"})
_CONTENT_PARENTS = frozenset({"article", "main"})
_BLOCKS = frozenset("div ul ol table section dl td menu".split())
_SKIPPED = frozenset({"script", "style", "template", "noscript"})
# A word of an id or class that names chrome: it ends with one of these, or with one of these and a
# container word ("nav-wrapper", "cookie-banner", "sphinxsidebar"), but not "sidebar-visible".
_CHROME_WORD = re.compile(
    r"(?:[a-z0-9]+[-_])*?[a-z]*(?:nav|navbar|navigation|menu|menubar|sidebar|breadcrumbs?|navheader|navfooter|"
    r"footer|related|cookies?|consent|gdpr|skip-?link)"
    r"(?:[-_](?:bar|wrapper|container|banner|notice|box|links|area|inner|popup|list|wide-wrapper))?",
    re.IGNORECASE,
)
_NEVER_CHROME = frozenset({"html", "body", "main", "article"})  # "sidebar-visible" on <html> is a state
_IN_MAIN = "\x00main"  # the count of open main elements (<main> or role="main") in ``_Spans.open``
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class _Element:
    __slots__ = ("tag", "start", "text", "links", "anchors", "chrome", "block")

    def __init__(self, tag: str, start: int, chrome: bool, block: bool):
        self.tag, self.start, self.chrome, self.block = tag, start, chrome, block
        self.text = self.links = self.anchors = 0


class _Spans(HTMLParser):
    """Finds the spans of the markup that are main content and those that are chrome."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [match.end() for match in re.finditer("\n", markup)]
        self.stack: list[_Element] = []
        self.open: dict[str, int] = {}  # elements of each tag name on the stack
        self.mains: list[tuple[int, int]] = []
        self.articles: list[tuple[int, int]] = []
        self.title: tuple[int, int] | None = None
        self.chrome: list[tuple[int, int]] = []  # dropped whatever the page has
        self.menus: list[tuple[int, int]] = []  # dropped when the page has no main and no article
        self.size = len(markup)

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            return
        names = dict(attrs)
        role = (names.get("role") or "").strip().lower()
        is_main = tag == "main" or role == "main"
        chrome = not is_main and self._is_chrome(tag, role, names)
        kind = _MainElement if is_main else _Element
        element = kind(tag, self.position(), chrome, tag in _BLOCKS and not is_main)
        if tag == "a" and names.get("href") is not None:
            element.anchors = 1
        self.stack.append(element)
        self.open[tag] = self.open.get(tag, 0) + 1
        if is_main:
            self.open[_IN_MAIN] = self.open.get(_IN_MAIN, 0) + 1

    def _is_chrome(self, tag: str, role: str, names: dict) -> bool:
        if tag in _CHROME_TAGS or role in _CHROME_ROLES or "hidden" in names:
            return True
        if (names.get("aria-hidden") or "").lower() == "true":
            return True
        inside_landmark = self.open.get(_IN_MAIN) or any(self.open.get(parent) for parent in _LANDMARK_PARENTS)
        if tag in ("header", "footer") and not inside_landmark:
            return True
        inside_content = self.open.get(_IN_MAIN) or any(self.open.get(parent) for parent in _CONTENT_PARENTS)
        if tag == "aside" and not inside_content:
            return True
        if tag in _NEVER_CHROME:
            return False
        words = " ".join(value for key, value in names.items() if key in ("id", "class") and value).split()
        return any(_CHROME_WORD.fullmatch(word) for word in words[:16])

    def handle_startendtag(self, tag, attrs):
        pass  # a self-closed element holds no text

    def handle_endtag(self, tag):
        if not self.open.get(tag):
            return  # an end tag that matches nothing open
        end = self.position()
        while self.stack:
            element = self.stack.pop()
            self.open[element.tag] -= 1
            self._close(element, end)
            if element.tag == tag:
                break

    def handle_data(self, data):
        if not self.stack or any(self.open.get(tag) for tag in _SKIPPED):
            return
        visible = len(data.strip())
        top = self.stack[-1]
        top.text += visible
        if self.open.get("a"):
            top.links += visible

    def _close(self, element: "_Element", end: int) -> None:
        span = (element.start, end)
        if isinstance(element, _MainElement):
            self.open[_IN_MAIN] -= 1
            self.mains.append(span)
        elif element.tag == "article":
            self.articles.append(span)
        elif element.tag == "title" and self.title is None:
            self.title = span
        if element.chrome:
            self.chrome.append(span)
            return  # its text is not the parent's
        if element.block and element.anchors >= MIN_LINKS and element.text and (
                element.links >= LINK_DENSITY * element.text):
            self.menus.append(span)
            return
        if self.stack:
            parent = self.stack[-1]
            parent.text += element.text
            parent.links += element.links
            parent.anchors += element.anchors

    def finish(self) -> None:
        while self.stack:
            element = self.stack.pop()
            self.open[element.tag] -= 1
            self._close(element, self.size)


class _MainElement(_Element):
    """A ``<main>`` or an element with ``role="main"``."""

    __slots__ = ()


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans not inside another, in order."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if kept and start < kept[-1][1]:
            if end > kept[-1][1]:
                kept[-1] = (kept[-1][0], end)
            continue
        kept.append((start, end))
    return kept


def _cut(regions: list[tuple[int, int]], drops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``regions`` without the parts ``drops`` cover; both lists sorted and without overlaps."""
    pieces: list[tuple[int, int]] = []
    index = 0
    for start, end in regions:
        while index < len(drops) and drops[index][1] <= start:
            index += 1
        cursor, probe = start, index
        while probe < len(drops) and drops[probe][0] < end:
            if drops[probe][0] > cursor:
                pieces.append((cursor, drops[probe][0]))
            cursor = max(cursor, drops[probe][1])
            probe += 1
        if cursor < end:
            pieces.append((cursor, end))
    return pieces


def main_markup(markup: str) -> str:
    """The markup of the page's main content (see the module's docstring); may be empty."""
    parser = _Spans(markup)
    try:
        parser.feed(markup)
        parser.close()
    except (AssertionError, ValueError):  # malformed markup the parser gives up on
        pass
    parser.finish()
    regions = _outermost(parser.mains) or _outermost(parser.articles)
    drops = parser.chrome if regions else parser.chrome + parser.menus
    if not regions:
        regions = [(0, len(markup))]
    elif parser.title is not None and parser.title[1] <= regions[0][0]:
        regions = [parser.title] + regions
    return "".join(markup[start:end] for start, end in _cut(regions, _outermost(drops)))


def html_main_text(html: str) -> str:
    """Visible text of the page's main content; the whole visible text when that is empty."""
    markup = htmltext._escape_unclosed_comments(htmltext._close_open_tags(html))
    text = htmltext.html_to_text(main_markup(markup))
    return text if text.strip() else htmltext.html_to_text(markup)


def read_html_main(data: bytes) -> str:
    match = htmltext._META_CHARSET.search(data[:4096])
    declared = match.group(1).decode("ascii") if match else None
    return html_main_text(decode_text(data, declared))
