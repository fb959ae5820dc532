"""The search page in a real headless browser: Debian's chromium, driven through chromedriver.

The driver speaks W3C WebDriver over loopback HTTP with ``urllib`` (no
Selenium). Skipped when ``chromium`` or ``chromedriver`` is missing; CI
installs the Debian packages ``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

from bastion_agent.config import manifest as manifest_module
from bastion_agent.core.layout import Layout
from bastion_agent.embedding.endpoint import EndpointConfig
from bastion_agent.serving import serve, serve_settings
from bastion_agent.testing.serve_store import DOCS, TOKEN, Store
from bastion_agent.testing.dated_folder import DatedFolder
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import clean_env, closed_port_url

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
ENTER = "\ue007"
WAIT_SECONDS = 20.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# Enough windows for a second page of results, and one that holds markup.
MARKUP = "<b>jars</b> beware <img src=x onerror=alert(1)> claims about sourdough starter jars."  # 8-token windows
WORDS = "No doubt the gcc-doc package documents doing it, and docs are written for those who doubted."
BROWSER_DOCS = {
    **DOCS,
    MARKUP: ["notes/markup.html.txt"],
    WORDS: ["notes/words.txt"],
    **{f"Loaf number {n} of sourdough bread used flour, water and salt from batch {n}.": [f"bakery/loaf-{n:02}.txt"]
       for n in range(24)},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WebDriver:
    """The few W3C WebDriver commands the tests need, over chromedriver's loopback port."""

    def __init__(self, profile: Path):
        self.port = free_port()
        self.process = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait(lambda: self._call("GET", "/status").get("ready"), "chromedriver to start")
        options = {
            "binary": CHROMIUM,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--window-size=1100,900", f"--user-data-dir={profile}"],
        }
        session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}})
        self.session = f"/session/{session['sessionId']}"

    def quit(self) -> None:
        try:
            self._call("DELETE", self.session)
        finally:
            self.process.terminate()
            self.process.wait(WAIT_SECONDS)

    def _call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with NO_PROXY.open(request, timeout=WAIT_SECONDS * 2) as answer:
                return json.loads(answer.read()).get("value")
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"WebDriver {method} {path}: {exc.read()[:500]!r}") from None

    def _wait(self, condition, what: str):
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                value = condition()
            except (OSError, AssertionError):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}")
            time.sleep(0.05)

    def open(self, url: str) -> None:
        self._call("POST", self.session + "/url", {"url": url})

    def script(self, source: str, *args):
        return self._call("POST", self.session + "/execute/sync", {"script": source, "args": list(args)})

    def find(self, css: str) -> str:
        return self._call("POST", self.session + "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css: str, text: str) -> None:
        self._call("POST", f"{self.session}/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self._call("POST", f"{self.session}/element/{self.find(css)}/click", {})

    def keys_to_focused(self, text: str) -> None:
        """Type into whatever has the focus, as a person at the keyboard would."""
        active = self._call("GET", self.session + "/element/active")[ELEMENT]
        self._call("POST", f"{self.session}/element/{active}/value", {"text": text})

    def wait_for(self, source: str, what: str, *args):
        return self._wait(lambda: self.script(source, *args), what)

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._call("GET", self.session + "/screenshot")))


STATUS_TEXT = "document.getElementById('status').textContent"
STATUS = "return " + STATUS_TEXT
RESULTS = """return [...document.querySelectorAll('#results > li')].map(li => ({
  text: li.querySelector('.text').textContent,
  paths: [...li.querySelectorAll('.paths li')].map(p => p.textContent),
  marks: [...li.querySelectorAll('mark')].map(m => m.textContent),
  elements: [...li.querySelector('.text').querySelectorAll('*')].map(e => e.tagName),
  score: li.querySelector('.score').textContent,
  meta: li.querySelector('.meta').textContent}))"""


