"""The search page ``serve`` answers at ``/``: one self-contained HTML document.

No CDN, no build step, no external request: the style and the script are
inline, and the Content-Security-Policy allows exactly those two blocks (by
their sha256) and requests to the server itself. Hit text is only ever put in
the page as text nodes (``textContent``), never parsed as HTML, so a window
that contains markup shows as the characters it is.

The page sends queries with ``POST /search``, so typing a query never puts
it in a URL, the browser's history or an access log (serve's log never
names a query string). A search can still be linked and bookmarked on
purpose: ``/?q=...&mode=...`` runs that search when the page opens, and each
answer offers a "link to this search" the user may copy.

Each card shows a snippet around the part of the window that matches the
most query words, with the whole window behind a ``<details>``; highlights
cover whole words only (a query word, or it with a plural/past/-ing ending),
never part of a word and never a stop word. The score shown is the hit's
``relevance`` (0-100, comparable across queries) when the server gives one,
else the raw score without a bar. When the model server is down the page
offers keyword search, and shows the server's ``notice`` when it fell back
to keywords by itself.
"""

from __future__ import annotations

import base64
import hashlib
import re

STYLE = r"""
:root {
  color-scheme: light dark;
  --bg: #f7f7f5; --panel: #ffffff; --text: #1d1f21; --muted: #5d6166; --line: #d9dadc;
  --accent: #1f5fbf; --accent-text: #ffffff; --mark: #ffe680; --mark-text: #1d1f21;
  --error-bg: #fdecea; --error-text: #8a1c12; --bar: #c7d7f0;
  --mono: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #15171a; --panel: #1d2024; --text: #e6e6e3; --muted: #9aa0a6; --line: #33373d;
    --accent: #6ea8ff; --accent-text: #0d1117; --mark: #6b5a12; --mark-text: #fff6cc;
    --error-bg: #3a1d1b; --error-text: #ffb4a9; --bar: #2c4266;
  }
}
* { box-sizing: border-box; }
html { background: var(--bg); color: var(--text); }
body {
  margin: 0 auto; max-width: 52rem; padding: 2rem 1.25rem 4rem;
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif;
}
header { display: flex; align-items: baseline; justify-content: space-between; gap: 1rem; flex-wrap: wrap; }
h1 { font-size: 1.35rem; margin: 0 0 .25rem; letter-spacing: -.01em; }
h1 span { color: var(--muted); font-weight: 400; }
#health { color: var(--muted); font-size: .875rem; margin: 0; }
#health .dot { display: inline-block; width: .6rem; height: .6rem; border-radius: 50%; background: var(--muted); margin-right: .35rem; }
#health.ok .dot { background: #2e9d5b; }
#health.degraded .dot { background: #d08a1e; }
form { margin: 1.25rem 0 .5rem; }
label { display: block; font-weight: 600; margin-bottom: .35rem; }
.row { display: flex; gap: .5rem; }
input[type=search], input[type=password] {
  flex: 1; min-width: 0; font: inherit; padding: .65rem .8rem; color: var(--text); background: var(--panel);
  border: 1px solid var(--line); border-radius: .5rem;
}
input:focus-visible, button:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
button {
  font: inherit; font-weight: 600; padding: .6rem 1.1rem; border-radius: .5rem; cursor: pointer;
  border: 1px solid var(--accent); background: var(--accent); color: var(--accent-text);
}
button.secondary { background: transparent; color: var(--accent); }
button:disabled { opacity: .6; cursor: progress; }
.hint { color: var(--muted); font-size: .85rem; margin: .35rem 0 0; }
kbd { font-family: var(--mono); font-size: .8em; border: 1px solid var(--line); border-bottom-width: 2px; border-radius: .25rem; padding: 0 .3em; }
#token-box { margin: 1rem 0; padding: .9rem 1rem; border: 1px solid var(--line); border-radius: .5rem; background: var(--panel); }
#status { min-height: 1.5rem; margin: 1rem 0 .5rem; color: var(--muted); }
#status.error { color: var(--error-text); background: var(--error-bg); padding: .6rem .8rem; border-radius: .5rem; }
ol#results { list-style: none; margin: 0; padding: 0; }
ol#results > li {
  background: var(--panel); border: 1px solid var(--line); border-radius: .6rem;
  padding: .85rem 1rem .95rem; margin: 0 0 .75rem;
}
.head { display: flex; align-items: flex-start; gap: .75rem; }
.rank { font-weight: 700; color: var(--muted); min-width: 2rem; font-variant-numeric: tabular-nums; }
.paths { list-style: none; margin: 0; padding: 0; flex: 1; min-width: 0; }
.paths li { font-family: var(--mono); font-size: .92rem; color: var(--muted); overflow-wrap: anywhere; }
.paths li:first-child { color: var(--text); font-weight: 600; }
.score { display: inline-flex; align-items: center; gap: .45rem; font-family: var(--mono); font-size: .85rem;
  color: var(--muted); white-space: nowrap; }
.score .bar { display: inline-block; width: 4rem; height: .4rem; border-radius: .2rem; background: var(--line); overflow: hidden; }
.score .bar i { display: block; height: 100%; background: var(--accent); }
.text { margin: .5rem 0 .4rem 2.75rem; white-space: pre-wrap; overflow-wrap: anywhere; }
.meta { margin-left: 2.75rem; font-size: .8rem; color: var(--muted); }
.ocr { margin: .4rem 0 0 2.75rem; font-size: .8rem; color: var(--text); border-left: 3px solid #d08a1e; padding-left: .5rem; }
details.window { margin: 0 0 .4rem 2.75rem; }
details.window summary { cursor: pointer; color: var(--accent); font-size: .85rem; }
details.window .text { margin-left: 0; }
#notice { margin: .5rem 0; padding: .5rem .8rem; border-left: 3px solid #d08a1e; background: var(--panel); }
#share { margin: 0 0 .75rem; font-size: .85rem; }
#share a { color: var(--accent); }
select { font: inherit; padding: .55rem .5rem; border: 1px solid var(--line); border-radius: .5rem; background: var(--panel); color: var(--text); }
mark { background: var(--mark); color: var(--mark-text); border-radius: .15rem; padding: 0 .05em; }
#more-box { text-align: center; margin-top: 1rem; }
[hidden] { display: none !important; }
#pending { border-left: 3px solid #d08a1e; padding-left: .6rem; color: var(--muted); }
#doc-text { white-space: pre-wrap; overflow-wrap: anywhere; font: inherit; border-top: 1px solid var(--line); padding-top: 1rem; }
#doc-text .page { display: block; color: var(--muted); font-size: .85rem; border-top: 1px dashed var(--line); margin: .6rem 0; }
#doc-title { font-size: 1.15rem; overflow-wrap: anywhere; }
.open-doc { color: var(--accent); }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
"""

