"""The main content of HTML pages: the article is indexed, the site chrome is not.

Before, every Rust-book window began with the theme menu ("Auto / Light /
Rust / Coal / Navy / Ayu"), which matched "Rust" in every query.
"""

from __future__ import annotations

import codecs
import glob
import unittest
from pathlib import Path

from bastion_agent.extracting import readers, reading
from bastion_agent.testing.folders import TempCase

AWS = "AKIAIOSFODNN7EXAMPLE"
PROSE = ("Ownership is a set of rules that govern how a program manages memory. "
         "All programs have to manage the way they use memory while running.")

MDBOOK_PAGE = f"""<!DOCTYPE html><html lang="en" class="sidebar-visible no-js light"><head>
<title>What is Ownership? - The Rust Programming Language</title><script>var path_to_root = "";</script></head>
<body><div id="body-container">
<nav id="sidebar" class="sidebar" aria-label="Table of contents"><ol class="chapter">
<li><a href="intro.html">Introduction</a></li><li><a href="ch01.html">1. Getting Started</a></li></ol></nav>
<div id="page-wrapper" class="page-wrapper"><div class="page">
<div id="menu-bar" class="menu-bar sticky"><div class="left-buttons">
<button id="theme-toggle" type="button" title="Change theme">T</button>
<ul id="theme-list" class="theme-popup" role="menu"><li role="none"><button role="menuitem" class="theme">Auto</button></li>
<li role="none"><button role="menuitem" class="theme">Light</button></li><li><button class="theme">Coal</button></li>
<li><button class="theme">Navy</button></li><li><button class="theme">Ayu</button></li></ul></div>
<h1 class="menu-title">The Rust Programming Language</h1></div>
<div id="content" class="content"><main>
<h1>What Is Ownership?</h1><p>{PROSE}</p>
<nav class="nav-wrapper" aria-label="Page navigation"><a rel="prev" href="ch03.html">Previous chapter</a></nav>
</main></div></div></div>
<div id="cookie-banner">We use cookies. Accept all cookies</div>
<footer>Copyright the Rust project developers</footer></div></body></html>"""


def main_text(html: str) -> str:
    result = readers.read("html", html.encode())
    assert result.text is not None, result
    return result.text


class MainContentTests(unittest.TestCase):
    def test_an_mdbook_page_keeps_the_chapter_and_drops_menus_themes_and_banners(self):
        text = main_text(MDBOOK_PAGE)
        self.assertIn("What Is Ownership?", text)
        self.assertIn(PROSE, text)
        self.assertIn("What is Ownership? - The Rust Programming Language", text)  # the page title
        for chrome in ("Auto", "Coal", "Navy", "Ayu", "Getting Started", "Previous chapter", "cookies",
                       "Copyright the Rust", "var path_to_root"):
            self.assertNotIn(chrome, text)

    def test_aria_roles_mark_chrome_where_there_are_no_semantic_elements(self):
        page = f"""<body><div role="banner">Site name | Log in</div><div role="navigation"><a href="/">Home</a></div>
        <div role="main"><p>{PROSE}</p></div><div role="complementary">Related: other pages</div>
        <div role="contentinfo">Imprint</div></body>"""
        self.assertEqual(main_text(page), PROSE)

    def test_the_header_and_footer_of_an_article_are_its_own(self):
        page = f"""<body><header><a href="/">Blog</a> <a href="/about">About</a></header>
        <article><header><h1>Release notes 2.0</h1><p>by Ana</p></header><p>{PROSE}</p>
        <aside>Note: memory is freed at scope end.</aside><footer>Tags: memory</footer></article>
        <aside>Popular posts</aside><footer>Contact</footer></body>"""
        text = main_text(page)
        for kept in ("Release notes 2.0", "by Ana", PROSE, "Note: memory is freed", "Tags: memory"):
            self.assertIn(kept, text)
        for chrome in ("Blog", "About", "Popular posts", "Contact"):
            self.assertNotIn(chrome, text)

    def test_link_dense_blocks_are_menus_on_pages_without_semantics(self):
        links = "".join(f'<a href="p{i}.html">Chapter {i}</a> ' for i in range(8))
        page = f"""<body><div class="navheader"><table><tr><td><a href="a.html">Prev</a></td><td>Up</td>
        <td><a href="b.html">Next</a></td></tr></table></div><div class="toc-like">{links}</div>
        <div class="chapter"><h2>Memory</h2><p>{PROSE} See <a href="x.html">the allocator</a> for details.</p></div>
        <div class="navfooter"><a href="a.html">Prev</a> <a href="index.html">Home</a></div></body>"""
        text = main_text(page)
        self.assertIn(PROSE + " See the allocator for details.", text)
        for chrome in ("Prev", "Next", "Chapter 3", "Home"):
            self.assertNotIn(chrome, text)

    def test_a_page_that_is_only_links_is_kept_whole(self):
        links = "".join(f'<li><a href="p{i}.html">Chapter {i}</a></li>' for i in range(8))
        text = main_text(f"<body><ul>{links}</ul></body>")
        self.assertIn("Chapter 0", text)
        self.assertIn("Chapter 7", text)

    def test_a_page_without_chrome_is_read_as_before(self):
        page = f"<html><body><h1>Title</h1><p>{PROSE}</p><table><tr><td>a</td><td>b</td></tr></table></body></html>"
        from bastion_agent.extracting.formats import htmltext
        self.assertEqual(main_text(page), htmltext.read_html(page.encode()))

    @unittest.skipUnless(glob.glob("/usr/share/doc/rust-doc/html/book/ch04-01-*.html"), "rust-doc is not installed")
    def test_a_real_rust_book_page(self):
        data = Path(glob.glob("/usr/share/doc/rust-doc/html/book/ch04-01-*.html")[0]).read_bytes()
        text = readers.read("html", data).text
        self.assertIn("Ownership is a set of rules", text)
        lines = set(text.split("\n"))
        for chrome in ("Auto", "Light", "Rust", "Coal", "Navy", "Ayu", "Foreword", "1. Getting Started"):
            self.assertNotIn(chrome, lines)

    @unittest.skipUnless(glob.glob("/usr/share/doc/python3-doc/html/library/os.html"), "python3-doc is not installed")
    def test_a_real_sphinx_page(self):
        text = readers.read("html", Path("/usr/share/doc/python3-doc/html/library/os.html").read_bytes()).text
        self.assertIn("This module provides a portable way of using operating system dependent functionality", text)
        lines = set(text.split("\n"))
        for chrome in ("Navigation", "Table of Contents", "Previous topic", "This Page", "Quick search"):
            self.assertNotIn(chrome, lines)


