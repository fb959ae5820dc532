"""Globs over paths relative to the source root: ``[source] include``/``exclude`` and ``[access]`` rules.

One grammar for every glob a manifest holds, so a pattern that selects a
file for extract selects the same file for an access rule. It lives in the
base because both extract and sanitize (which labels documents) match paths.
"""

from __future__ import annotations

import re

from bastion_agent.core.errors import ManifestError


class GlobSet:
    """Include/exclude patterns, relative to the source root, ``/``-separated.

    - ``*`` matches within one path segment, ``?`` one character, ``[abc]``
      and ``[!abc]`` a character class; ``**`` as a whole segment matches any
      number of segments, including none (``**/x`` is ``x`` at any depth,
      ``a/**`` is ``a`` and everything below it).
    - A pattern without ``/`` matches a name at any depth, as if it began
      with ``**/`` (``*.pdf`` is every PDF); a pattern with a ``/`` matches
      the whole path from the root (``reports/*.pdf`` only directly in
      ``reports``). A leading ``/`` anchors a name at the root (``/todo.txt``);
      a trailing ``/`` means the folder and everything below it (``build/``
      is every folder named build, ``/build/`` only the top one).
    - Matching is case-sensitive. An exclude pattern that matches a folder
      excludes the folder: it is not entered at all.
    """

    def __init__(self, patterns, table: str = "source") -> None:
        self.patterns = tuple(patterns)
        self._compiled = [_compile(pattern, table) for pattern in self.patterns]

    def matches(self, path: str) -> bool:
        return any(regex.fullmatch(path) for regex in self._compiled)


def _compile(pattern: str, table: str = "source") -> re.Pattern:
    text = pattern.strip()
    if not text or text == "/":
        raise ManifestError(f"[{table}] glob {pattern!r} is empty; use \"**\" for everything")
    if "/" not in text.rstrip("/") and text != "**":
        text = "**/" + text  # a bare name matches at any depth
    text = text.lstrip("/")
    if text.endswith("/"):
        text += "**"
    segments = [segment for segment in text.split("/") if segment]
    regex = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            if not last:
                regex += "(?:[^/]+/)*"
            elif regex.endswith("/") and not regex.endswith(")*"):
                regex = regex[:-1] + "(?:/.*)?"  # "a/**": a itself and everything below
            else:
                regex += ".*"
        else:
            regex += _segment_regex(segment) + ("" if last else "/")
    return re.compile(regex, re.DOTALL)


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 2 if segment[i + 1:i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = segment[i + 1:end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                escaped = "".join(c if c == "-" else re.escape(c) for c in body)
                out.append("[" + ("^/" if negate else "") + escaped + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
