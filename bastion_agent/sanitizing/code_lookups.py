"""Code that looks a credential up, or names one, without holding it.

Beside a credential's name, code often writes something that only points
at the credential: a cast of what a lookup returns (``(string)
env('WEBDAV_PASSWORD')``), a lookup by a setting's own name
(``Cache::get('dropbox_access_token')``, ``stringInput($request, 't')``),
a constructor keeping its parameter (``self._password1 = password1``), or a
printed label whose string closes right after the key (``Write-Host "ACR
$name credentials:" -ForegroundColor Yellow``). A reader sees no secret in
any of them, and blanking them costs a line of real code in every search
result. Each test here describes the syntax, never a string: a quoted
literal of any other shape (``Hash::make('s3cr…')``) is still judged as
one, so these tests cut false flags, never recall.
"""

from __future__ import annotations

import re

# The version of what this module finds: bump it with any change that makes some text
# sanitize differently (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

# A C-family cast before an expression: ``(string) $x``, ``(int)``, ``(byte)``.
CAST = re.compile(r"\((?:string|int|integer|bool|boolean|float|double|array|object|byte|char|long|short|"
                  r"uint|ulong|unsigned)\)[ \t]*")
# A quoted argument that names something: a setting's key (``'WEBDAV_PASSWORD'``, ``"dropbox_access_token"``:
# words joined by ``_``), one letter (``stringInput($request, 't')``: a query parameter's name) or a credential
# word alone (``viewData('token')``, ``input('password')``: the field's own name, a stand-in when hashed).
NAME_ARGUMENT = re.compile(r"([\"'])(?:[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[A-Za-z]|"
                           r"(?i:password|passwd|pass|secret|token|key|api_?key|credentials?))\1")
# The names of the object a method sets its own members on (Python, JavaScript/Java/C#, PHP, Ruby).
MEMBER_OWNERS = frozenset({"self", "this", "$this", "cls", "@"})
# What follows a label that closes its string (``"… credentials:"``): an option, code punctuation or the
# line's end, no value (``echo "password:" X`` prints one, and is judged as a value).
CLOSED_LABEL = re.compile(r"[ \t]*(?:-[A-Za-z]|[+),;.]|$)", re.M)
QUOTES = "\"'"


def without_cast(value: str) -> str:
    """The value with a leading cast taken off, unless a quoted literal follows it (``(byte)'p'``)."""
    cast = CAST.match(value)
    if cast is None or value[cast.end():cast.end() + 1] in "\"'`":
        return value
    return value[cast.end():]


def names_only(expression: str) -> bool:
    """Every quoted literal in a call is the name of a setting or a parameter, none a value: the call
    looks a credential up (``env('DB_PASSWORD')``, ``Cache::get('dropbox_access_token')``, ``viewData('token')``);
    a literal of any other shape (``Hash::make('s3cr3t!')``, ``decode("9ac3…")``) keeps the call undecided."""
    rest = NAME_ARGUMENT.sub("", expression)
    return rest != expression and not any(ch in rest for ch in "\"'`")


def is_same_name_member(value: str, key: str) -> bool:
    """``BlindKeySignatures = Ed25519.BlindKeySignatures``: an unquoted member access that ends in the key's
    own name re-exports a name from another module; no literal is assigned. ``self._password1 =
    password1``: a constructor keeps the parameter of the member's own name (leading ``_`` aside)."""
    value = value.strip().rstrip(";,")
    head, _, last = value.rpartition(".")
    if head and re.fullmatch(r"[A-Za-z_][\w.]*", head) and last == key.rsplit(".", 1)[-1]:
        return True
    owner, _, member = key.replace("->", ".").rpartition(".")
    return (owner in MEMBER_OWNERS and re.fullmatch(r"[A-Za-z_]\w*", value) is not None
            and member.lstrip("_") == value.lstrip("_$"))


def closes_a_label(text: str, before: str, position: int, line_end: int) -> bool:
    """After ``key:`` the string that holds the key closes (an odd count of its quote before the key),
    and an option, code punctuation or the line's end follows: a printed label, no value."""
    while position < line_end and text[position] in " \t":
        position += 1
    quote = text[position:position + 1]
    return (quote != "" and quote in QUOTES and before.count(quote) % 2 == 1
            and CLOSED_LABEL.match(text, position + 1, line_end) is not None)