class HostileMainContentTests(unittest.TestCase):
    """Nesting and end tags an attacker chooses: linear, and the scan still sees what is dropped."""

    def test_deep_nesting_and_end_tags_that_match_nothing(self):
        for page in ("<div>" * 300_000 + "deep text", "</span>" * 300_000 + "<p>text</p>",
                     "<main>" * 100_000 + "text" + "</main>" * 100_000, "<nav><a href=x>" * 100_000 + "<p>text",
                     "<div><a href=a>x</a>" * 100_000):
            with self.subTest(page=page[:14]):
                result = readers.read("html", page.encode())
                self.assertIsNotNone(result.text)

    def test_a_secret_in_a_menu_is_not_indexed_and_a_hidden_one_quarantines(self):
        page = f'<body><nav><a href="/">Home</a> key {AWS}</nav><main><p>{PROSE}</p></main></body>'.encode()
        text = main_text(page.decode())
        self.assertNotIn(AWS, text)
        self.assertEqual(reading.hidden_findings(page, text, None, "html"), [])  # dropped, not hidden
        # In the menu, behind a charset that turns ASCII into kanji: the whole page's plain view shows it.
        hidden = (b'<meta charset="iso-2022-jp"><body><nav>key \x1b$B' + AWS.encode() + b"\x1b(B</nav><main><p>"
                  + PROSE.encode() + b"</p></main></body>")
        text = readers.read("html", hidden).text
        self.assertEqual(reading.hidden_findings(hidden, text, None, "html"), ["aws-access-key"])
        # In the menu, UTF-16 encoded: the decoding reads it, the menu is dropped; nothing is hidden.
        utf16 = codecs.BOM_UTF16_LE + page.decode().encode("utf-16-le")
        text = readers.read("html", utf16).text
        self.assertNotIn(AWS, text)
        self.assertEqual(reading.hidden_findings(utf16, text, None, "html"), [])


class MainContentStageTests(TempCase):
    def test_the_stage_indexes_the_article_and_quarantines_a_menu_that_hides_a_key(self):
        self.put("site/book.html", MDBOOK_PAGE)
        self.put("site/hidden.html", b'<meta charset="iso-2022-jp"><nav>key \x1b$B' + AWS.encode()
                 + b"\x1b(B</nav><main><p>" + PROSE.encode() + b"</p></main>")
        self.run_stage()
        text = self.text_of("site/book.html")
        self.assertIn(PROSE, text)
        self.assertNotIn("Coal", text)
        self.assertEqual(self.listing()["site/hidden.html"]["reason"], "quarantined: aws-access-key")


if __name__ == "__main__":
    unittest.main()