@unittest.skipUnless(CHROMIUM and CHROMEDRIVER, "needs chromium and chromedriver (apt-get install chromium chromium-driver)")
class SearchPageTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = tempfile.TemporaryDirectory()
        root = Path(cls.holder.name)
        cls.stub = StubServer().start()
        store_dir = root / "store"
        store_dir.mkdir()
        cls.store = Store(store_dir, cls.stub, BROWSER_DOCS)
        try:
            cls.browser = WebDriver(root / "profile")
        except BaseException:
            cls.stub.stop()
            cls.holder.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.browser.quit()
        cls.stub.stop()
        cls.holder.cleanup()

    def serve(self, endpoint: str | None = None, **settings) -> str:
        values = {"port": 0, "reload_check_seconds": 3600.0, **settings}
        config = EndpointConfig(url=endpoint or self.stub.url)
        server = serve.build_server(self.store.manifest(), self.store.layout, serve_settings.ServeSettings(**values),
                                    io.StringIO(), endpoint=config)
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        self.browser.open(running.url)
        self.browser.script("sessionStorage.clear()")
        return running.url

    def test_typing_a_query_and_enter_shows_scored_highlighted_results_with_paths(self):
        self.serve()
        focused = self.browser.wait_for("return document.activeElement && document.activeElement.id", "the focus")
        self.assertEqual(focused, "q")  # the search box has the focus on load
        self.browser.keys_to_focused("flour water salt" + ENTER)
        status = self.browser.wait_for(STATUS + ".match(/\\d+ results? for/) && " + STATUS_TEXT, "the results")
        self.assertIn("10 results for \u201cflour water salt\u201d", status)
        results = self.browser.script(RESULTS)
        self.assertEqual(len(results), 10)
        first = results[0]
        self.assertRegex(first["score"], r"^relevance \d{1,3}$")  # the hit's 0-100 relevance
        self.assertRegex(first["meta"], r"^document [0-9a-f]{12} \u00b7 window \d+ \u00b7 Whole document$")
        self.assertTrue(any(path.startswith(("bakery/", "kitchen/", "copy/")) for path in first["paths"]))
        self.assertTrue({mark.lower() for mark in first["marks"]} >= {"flour", "water", "salt"})
        self.assertEqual(set(first["elements"]), {"MARK"})  # only highlights, no markup from the text
        health = self.browser.script("return document.getElementById('health').textContent")
        self.assertIn("model stub-model", health)

    def test_more_results_fetches_a_larger_k(self):
        self.serve()
        self.browser.type("#q", "sourdough loaf" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length === 10", "the first page")
        self.assertFalse(self.browser.script("return document.getElementById('more-box').hidden"))
        self.browser.click("#more")
        self.browser.wait_for("return document.querySelectorAll('#results > li').length === 20", "the second page")
        focused = self.browser.script("return [...document.querySelectorAll('#results > li')].indexOf(document.activeElement)")
        self.assertEqual(focused, 10)  # the keyboard lands on the first new result

    def test_markup_in_a_window_is_shown_as_text_never_run(self):
        self.serve()
        self.browser.type("#q", "jars beware img onerror claims" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the results")
        results = self.browser.script(RESULTS)
        shown = [r for r in results if r["paths"] == ["notes/markup.html.txt"]]
        self.assertTrue(shown)
        shown_text = " ".join(r["text"] for r in shown)
        self.assertIn("<b>jars</b>", shown_text)
        self.assertIn("<img src=x", shown_text)
        self.assertTrue(all(set(r["elements"]) <= {"MARK"} for r in results))
        self.assertEqual(self.browser.script("return document.querySelectorAll('#results img, #results b').length"), 0)

    def test_an_empty_query_and_an_unavailable_model_server_say_so(self):
        self.serve(endpoint=closed_port_url(), reprobe_seconds=3600.0)
        self.browser.type("#q", ENTER)
        self.assertIn("Type what you are looking for", self.browser.wait_for(STATUS, "the hint"))
        self.browser.type("#q", "bread" + ENTER)  # the model server is down: keyword search answers
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the keyword results")
        self.assertIn("model server unreachable", self.browser.script("return document.getElementById('health').textContent"))

    def test_a_server_with_a_token_asks_for_it_and_then_searches(self):
        self.serve(token=TOKEN)
        self.browser.wait_for("return !document.getElementById('token-box').hidden", "the token field")
        self.browser.type("#q", "violin" + ENTER)
        self.assertIn("needs an access token", self.browser.wait_for(
            STATUS + ".includes('token') && " + STATUS_TEXT, "the 401 message"))
        self.browser.type("#token", TOKEN + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the results")
        self.assertEqual(self.browser.script("return sessionStorage.getItem('bastion-token')"), TOKEN)

    def test_the_page_makes_no_request_outside_the_server(self):
        url = self.serve()
        self.browser.type("#q", "rocket" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the results")
        origins = self.browser.script(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
        self.assertEqual(set(origins) - {url.rstrip("/")}, set())


    def test_a_page_on_another_site_cannot_make_the_browser_search(self):
        """A real browser on a page of another site (localhost:OTHER is another site than 127.0.0.1) sends a
        no-cors POST and an image GET to /search: serve refuses both (403, in its log) before searching."""
        from http.server import BaseHTTPRequestHandler

        from bastion_agent.core.httpthread import ServesInBackground, make_server

        log = io.StringIO()
        server = serve.build_server(self.store.manifest(), self.store.layout,
                                    serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0), log,
                                    endpoint=EndpointConfig(url=self.stub.url))
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        attack = (f"<script>fetch({json.dumps(running.url + 'search')}, {{method: 'POST', mode: 'no-cors', "
                  "body: JSON.stringify({query: 'bread', mode: 'keyword'})}).catch(() => {}).finally(() => "
                  "{const img = new Image(); img.onload = img.onerror = () => { document.title = 'done'; }; "
                  f"img.src = {json.dumps(running.url + 'search?q=bread&mode=keyword')}; }});</script>").encode()

        class Page(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(attack)))
                self.end_headers()
                self.wfile.write(attack)

            def log_message(self, *args):
                pass

        class Site(ServesInBackground):
            def __init__(self):
                self.httpd = make_server("127.0.0.1", 0, Page)

        with Site() as site:
            self.browser.open(f"http://localhost:{site.httpd.server_address[1]}/")
            self.browser.wait_for("return document.title === 'done'", "the attacking page")
        deadline = time.monotonic() + WAIT_SECONDS  # a line is logged as its connection closes
        while len(searches := [line.split()[2:5] for line in log.getvalue().splitlines() if " /search " in line]) < 2:
            self.assertLess(time.monotonic(), deadline, "serve never logged the two requests")
            time.sleep(0.05)
        self.assertEqual(sorted(searches), [["GET", "/search", "403"], ["POST", "/search", "403"]])

    def test_a_linked_search_runs_when_the_page_opens(self):
        url = self.serve()
        self.browser.open(url + "?q=flour%20water%20salt&mode=keyword")
        status = self.browser.wait_for(STATUS + ".match(/\\d+ results? for/) && " + STATUS_TEXT, "the linked results")
        self.assertIn("keyword search", status)
        self.assertEqual(self.browser.script("return document.getElementById('q').value"), "flour water salt")
        self.assertEqual(self.browser.script("return document.getElementById('mode').value"), "keyword")
        self.assertTrue(self.browser.script(RESULTS))
        link = self.browser.script("return document.getElementById('permalink').getAttribute('href')")
        self.assertEqual(link, "?q=flour+water+salt&mode=keyword")

    def test_a_highlight_never_splits_a_word_nor_marks_a_stop_word(self):
        self.serve()
        self.browser.type("#q", "do doc doubt the" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the results")
        marks = self.browser.script("""return [...document.querySelectorAll('#results mark')].map(m => {
            const before = m.previousSibling ? m.previousSibling.textContent.slice(-1) : "";
            const after = m.nextSibling ? m.nextSibling.textContent.slice(0, 1) : "";
            return [before, m.textContent, after]; })""")
        self.assertTrue(marks)
        for before, word, after in marks:
            with self.subTest(word=word, before=before, after=after):
                self.assertNotRegex(before, r"\w")
                self.assertNotRegex(after, r"\w")
                self.assertNotIn(word.lower(), {"do", "the"})
        marked = {m.lower() for r in self.browser.script(RESULTS) if r["paths"] == ["notes/words.txt"] for m in r["marks"]}
        self.assertEqual(sorted(marked), ["doc", "docs", "doubt", "doubted"])  # never "documents" nor "do" of "doing"

    def test_a_long_window_shows_a_snippet_and_the_whole_window_on_demand(self):
        self.serve()
        self.browser.type("#q", "sourdough loaf" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 0", "the results")
        cards = self.browser.script("""return [...document.querySelectorAll('#results > li')].map(li => ({
            snippet: li.querySelector('.text').textContent,
            whole: li.querySelector('details .text') ? li.querySelector('details .text').textContent : null,
            open: li.querySelector('details') ? li.querySelector('details').open : null}))""")
        for card in cards:
            if card["whole"] is not None:  # a window longer than the snippet: cut, the rest on demand
                self.assertLess(len(card["snippet"]), len(card["whole"]) + 2)
                self.assertFalse(card["open"])
            self.assertLessEqual(len(card["snippet"]), 282)

    def test_with_the_model_server_down_the_page_shows_keyword_results_and_says_so(self):
        self.serve(endpoint=closed_port_url(), reprobe_seconds=3600.0)
        self.browser.type("#q", "flour water" + ENTER)
        self.browser.wait_for(STATUS + ".match(/\\d+ results? for/)", "keyword results")
        notice = self.browser.wait_for("return !document.getElementById('notice').hidden && "
                                       "document.getElementById('notice').textContent", "the notice")
        self.assertIn("keyword", notice)  # serve fell back by itself and the page says so

    def edit_search_answers(self, edit: str) -> None:
        """Wrap the page's fetch so every /search answer is changed by the JavaScript ``edit`` of ``body``."""
        self.browser.script("""const real = window.fetch;
            window.fetch = async (url, options) => {
              const answer = await real(url, options);
              if (!String(url).endsWith('search')) return answer;
              const body = await answer.json();
              """ + edit + """
              return new Response(JSON.stringify(body), {status: 200, headers: {'Content-Type': 'application/json'}});
            };""")

    def test_a_fallback_notice_from_the_server_is_shown(self):
        self.serve()
        # The search engineer's envelope: {"fallback": "keyword", "notice": "..."} when serve fell back by itself.
        self.edit_search_answers("body.fallback = 'keyword'; "
                                 "body.notice = 'The model server is down: these are keyword results.';")
        self.browser.type("#q", "flour" + ENTER)
        notice = self.browser.wait_for("return !document.getElementById('notice').hidden && "
                                       "document.getElementById('notice').textContent", "the notice")
        self.assertEqual(notice, "The model server is down: these are keyword results.")

    def test_relevance_is_shown_when_the_hit_has_it(self):
        self.serve()
        self.edit_search_answers("body.hits.forEach((hit, i) => { hit.relevance = 90 - 10 * i; });")
        self.browser.type("#q", "flour water salt" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 1", "the results")
        scores = [r["score"] for r in self.browser.script(RESULTS)[:2]]
        self.assertEqual(scores, ["relevance 90", "relevance 80"])
        widths = self.browser.script("return [...document.querySelectorAll('#results .bar i')].slice(0, 2).map(i => i.style.width)")
        self.assertEqual(widths, ["90%", "80%"])

    def test_a_hit_from_a_scanned_page_is_marked_and_a_page_break_reads_as_a_line_break(self):
        self.serve()
        # What serve answers for a PDF (serving/test_scan_pages.py has the real one, with Tesseract).
        self.edit_search_answers("body.hits[0].ocr = true; body.hits[0].page = 3; "
                                 "body.hits[0].text = body.hits[0].text + '\\fnext page'; "
                                 "body.hits[1].ocr = false; body.hits[1].page = 2;")
        self.browser.type("#q", "flour water salt" + ENTER)
        self.browser.wait_for("return document.querySelectorAll('#results > li').length > 2", "the results")
        marks = self.browser.script("return [...document.querySelectorAll('#results > li')].slice(0, 3)"
                                    ".map(li => (li.querySelector('.ocr') || {}).textContent || null)")
        self.assertEqual(marks, ["scanned page 3 \u2014 text recognised by OCR, may hold errors", None, None])
        metas = self.browser.script("return [...document.querySelectorAll('#results .meta')].slice(0, 3)"
                                    ".map(m => m.textContent)")
        self.assertTrue(metas[0].endswith(" \u00b7 page 3 \u00b7 Whole document")
                        and metas[1].endswith(" \u00b7 page 2 \u00b7 Whole document"), metas)
        self.assertNotIn("page", metas[2])  # a text file has no page
        shown = self.browser.script("return document.querySelector('#results > li').textContent")
        self.assertNotIn("\f", shown)
        self.assertIn("next page", shown)


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(CHROMIUM and CHROMEDRIVER, "needs chromium and chromedriver (apt-get install chromium chromium-driver)")
class DatesAndDocumentFlowTests(DatedFolder):
    """A person's whole way: search, read each hit's date, keep to recent documents, open one, come back."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.browser = WebDriver(cls.tmp / "profile")
        cls.addClassCleanup(cls.browser.quit)

    def test_search_see_dates_filter_open_the_document_and_step_back(self):
        with clean_env():
            manifest = manifest_module.load(self.manifest)
        server = serve.build_server(manifest, Layout(self.out), serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0),
                                    io.StringIO(), endpoint=EndpointConfig(url=self.stub.url))
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        browser = self.browser
        browser.open(running.url)
        browser.script("document.getElementById('mode').value = 'keyword'")
        browser.type("#q", self.topic + ENTER)
        browser.wait_for(STATUS + ".match(/results? for/)", "the results")
        metas = [hit["meta"] for hit in browser.script(RESULTS)]
        self.assertTrue(any(meta.startswith("modified 2019-03-04") for meta in metas), metas)
        shots = os.environ.get("BASTION_SCREENSHOTS")
        if shots:
            browser.screenshot(Path(shots) / "serve-dates.png")
        browser.script("document.getElementById('since').value = '365d'")
        browser.click("#go")
        browser.wait_for("return [...document.querySelectorAll('#results .meta')].every(m => !m.textContent.startsWith('modified 2019'))"
                         " && document.querySelectorAll('#results > li').length > 0", "the filtered results")
        first_text = browser.script("return document.querySelector('#results > li .text').textContent")
        browser.click("#results > li .open-doc")
        browser.wait_for("return !document.getElementById('doc-view').hidden", "the document view")
        view = browser.script("return {title: document.getElementById('doc-title').textContent,"
                              " meta: document.getElementById('doc-meta').textContent,"
                              " marked: (document.getElementById('doc-hit') || {}).textContent || '',"
                              " text: document.getElementById('doc-text').textContent, hash: location.hash}")
        self.assertTrue(view["meta"].startswith("modified 2026-11-20"), view)
        self.assertIn(view["marked"].strip()[:20], first_text)
        self.assertRegex(view["hash"], r"^#doc=[0-9a-f]{64}&hit=[0-9a-f]{64}$")
        self.assertNotIn(self.topic, view["hash"], "the query never reaches the address bar")
        if shots:
            browser.screenshot(Path(shots) / "serve-document.png")
        browser.script("history.back()")
        browser.wait_for("return document.getElementById('doc-view').hidden && !document.getElementById('search-view').hidden",
                         "the results again")
        self.assertEqual(browser.script("return document.querySelector('#results > li .text').textContent"), first_text)


@unittest.skipUnless(CHROMIUM and CHROMEDRIVER, "needs chromium and chromedriver (apt-get install chromium chromium-driver)")
class PendingBannerTests(unittest.TestCase):
    """Never silently stale: while windows wait for vectors, the page says how many, and since when embed fails."""

    def test_a_store_whose_embed_failed_shows_the_banner_beside_keyword_results(self):
        from bastion_agent import embed
        from bastion_agent.core.errors import ModelServerUnreachable
        from bastion_agent.testing.testsupport import write_manifest, write_sanitized_store

        holder = tempfile.TemporaryDirectory()
        self.addCleanup(holder.cleanup)
        root = Path(holder.name)
        manifest_path = write_manifest(root, size=8, overlap=2)
        layout = Layout(root / "out")
        write_sanitized_store(layout, DOCS)
        with clean_env(EMBED_URL=closed_port_url()):
            manifest = manifest_module.load(manifest_path)
            embed.run_chunk(manifest, layout)
            with self.assertRaises(ModelServerUnreachable):
                embed.run_embed(manifest, layout)
        server = serve.build_server(manifest, layout, serve_settings.ServeSettings(port=0, reload_check_seconds=3600.0),
                                    io.StringIO(), endpoint=EndpointConfig(url=closed_port_url()))
        running = serve.RunningServer(server).__enter__()
        self.addCleanup(running.__exit__, None, None, None)
        browser = WebDriver(root / "profile")
        self.addCleanup(browser.quit)
        browser.open(running.url)
        browser.script("document.getElementById('mode').value = 'keyword'")
        browser.type("#q", "sourdough flour" + ENTER)
        browser.wait_for(STATUS + ".match(/results? for/)", "the keyword results")
        banner = browser.wait_for("const p = document.getElementById('pending'); return !p.hidden && p.textContent",
                                  "the pending banner")
        self.assertRegex(banner, r"^\d+ of your passages still wait for vectors \(embedding has not finished since ")
