"""Minimal office files built in memory: a .docx around some paragraphs, any zip of named parts."""

from __future__ import annotations

import io
import zipfile


def docx(paragraphs_xml: str, extra: dict[str, str] | None = None) -> bytes:
    """A minimal .docx: word/document.xml around ``paragraphs_xml`` (plus ``extra`` parts)."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", f'<?xml version="1.0"?><w:document {ns}><w:body>{paragraphs_xml}</w:body></w:document>')
        for name, body in (extra or {}).items():
            archive.writestr(name, body)
    return buffer.getvalue()


def para(*runs: str) -> str:
    return "<w:p>" + "".join(f"<w:r><w:t xml:space=\"preserve\">{run}</w:t></w:r>" for run in runs) + "</w:p>"


def zipped(parts: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in parts.items():
            archive.writestr(name, body)
    return buffer.getvalue()