SCRIPT = r"""
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const form = $("search-form"), input = $("q"), button = $("go");
  const statusBox = $("status"), results = $("results"), moreBox = $("more-box"), more = $("more");
  const tokenBox = $("token-box"), tokenInput = $("token"), healthLine = $("health");
  const sinceSelect = $("since"), pendingBox = $("pending");
  const searchView = $("search-view"), docView = $("doc-view"), docBack = $("doc-back"), docTitle = $("doc-title");
  const docMeta = $("doc-meta"), docOcr = $("doc-ocr"), docText = $("doc-text");
  const modeSelect = $("mode"), noticeBox = $("notice"), shareBox = $("share"), keywordBox = $("keyword-box");
  const FIRST_K = 10;
  let maxK = 100, current = null, busy = false;

  function token() {
    return tokenInput.value.trim() || sessionStorage.getItem("bastion-token") || "";
  }
  function setStatus(text, isError) {
    statusBox.textContent = text;
    statusBox.className = isError ? "error" : "";
  }
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  // Words never worth a highlight (they match everywhere and say nothing).
  const STOP = new Set(("a an and are as at be been but by can could did do does doing for from had has have how i " +
    "if in into is it its me my no not of on or our so than that the their them then there these they this to " +
    "up us was we were what when where which who why will with would you your der die das und ist le la les et " +
    "de des du un une el los las y en").split(" "));
  const SNIPPET_CHARS = 280;
  function terms(query) {
    const words = (query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) || []);
    return [...new Set(words)].filter((w) => !STOP.has(w) && (w.length > 1 || /\p{N}/u.test(w)))
      .sort((a, b) => b.length - a.length);
  }
  function escapeRegExp(text) { return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }
  // A whole word that is a query word, or it with a common ending: never part of a longer word.
  function wordPattern(words) {
    if (!words.length) return null;
    return new RegExp("(?<![\\p{L}\\p{N}_])(?:" + words.map(escapeRegExp).join("|") +
      ")(?:s|es|ed|d|ing)?(?![\\p{L}\\p{N}_])", "giu");
  }
  // The text as text nodes in ``box``, each matching word in <mark>.
  function fillHighlighted(box, text, pattern) {
    if (!pattern) { box.textContent = text; return box; }
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      if (match.index > last) box.append(document.createTextNode(text.slice(last, match.index)));
      box.append(el("mark", "", match[0]));
      last = match.index + match[0].length;
    }
    if (last < text.length) box.append(document.createTextNode(text.slice(last)));
    return box;
  }
  // [start, end) of the stretch of about SNIPPET_CHARS that holds the most different query words.
  function snippetSpan(text, pattern) {
    if (text.length <= SNIPPET_CHARS) return [0, text.length];
    let best = [0, 0];
    if (pattern) {
      const found = [...text.matchAll(pattern)].map((m) => [m.index, m[0].toLowerCase()]);
      for (const [at] of found) {
        const from = Math.max(0, at - SNIPPET_CHARS / 4);
        const distinct = new Set(found.filter(([i]) => i >= from && i < from + SNIPPET_CHARS).map(([, w]) => w)).size;
        if (distinct > best[1]) best = [from, distinct];
      }
    }
    let start = best[0], end = Math.min(text.length, start + SNIPPET_CHARS);
    if (start > 0) { const space = text.indexOf(" ", start); if (space >= 0 && space < start + 30) start = space + 1; }
    if (end < text.length) { const space = text.lastIndexOf(" ", end); if (space > start + SNIPPET_CHARS / 2) end = space; }
    return [start, end];
  }
  function scoreBadge(hit, mode) {
    const score = el("span", "score");
    if (typeof hit.relevance === "number") {
      const relevance = Math.max(0, Math.min(100, Math.round(hit.relevance)));
      score.title = "relevance 0-100: how well this passage matches, comparable across searches";
      const bar = el("span", "bar"), fill = el("i");
      bar.setAttribute("aria-hidden", "true");
      fill.style.width = relevance + "%";
      bar.append(fill);
      score.append(bar, el("span", "", "relevance " + relevance));
    } else {
      score.title = mode === "vector" ? "cosine similarity" : mode + " score (ranks this list only)";
      score.append(el("span", "", "score " + hit.score.toFixed(3)));
    }
    return score;
  }
  // One hit: its path(s) first (where to look), the score, a snippet, the whole window on demand.
  function renderHit(hit, rank, pattern, mode) {
    hit = Object.assign({}, hit, { text: hit.text.replace(/\f/g, "\n") });  // a page break reads as a line break
    const item = el("li");
    item.tabIndex = -1;
    const head = el("div", "head");
    const paths = el("ul", "paths");
    paths.setAttribute("aria-label", "found in");
    for (const path of (hit.paths.length ? hit.paths : ["(no path recorded)"])) paths.append(el("li", "", path));
    head.append(el("span", "rank", rank + "."), paths, scoreBadge(hit, mode));
    const [start, end] = snippetSpan(hit.text, pattern);
    const snippet = fillHighlighted(el("p", "text"), hit.text.slice(start, end), pattern);
    if (start > 0) snippet.prepend(document.createTextNode("\u2026"));
    if (end < hit.text.length) snippet.append(document.createTextNode("\u2026"));
    item.append(head);
    if (hit.ocr) {
      item.append(el("p", "ocr", (Number.isInteger(hit.page) ? "scanned page " + hit.page : "scanned page")
        + " \u2014 text recognised by OCR, may hold errors"));
    }
    item.append(snippet);
    if (start > 0 || end < hit.text.length) {
      const whole = el("details", "window");
      whole.append(el("summary", "", "Whole passage"), fillHighlighted(el("p", "text whole"), hit.text, pattern));
      item.append(whole);
    }
    const meta = el("div", "meta", (hit.modified ? "modified " + hit.modified.slice(0, 10) + " \u00b7 " : "")
      + "document " + hit.doc.slice(0, 12) + " \u00b7 window " + hit.idx
      + (Number.isInteger(hit.page) ? " \u00b7 page " + hit.page : "") + " \u00b7 ");
    const open = el("a", "open-doc", "Whole document");
    open.href = "#doc=" + hit.doc + "&hit=" + hit.chunk_id;
    open.addEventListener("click", (event) => { event.preventDefault(); openDocument(hit.doc, hit.chunk_id, true); });
    meta.append(open);
    item.append(meta);
    return item;
  }
  function showShare(query, mode) {
    const params = new URLSearchParams({ q: query });
    if (mode) params.set("mode", mode);
    if (sinceSelect.value) params.set("since", sinceSelect.value);
    $("permalink").href = "?" + params.toString();
    shareBox.hidden = false;
  }
  // The request's body: the mode and the date filter only when chosen, so the server's defaults apply otherwise.
  function asked(query, k, mode) {
    const body = { query, k };
    if (mode) body.mode = mode;
    if (sinceSelect.value) body.since = sinceSelect.value;
    return body;
  }
  async function search(query, k, focusFrom, mode) {
    if (busy) return;
    mode = mode === undefined ? modeSelect.value : mode;
    noticeBox.hidden = true; shareBox.hidden = true; keywordBox.hidden = true;
    busy = true; button.disabled = true; more.disabled = true;
    setStatus(k > FIRST_K ? "Loading more results\u2026" : "Searching\u2026", false);
    const headers = { "Content-Type": "application/json" };
    if (token()) headers["Authorization"] = "Bearer " + token();
    let answer, body;
    try {
      answer = await fetch("search", { method: "POST", headers, body: JSON.stringify(asked(query, k, mode)), cache: "no-store" });
      body = await answer.json();
    } catch (err) {
      setStatus("Cannot reach the bastion server. Is it still running?", true);
      busy = false; button.disabled = false; more.disabled = false;
      return;
    }
    busy = false; button.disabled = false; more.disabled = false;
    if (answer.status === 401) {
      tokenBox.hidden = false;
      setStatus("This server needs an access token: enter it above, then search again.", true);
      tokenInput.focus();
      return;
    }
    if (!answer.ok) {
      const why = body && body.error ? body.error : "HTTP " + answer.status;
      setStatus((answer.status === 503 ? "Search is unavailable right now: " : "The search was refused: ") + why, true);
      if (answer.status === 503 && mode !== "keyword") { keywordBox.hidden = false; current = { query, k }; }
      return;
    }
    if (tokenInput.value.trim() && tokenInput.value.trim() !== sessionStorage.getItem("bastion-token")) {
      sessionStorage.setItem("bastion-token", tokenInput.value.trim());
      loadHealth();
    }
    current = { query, k, mode };
    const pattern = wordPattern(terms(query));
    results.replaceChildren(...body.hits.map((hit, i) => renderHit(hit, i + 1, pattern, body.mode)));
    if (body.notice) { noticeBox.textContent = body.notice; noticeBox.hidden = false; }
    // Windows still waiting for vectors (embed running, or failing since stale_since): say so, never silently.
    pendingBox.hidden = !body.windows_pending;
    pendingBox.textContent = body.windows_pending ? body.windows_pending + " of your passages still wait for vectors"
      + (body.stale_since ? " (embedding has not finished since " + body.stale_since + ")" : "")
      + ": keyword search finds them, search by meaning does not yet." : "";
    showShare(query, mode);
    const n = body.hits.length;
    setStatus(n === 0 ? "No results for \u201c" + query + "\u201d. Try other words." :
      n + (n === 1 ? " result" : " results") + " for \u201c" + query + "\u201d \u00b7 " + body.mode + " search", false);
    moreBox.hidden = !(n === k && k < maxK);
    if (focusFrom !== undefined && results.children[focusFrom]) results.children[focusFrom].focus();
  }
  // The document behind a hit: fetched as JSON with the token (a link could not send it), shown as text nodes.
  async function openDocument(doc, chunk, remember) {
    const headers = { "Accept": "application/json" };
    if (token()) headers["Authorization"] = "Bearer " + token();
    let answer, body;
    try {
      answer = await fetch("doc/" + doc, { headers, cache: "no-store" });
      body = await answer.json();
    } catch (err) {
      setStatus("Cannot reach the bastion server. Is it still running?", true);
      return;
    }
    if (!answer.ok) { setStatus("The document cannot be shown: " + (body && body.error ? body.error : "HTTP " + answer.status), true); return; }
    if (remember) history.pushState({ doc, chunk }, "", "#doc=" + doc + "&hit=" + chunk);
    showDocument(body, chunk);
  }
  function showDocument(view, chunk) {
    docTitle.textContent = view.paths.length ? view.paths.join(", ") : "document " + view.doc.slice(0, 12);
    docMeta.textContent = (view.modified ? "modified " + view.modified.replace("T", " ") + " \u00b7 " : "")
      + view.windows.length + (view.windows.length === 1 ? " window" : " windows") + (view.truncated ? " \u00b7 shortened: the text stops before its end" : "");
    docOcr.hidden = !view.ocr;
    const hit = view.windows.find((w) => w.chunk_id === chunk);
    const cuts = [...new Set([0, view.text.length, ...view.pages.map((p) => p.start),
      ...(hit ? [hit.start, hit.end] : [])])].sort((a, b) => a - b);
    const pageAt = new Map(view.pages.map((p) => [p.start, p]));
    docText.replaceChildren();
    let marked = null;
    for (let i = 0; i + 1 < cuts.length; i++) {
      const page = pageAt.get(cuts[i]);
      if (page && page.page > 1) docText.append(el("span", "page", "page " + page.page + (page.ocr ? " (scanned)" : "")));
      const piece = document.createTextNode(view.text.slice(cuts[i], cuts[i + 1]).replace(/\f/g, ""));
      if (hit && cuts[i] >= hit.start && cuts[i + 1] <= hit.end) {
        if (!marked) { marked = el("mark"); marked.id = "doc-hit"; docText.append(marked); }
        marked.append(piece);
      } else docText.append(piece);
    }
    searchView.hidden = true; docView.hidden = false;
    (marked || docTitle).scrollIntoView({ block: "center" });
    docBack.focus();
  }
  function showResults() { docView.hidden = true; searchView.hidden = false; }
  docBack.addEventListener("click", () => { if (history.state && history.state.doc) history.back(); else showResults(); });
  window.addEventListener("popstate", (event) => {
    if (event.state && event.state.doc) openDocument(event.state.doc, event.state.chunk, false); else showResults();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = input.value.trim();
    if (!query) { setStatus("Type what you are looking for, then press Enter.", true); input.focus(); return; }
    search(query, FIRST_K);
  });
  more.addEventListener("click", () => {
    if (current) search(current.query, Math.min(maxK, current.k * 2), current.k, current.mode);
  });
  $("keyword-instead").addEventListener("click", () => {
    if (!current) return;
    modeSelect.value = "keyword";
    search(current.query, FIRST_K, undefined, "keyword");
  });
  tokenInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); form.requestSubmit(); }
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem("bastion-token"); tokenInput.value = ""; tokenInput.focus();
  });
  document.addEventListener("keydown", (event) => {
    const typing = event.target instanceof HTMLInputElement;
    if (event.key === "/" && !typing) { event.preventDefault(); input.focus(); input.select(); }
    else if (event.key === "Escape" && event.target === input) { input.value = ""; }
  });
  // The count is this caller's: the passages its token's groups may search (none shown before a token).
  function loadHealth() {
    const headers = token() ? { "Authorization": "Bearer " + token() } : {};
    fetch("healthz", { cache: "no-store", headers }).then((r) => r.json()).then((h) => {
      maxK = (h.limits && h.limits.max_k) || maxK;
      healthLine.className = h.status;
      // without a valid token /healthz says only its status
      const stranger = !("caller" in h);
      healthLine.replaceChildren(el("span", "dot"), document.createTextNode(stranger
        ? "enter your access token to search"
        : (h.chunks === null ? "no passages for this token" : h.chunks + " passages") + " \u00b7 model " + h.model +
          (h.model_server === "ok" ? "" : " \u00b7 model server unreachable (keyword search still works)")));
      if (stranger || h.auth === "bearer") tokenBox.hidden = false;
    }).catch(() => { healthLine.textContent = "server status unknown"; });
  }
  if (sessionStorage.getItem("bastion-token")) tokenInput.value = sessionStorage.getItem("bastion-token");
  loadHealth();
  input.focus();
  // /?q=...&mode=...: a linked or bookmarked search runs as the page opens.
  const linked = new URLSearchParams(location.search);
  if ([...modeSelect.options].some((o) => o.value === (linked.get("mode") || ""))) modeSelect.value = linked.get("mode") || "";
  if ([...sinceSelect.options].some((o) => o.value === (linked.get("since") || ""))) sinceSelect.value = linked.get("since") || "";
  if ((linked.get("q") || "").trim()) { input.value = linked.get("q").trim(); search(input.value, FIRST_K); }
  // #doc=ID&hit=CHUNK: a document view that was open when the page was reloaded or linked.
  const opened = new URLSearchParams(location.hash.slice(1));
  if (/^[0-9a-f]{64}$/.test(opened.get("doc") || "")) openDocument(opened.get("doc"), opened.get("hit") || "", false);
})();
"""

