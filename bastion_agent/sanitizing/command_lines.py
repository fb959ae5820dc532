"""Passwords handed to command-line tools: ``net use``/``net user``, ``htpasswd -b``, ``smbclient -U u%PW``,
``sqlplus user/PW@db``: where each tool's syntax puts the secret.

``candidates`` gives each place, and whether it is a bare word of a command
line (``net``) or an argument in the tool's own syntax; the context
detector (``context.scan``) judges each as it judges a keyed value.
"""

from __future__ import annotations

import re

# The version of what this module finds: bump it with any change that makes some text sanitize differently
# (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 1


def candidates(text: str, lowered: str) -> list[tuple[int, int, bool]]:
    """``(start, end, bare)`` of each password a command line hands a tool; ``lowered`` is ``text.lower()``."""
    found = []
    if "net " in lowered or "net\t" in lowered:
        found.extend(_net_use(text))
    if _tools_possible(text, lowered) and any(trigger in lowered for trigger in TOOL_TRIGGERS) \
            and TOOL_NAME.search(text):
        found.extend(_tools(text))
    return found


def _net_use(text: str) -> list[tuple[int, int, bool]]:
    """``net use Z: \\\\srv\\share PASS /user:DOMAIN\\name`` (either order): the one bare word."""
    spans = []
    for line in NET_USE.finditer(text):
        has_user = False
        words = list(re.finditer(r'"[^"\n]*"|\S+', line.group("args")))
        candidates = []
        for index, word in enumerate(words):
            token = word.group(0)
            if token.lower().startswith("/user:") or token.lower().startswith("/u:"):
                has_user = True
            elif not token.startswith(("/", "\\\\")) and not re.fullmatch(r"[A-Za-z]:|\*", token):
                candidates.append(word)
        if has_user or line.group("verb").lower() == "user":
            for word in candidates[1:] if line.group("verb").lower() == "user" else candidates:
                spans.append((line.start("args") + word.start(), line.start("args") + word.end(), True))
    return spans


NET_USE = re.compile(r"(?im)(?<![\w\-])net[ \t]+(?P<verb>use|user)[ \t]+(?P<args>[^\r\n]*)")
TOOL_PASSWORDS = (
    re.compile(r"(?im)(?<![\w\-])htpasswd(?:[ \t]+-[a-zA-Z]+)*[ \t]+-[a-zA-Z]*b[a-zA-Z]*(?:[ \t]+-[a-zA-Z]+)*"
               r"[ \t]+\S+[ \t]+\S+[ \t]+(?P<secret>\S+)"),
    re.compile(r"(?im)(?<![\w\-])(?:smbclient|rpcclient|smbmap|mount\.cifs)[^\r\n]*?[ \t](?:-U|--user(?:name)?=?)[ \t]*"
               r"[\"']?[^\s%\"']+%(?P<secret>[^\s\"']+)"),
    re.compile(r"(?im)(?<![\w\-])(?:sqlplus|expdp|impdp|rman)[ \t]+(?:-[sSL][ \t]+)*[\"']?[\w$#]+/(?P<secret>[^\s@\"']+)@"),
)


def _tools_possible(text: str, lowered: str) -> bool:
    """False when no pattern of TOOL_PASSWORDS can match: a few short searches instead of nine.

    What each pattern cannot match without: ``htpasswd`` its letters
    "htpa"; the smbclient family a literal ``%`` and "mbcl", "mbma",
    "rpccl" or "mount.c"; sqlplus and Oracle's tools a literal ``@`` and
    "qlplu", "xpdp", "mpdp" or "rman". The pieces leave out "s" and "i",
    which the patterns' case-blind matching also reads as "ſ", "ı" and "İ"
    (letters whose lower case is not "s" or "i"); every other letter here
    matches only itself and its capital, so ``lowered`` holds the piece.
    """
    return ("htpa" in lowered
            or ("%" in text and ("mbcl" in lowered or "mbma" in lowered or "rpccl" in lowered or "mount.c" in lowered))
            or ("@" in text and ("qlplu" in lowered or "xpdp" in lowered or "mpdp" in lowered or "rman" in lowered)))


def _tools(text: str) -> list[tuple[int, int, bool]]:
    return [(match.start("secret"), match.end("secret"), False)
            for pattern in TOOL_PASSWORDS for match in pattern.finditer(text)]


TOOL_TRIGGERS = ("htpasswd", "smbclient", "rpcclient", "smbmap", "mount.cifs", "sqlplus", "expdp", "impdp", "rman")
# The tools' names as the patterns of TOOL_PASSWORDS start (a word of its own, any case). The literals
# above are substrings of ordinary words ("performance" holds "rman"): this second, exact gate keeps such
# a text from paying the three command-line patterns.
TOOL_NAME = re.compile(r"(?i)(?<![\w\-])(?:htpasswd|smbclient|rpcclient|smbmap|mount\.cifs|sqlplus|expdp|impdp|rman)")
