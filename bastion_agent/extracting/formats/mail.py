"""E-mail (.eml) through the standard ``email`` package: the headers people search by, and the body."""

from __future__ import annotations

import email
import email.header
import email.policy
import email.utils
import re

from bastion_agent.extracting.formats.base import REASON_DAMAGED, Refused, decode_text, decode_word
from bastion_agent.extracting.formats.htmltext import html_to_text

_HEADERS = ("Subject", "From", "To", "Cc", "Date")


def read_eml(data: bytes) -> str:
    """Headers (Subject, From, To, Cc, Date) then the readable body.

    Of a multipart/alternative the plain-text part is read, else the HTML
    part converted; attached files appear as ``[attachment: NAME]``; attached
    messages are read the same way, nested.
    """
    try:
        message = email.message_from_bytes(data, policy=email.policy.compat32)
        return _render_message(message, depth=0)
    except (Refused, MemoryError):
        raise
    except Exception:  # the email package raises many types on hostile input
        raise Refused(REASON_DAMAGED) from None


def _render_message(message, depth: int) -> str:
    if depth > 10:
        raise Refused(REASON_DAMAGED)
    lines = []
    for name in _HEADERS:
        raw = message.get(name)
        if raw is None:
            continue
        try:
            value = _date_text(raw) if name == "Date" else header_text(raw)
        except Exception:  # a malformed header is left out, the rest of the message is read
            continue
        lines.append(f"{name}: {' '.join(value.split())}")
    body = _render_part(message, depth)
    return "\n".join(lines) + ("\n\n" + body if body else "")


_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([QqBb])\?([^?\s]*)\?=")
_BETWEEN_WORDS = re.compile(r"(?<=\?=)[ \t\r\n]+(?==\?)")


def header_text(raw) -> str:
    """A header's value with its encoded words (RFC 2047) decoded, in time linear in its length.

    The default ``email`` policy parses headers into a token tree whose
    memory grows with the square of a long header (a Subject of 70,000
    encoded words took gigabytes). The message is parsed with ``compat32``,
    which keeps headers as strings, and the encoded words are decoded here,
    one pass, word by word.
    """
    text = str(raw)
    if "=?" not in text:
        return text
    text = _BETWEEN_WORDS.sub("", text)  # white space between two encoded words is not shown

    def decoded(match: re.Match) -> str:
        try:
            (data, charset), = email.header.decode_header(match.group(0))
        except (ValueError, TypeError):
            return match.group(0)
        if isinstance(data, str):
            return data
        return decode_word(data, charset)  # the charset only where it is plausible, as for a body

    return _ENCODED_WORD.sub(decoded, text)


def _date_text(raw) -> str:
    """A Date as the standard form (``Mon, 01 Jan 2024 10:00:00 +0000``), or as written if it does not parse."""
    import email.utils

    text = str(raw)
    try:
        return email.utils.format_datetime(email.utils.parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError, OverflowError):
        return text


def _render_part(part, depth: int) -> str:
    content_type = part.get_content_type()
    if content_type == "message/rfc822":
        nested = part.get_payload()
        nested = nested if isinstance(nested, list) else [nested]
        return "\n\n".join(_render_message(m, depth + 1) for m in nested if hasattr(m, "get_content_type"))
    if part.is_multipart():
        children = [child for child in part.get_payload() if hasattr(child, "get_content_type")]
        if content_type == "multipart/alternative" and children:
            return _render_part(_best_alternative(children), depth)
        texts = [_render_part(child, depth) for child in children]
        return "\n\n".join(t for t in texts if t)
    filename = attachment_name(part)
    label = f"[attachment: {' '.join(filename.split())}]" if filename else ""
    if content_type == "text/plain":
        text = _part_text(part).strip("\n")
    elif content_type == "text/html":
        text = html_to_text(_part_text(part))
    else:
        text = ""
    return "\n".join(item for item in (label, text) if item)


_MISSING = object()


def attachment_name(part) -> str | None:
    """An attached file's name: ``filename`` of Content-Disposition, else ``name`` of Content-Type.

    RFC 2231 (``filename*=charset''%XX...``, in pieces or not) and RFC 2047
    words inside the name are decoded by ``decode_word``, the rule bodies
    follow; the ``email`` package's own ``get_filename`` decodes in whatever
    charset the sender names, which turned ASCII into another script.
    """
    value = part.get_param("filename", _MISSING, "content-disposition")
    if value is _MISSING:
        value = part.get_param("name", _MISSING, "content-type")
    if value is _MISSING or value is None:
        return None
    if isinstance(value, tuple):  # RFC 2231: (charset, language, the %-decoded bytes as latin-1 text)
        charset, _, text = value
        text = decode_word(bytes(text, "raw-unicode-escape"), charset or None)
    else:
        text = email.utils.unquote(value)
    return header_text(text).strip() or None


def _best_alternative(children):
    for wanted in ("text/plain", "text/html"):
        for child in children:
            if child.get_content_type() == wanted:
                return child
    return children[-1]


def _part_text(part) -> str:
    payload = part.get_payload(decode=True) or b""
    try:
        return decode_text(payload, part.get_content_charset())
    except Refused:
        return ""