BODY = """
<header>
  <div>
    <h1>bastion <span>search</span></h1>
    <p id="health" role="status"><span class="dot"></span>checking the server\u2026</p>
  </div>
</header>
<main>
  <div id="token-box" hidden>
    <label for="token">Access token</label>
    <div class="row">
      <input id="token" type="password" autocomplete="off" spellcheck="false" aria-describedby="token-hint">
      <button type="button" class="secondary" id="forget">Forget</button>
    </div>
    <p class="hint" id="token-hint">This server asks for an access token (yours, or its BASTION_SERVE_TOKEN). It is kept in this tab only.</p>
  </div>
  <div id="search-view">
  <form id="search-form" role="search" autocomplete="off">
    <label for="q">Search the documents by meaning</label>
    <div class="row">
      <input id="q" name="q" type="search" autofocus spellcheck="false" aria-describedby="search-hint">
      <select id="mode" aria-label="search mode">
        <option value="">best (server default)</option>
        <option value="hybrid">hybrid</option>
        <option value="vector">by meaning</option>
        <option value="keyword">keywords</option>
      </select>
      <select id="since" aria-label="modified since">
        <option value="">any date</option>
        <option value="24h">past day</option>
        <option value="7d">past week</option>
        <option value="30d">past month</option>
        <option value="365d">past year</option>
      </select>
      <button id="go" type="submit">Search</button>
    </div>
    <p class="hint" id="search-hint">Press <kbd>Enter</kbd> to search, <kbd>/</kbd> to come back here,
      <kbd>Esc</kbd> to clear. Text shown has been sanitized.</p>
  </form>
  <p id="status" role="status" aria-live="polite"></p>
  <p id="notice" role="note" hidden></p>
  <p id="pending" role="status" hidden></p>
  <div id="keyword-box" hidden><button type="button" class="secondary" id="keyword-instead">Search by keywords instead</button>
    <span class="hint">keyword search does not need the model server</span></div>
  <p id="share" hidden><a id="permalink" href="?">Link to this search</a> (puts the query in the address: bookmark it or share it)</p>
  <h2 class="sr-only">Results</h2>
  <ol id="results"></ol>
  <div id="more-box" hidden><button type="button" class="secondary" id="more">More results</button></div>
  </div>
  <article id="doc-view" hidden>
    <button type="button" class="secondary" id="doc-back">\u2190 Back to the results</button>
    <h2 id="doc-title"></h2>
    <p id="doc-meta" class="hint"></p>
    <p id="doc-ocr" class="ocr" hidden>scanned: OCR text, it may hold recognition errors</p>
    <pre id="doc-text"></pre>
  </article>
</main>
"""

PAGE = (
    '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    '<meta name="referrer" content="no-referrer">\n'
    '<link rel="icon" href="data:,">\n'
    "<title>bastion search</title>\n"
    f"<style>{STYLE}</style>\n</head>\n<body>{BODY}<script>{SCRIPT}</script>\n</body>\n</html>\n"
)


def _sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy() -> str:
    """Allow the page's own inline style and script (by hash) and requests to this server; nothing else."""
    return (
        "default-src 'none'; "
        f"script-src {_sha256_source(SCRIPT)}; "
        f"style-src {_sha256_source(STYLE)}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def inline_blocks(page: str = PAGE) -> list[str]:
    """The contents of every ``<script>`` and ``<style>`` element (the tests check each is hashed)."""
    return re.findall(r"<(?:script|style)[^>]*>(.*?)</(?:script|style)>", page, flags=re.S)
