"""Files built to cost a reader far more than their size: the hostile tests' and the benchmark's inputs."""

from __future__ import annotations

import io
import zipfile


def xlsx_shared_string_bomb() -> bytes:
    """1.9 KB on disk: one 300,000-character shared string, referenced by 10,000 cells."""
    cells = "".join(f'<row r="{r}">' + "".join(f'<c r="A{r}" t="s"><v>0</v></c>' for _ in range(100)) + "</row>"
                    for r in range(1, 101))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("xl/sharedStrings.xml", f'<sst><si><t>{"A" * 300_000}</t></si></sst>')
        archive.writestr("xl/worksheets/sheet1.xml", f"<worksheet><sheetData>{cells}</sheetData></worksheet>")
    return buffer.getvalue()


def eml_header_bomb() -> bytes:
    """A 980 KB message whose Subject is 67,000 encoded words and whose To: is 2,000 addresses."""
    subject = " ".join(f"=?utf-8?q?{n % 10}?=" for n in range(67_000))
    to = ", ".join(f"u{n}@example.org" for n in range(2_000))
    return f"From: a@example.org\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nthe body\r\n".encode()
