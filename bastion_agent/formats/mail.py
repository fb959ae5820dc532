"""E-mail (.eml) through the standard ``email`` package: the headers people search by, and the body."""

from __future__ import annotations

import email
import email.policy

from .base import REASON_DAMAGED, Refused, decode_text
from .htmltext import html_to_text

_HEADERS = ("Subject", "From", "To", "Cc", "Date")


def read_eml(data: bytes) -> str:
    """Headers (Subject, From, To, Cc, Date) then the readable body.

    Of a multipart/alternative the plain-text part is read, else the HTML
    part converted; attached files appear as ``[attachment: NAME]``; attached
    messages are read the same way, nested.
    """
    try:
        message = email.message_from_bytes(data, policy=email.policy.default)
        return _render_message(message, depth=0)
    except Refused:
        raise
    except Exception:  # the email package raises many types on hostile input
        raise Refused(REASON_DAMAGED) from None


def _render_message(message, depth: int) -> str:
    if depth > 10:
        raise Refused(REASON_DAMAGED)
    lines = []
    for name in _HEADERS:
        try:
            value = message.get(name)
        except Exception:  # a malformed header is left out, the rest of the message is read
            continue
        if value is not None:
            lines.append(f"{name}: {' '.join(str(value).split())}")
    body = _render_part(message, depth)
    return "\n".join(lines) + ("\n\n" + body if body else "")


def _render_part(part, depth: int) -> str:
    content_type = part.get_content_type()
    if content_type == "message/rfc822":
        nested = part.get_payload()
        nested = nested if isinstance(nested, list) else [nested]
        return "\n\n".join(_render_message(m, depth + 1) for m in nested if hasattr(m, "get_content_type"))
    if part.is_multipart():
        children = list(part.iter_parts())
        if content_type == "multipart/alternative" and children:
            return _render_part(_best_alternative(children), depth)
        texts = [_render_part(child, depth) for child in children]
        return "\n\n".join(t for t in texts if t)
    filename = part.get_filename()
    label = f"[attachment: {' '.join(filename.split())}]" if filename else ""
    if content_type == "text/plain":
        text = _part_text(part).strip("\n")
    elif content_type == "text/html":
        text = html_to_text(_part_text(part))
    else:
        text = ""
    return "\n".join(item for item in (label, text) if item)


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
