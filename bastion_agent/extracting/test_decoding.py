"""Decodings that would hide text from sanitize: plausibility and quarantine.

The attacker's bytes are written here: ordinary 8-bit text behind a UTF-16
mark, an HTML page, an e-mail part and an RTF document that declare a
charset turning ASCII into another script. The first wall is the decoding
(only plausible ones are used); the second is extract's byte-level scan,
which quarantines a document whose raw bytes show a finding the extracted
text does not.
"""

from __future__ import annotations

import base64
import bz2
import codecs
import gzip
import lzma
import unittest
import urllib.parse

from bastion_agent.extracting import readers, reading
from bastion_agent.extracting.formats.base import decode_text
from bastion_agent.testing.folders import TempCase
from bastion_agent.sanitizing import scanner

AWS = "AKIAIOSFODNN7EXAMPLE"
MAIL = "alice.smith@corp-internal.com"
SECRET_LINE = f"aws key {AWS} owner {MAIL}\r\n"


def readable(kind: str, data: bytes) -> str:
    reading = readers.read(kind, data)
    assert reading.text is not None, reading
    return reading.text


class PlausibleDecodingTests(unittest.TestCase):
    def assert_sanitized(self, text: str) -> None:
        clean = scanner.redact(text)
        self.assertNotIn(AWS, clean)
        self.assertNotIn(MAIL, clean)
        for view in (clean.encode("utf-16-le", "ignore"), clean.encode("cp500", "ignore")):
            self.assertNotIn(AWS.encode("ascii"), view)

    def test_utf16_mark_followed_by_8bit_text(self):
        data = codecs.BOM_UTF16_LE + SECRET_LINE.encode("ascii") * 3
        text = readable("text", data)
        self.assertIn(AWS, text)
        self.assert_sanitized(text)

    def test_utf16_log_that_8bit_text_was_appended_to(self):
        head = "PowerShell transcript start\r\nCommand: Get-Item\r\n".encode("utf-16-le")
        data = codecs.BOM_UTF16_LE + head + SECRET_LINE.encode("ascii") + b"more output 42\r\n"
        text = readable("text", data)
        self.assertIn("PowerShell transcript start", text)
        self.assertIn(SECRET_LINE.strip(), text)
        self.assert_sanitized(text)

    def test_real_utf16_text_still_decodes(self):
        for sample in ("Grüße, Zoë — déjà vu\r\n" * 20, "中文文本测试，这是一个很长的句子用于检测编码。\n" * 20,
                       "Русский текст для проверки.\n" * 20):
            for encoding, bom in (("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE)):
                with self.subTest(sample=sample[:8], encoding=encoding):
                    self.assertEqual(decode_text(bom + sample.encode(encoding)), sample)

    def test_html_meta_charset_utf16(self):
        for charset in ("utf-16", "utf-16le", "UTF-16BE", "utf-32", "cp500", "utf-7"):
            data = (f'<html><head><meta charset="{charset}"></head><body><p>{SECRET_LINE}</p></body></html>').encode()
            with self.subTest(charset=charset):
                text = readable("html", data)
                self.assertIn(AWS, text)
                self.assert_sanitized(text)

    def test_email_part_charset_utf16(self):
        for charset in ("utf-16", "utf-16-be", "cp500", "cp037"):
            data = (
                "From: a@example.org\r\nSubject: keys\r\nMIME-Version: 1.0\r\n"
                f'Content-Type: text/plain; charset="{charset}"\r\nContent-Transfer-Encoding: 8bit\r\n\r\n'
                + SECRET_LINE
            ).encode("ascii")
            with self.subTest(charset=charset):
                text = readable("eml", data)
                self.assertIn(AWS, text)
                self.assert_sanitized(text)

    def test_email_part_really_in_utf16_still_reads(self):
        body = "Grüße aus Zürich\r\n".encode("utf-16")
        data = (b"From: a@example.org\r\nSubject: hi\r\nMIME-Version: 1.0\r\n"
                b"Content-Type: text/plain; charset=utf-16\r\nContent-Transfer-Encoding: 8bit\r\n\r\n" + body)
        self.assertIn("Grüße aus Zürich", readable("eml", data))

    def test_rtf_ebcdic_code_page(self):
        for page in ("500", "037", "1026"):
            data = ("{\\rtf1\\ansi\\ansicpg" + page + " {\\fonttbl{\\f0 Arial;}}\\f0 " + SECRET_LINE + "\\par}").encode()
            with self.subTest(page=page):
                text = readable("rtf", data)
                self.assertIn(AWS, text)
                self.assert_sanitized(text)

    def test_rtf_ascii_compatible_code_page_is_kept(self):
        data = b"{\\rtf1\\ansi\\ansicpg1251 \\'cf\\'f0\\'e8\\'e2\\'e5\\'f2 world\\par}"
        self.assertEqual(readable("rtf", data), "Привет world")


class QuarantineTests(TempCase):
    """The second wall: raw bytes that show a finding the text hides keep the document out."""

    def test_hidden_finding_quarantines_the_document(self):
        # ISO-2022-JP is a legitimate charset whose shift sequence turns ASCII pairs into kanji.
        hidden = b"key \x1b$B" + AWS.encode() + b"\x1b(B done"
        self.put("page.html", b'<html><head><meta charset="iso-2022-jp"></head><body><p>' + hidden + b"</p></body></html>")
        self.put("mail.eml", b"From: a@example.org\r\nSubject: x\r\nContent-Type: text/plain; charset=iso-2022-jp\r\n\r\n"
                 + hidden + b"\r\n")
        self.put("plain.txt", "nothing to see here\n")
        summary = self.run_stage()
        rows = self.listing()
        for rel in ("page.html", "mail.eml"):
            with self.subTest(rel=rel):
                self.assertEqual(rows[rel]["status"], "skipped")
                self.assertEqual(rows[rel]["reason"], "quarantined: aws-access-key")
        self.assertEqual(rows["plain.txt"]["status"], "extracted")
        self.assertEqual(summary["skipped_by_reason"].get("quarantined: aws-access-key"), 2)
        stored = b"".join(p.read_bytes() for p in self.layout.extract_dir.glob("*.txt"))
        self.assertNotIn("阻".encode(), stored)

    def test_a_compressed_document_is_scanned_as_what_it_holds(self):
        # The same hiding, packed: the byte-level scan looked at the compressed bytes' kind
        # ("html.gz" is no kind it scans), so the kanji went to the store.
        hidden = b"key \x1b$B" + AWS.encode() + b"\x1b(B done"
        self.put("page.html.gz", gzip.compress(b'<meta charset="iso-2022-jp"><p>' + hidden + b"</p>"))
        self.put("mail.eml.xz", lzma.compress(b"From: a@example.org\r\nSubject: x\r\n"
                                             b"Content-Type: text/plain; charset=iso-2022-jp\r\n\r\n" + hidden + b"\r\n"))
        self.put("notes.txt.bz2", bz2.compress(f"nothing hidden, {MAIL}\n".encode()))
        self.run_stage()
        rows = self.listing()
        for rel in ("page.html.gz", "mail.eml.xz"):
            with self.subTest(rel=rel):
                self.assertEqual((rows[rel]["status"], rows[rel]["reason"]), ("skipped", "quarantined: aws-access-key"))
        self.assertEqual(rows["notes.txt.bz2"]["status"], "extracted")
        stored = b"".join(p.read_bytes() for p in self.layout.extract_dir.glob("*.txt"))
        self.assertNotIn("阻".encode(), stored)

    def test_a_text_in_ebcdic_is_quarantined(self):
        # A mainframe extract copied in binary mode: upper case EBCDIC reads as cp1252
        # letters, so the store kept "õóö`òò`ø÷ñô", an SSN to anyone who encodes it back.
        record = "CUSTOMER JOHN SMITH SSN 536-22-8714 CARD 4111 1111 1111 1111 BRANCH 0042\n"
        self.put("records.txt", (record * 20).encode("cp500"))
        self.put("russian.txt", "Отчёт о работе сервиса за квартал, без секретов.\n" * 20)
        self.put("russian-1251.txt", "Отчёт о работе сервиса за квартал, без секретов.\n".encode("cp1251") * 20)
        self.put("chinese.txt", "季度报告，没有秘密。\n" * 20)
        self.run_stage()
        rows = self.listing()
        self.assertEqual(rows["records.txt"]["status"], "skipped")
        self.assertTrue(rows["records.txt"]["reason"].startswith("quarantined: "), rows["records.txt"])
        for rel in ("russian.txt", "russian-1251.txt", "chinese.txt"):
            with self.subTest(rel=rel):
                self.assertEqual(rows[rel]["status"], "extracted", rows[rel])
        stored = b"".join(p.read_bytes() for p in self.layout.extract_dir.glob("*.txt"))
        self.assertNotIn("õóö".encode(), stored)

    def test_plausible_documents_are_not_quarantined(self):
        self.put("bom.log", codecs.BOM_UTF16_LE + SECRET_LINE.encode("ascii"))
        self.put("utf8.txt", f"Grüße von Jürgen, {MAIL}, password = \"pässwörd1\"\n")
        self.put("utf16.txt", codecs.BOM_UTF16_LE + f"Zoë {MAIL} {AWS}\r\n".encode("utf-16-le"))
        self.put("entity.html", f"<p>write to alice&#64;corp-internal.com or {MAIL}</p>")
        self.put("dropped.html", "<!-- maintainer bob@corp-internal.com --><script>k='AKIAIOSFODNN7EXAMPLF'</script><p>hi</p>")
        self.put("qp.eml", "From: a@example.org\r\nSubject: x\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 "Content-Transfer-Encoding: quoted-printable\r\n\r\npassword=3D\"hunter22\" caf=C3=A9 " + MAIL + "\r\n")
        self.run_stage()
        for rel, row in self.listing().items():
            with self.subTest(rel=rel):
                self.assertEqual(row["status"], "extracted", row)

    def test_hidden_findings_function(self):
        data = b"{\\rtf1 \\u-24000?AKIA}"  # text only
        self.assertEqual(reading.hidden_findings(data, readable("rtf", data), None, "rtf"), [])
        self.assertEqual(reading.hidden_findings(b"\x00\x01", "", None, "pdf"), [])
        data = b"<meta charset=\"iso-2022-jp\"><p>\x1b$B" + AWS.encode() + b"\x1b(B</p>"
        self.assertEqual(reading.hidden_findings(data, readable("html", data), None, "html"), ["aws-access-key"])


SSN = "372-51-4486"


def encoded_word(charset: str, data: bytes) -> str:
    return f"=?{charset}?b?{base64.b64encode(data).decode('ascii')}?="


def mail(subject: str, filename_param: str = "") -> bytes:
    """A message with ``subject`` and, when given, an attachment whose Content-Disposition ends in ``filename_param``."""
    head = f"From: ops@example.org\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\n"
    if not filename_param:
        return (head + "Content-Type: text/plain\r\n\r\nSee the subject.\r\n").encode("ascii")
    return (head + 'Content-Type: multipart/mixed; boundary="b1"\r\n\r\n'
            "--b1\r\nContent-Type: text/plain\r\n\r\nThe scan is attached.\r\n"
            f"--b1\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; {filename_param}\r\n"
            "Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b1--\r\n").encode("ascii")


class HeaderDecodingTests(TempCase):
    """E-mail headers (RFC 2047 encoded words) and attachment names (RFC 2231 too) decode under the same
    plausibility rule as bodies: a charset that turns the attacker's ASCII into another script is not
    used, and a value hidden anyway is quarantined, so nothing reaches the store unreadable to sanitize."""

    def assertNothingHidden(self, rel: str, value: str) -> None:
        row = self.listing()[rel]
        if row["status"] == "skipped":
            self.assertTrue(row["reason"].startswith("quarantined: "), row)
            return
        clean = scanner.redact(self.text_of(rel))
        for view in (clean.encode("utf-8"), clean.encode("utf-16-le", "ignore"), clean.encode("cp500", "ignore")):
            self.assertNotIn(value.encode("ascii"), view, f"{rel}: {clean!r}")

    def test_a_subject_in_utf16_of_ascii_bytes(self):
        self.put("subject.eml", mail(encoded_word("utf-16-le", f"deploy key {AWS} today".encode("ascii"))))
        self.run_stage()
        self.assertNothingHidden("subject.eml", AWS)

    def test_a_subject_in_ebcdic(self):
        self.put("ebcdic.eml", mail(encoded_word("cp500", f"customer ssn {SSN} on file".encode("cp500"))))
        self.put("ebcdic-undeclared.eml", mail(encoded_word("us-ascii", f"customer ssn {SSN} on file".encode("cp500"))))
        self.put("ascii-as-ebcdic.eml", mail(encoded_word("cp500", f"customer ssn {SSN} on file".encode("ascii"))))
        self.run_stage()
        self.assertNothingHidden("ascii-as-ebcdic.eml", SSN)
        self.assertNothingHidden("ebcdic.eml", SSN)
        self.assertNothingHidden("ebcdic-undeclared.eml", SSN)

    def test_attachment_names_in_encoded_words_and_rfc2231(self):
        name = f"scan_{SSN}.pdf"
        cases = {
            "word-cp500.eml": f'filename="{encoded_word("cp500", name.encode("cp500"))}"',
            "word-ascii-as-cp500.eml": f'filename="{encoded_word("cp500", name.encode("ascii"))}"',
            "rfc2231-ascii-as-cp500.eml": "filename*=cp500''" + urllib.parse.quote(name.encode("ascii")),
            "word-utf16.eml": f'filename="{encoded_word("utf-16-le", name.encode("ascii"))}"',
            "rfc2231-utf16.eml": "filename*=utf-16-le''" + urllib.parse.quote(name.encode("ascii")),
            "rfc2231-cp500.eml": "filename*=cp500''" + urllib.parse.quote(name.encode("cp500")),
            "rfc2231-parts.eml": "filename*0*=utf-16-le''" + urllib.parse.quote(name[:8].encode("ascii"))
                                 + "; filename*1*=" + urllib.parse.quote(name[8:].encode("ascii")),
        }
        for rel, param in cases.items():
            self.put(rel, mail("the scan", param))
        self.run_stage()
        for rel in cases:
            with self.subTest(rel=rel):
                self.assertNothingHidden(rel, SSN)

    def test_plausible_headers_and_names_still_read(self):
        self.put("utf8.eml", mail("=?utf-8?q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?=",
                                  "filename*=utf-8''" + urllib.parse.quote("Bericht-März.pdf")))
        self.put("latin1.eml", mail("=?iso-8859-1?q?caf=E9_cr=E8me?=", 'filename="=?iso-8859-1?q?r=E9sum=E9.pdf?="'))
        self.put("utf16.eml", mail(encoded_word("utf-16-le", "Zoë und Jürgen".encode("utf-16-le"))))
        self.put("cjk.eml", mail(encoded_word("utf-8", "季度报告".encode("utf-8"))))
        self.run_stage()
        self.assertIn("Subject: Grüße aus Köln", self.text_of("utf8.eml"))
        self.assertIn("[attachment: Bericht-März.pdf]", self.text_of("utf8.eml"))
        self.assertIn("Subject: café crème", self.text_of("latin1.eml"))
        self.assertIn("[attachment: résumé.pdf]", self.text_of("latin1.eml"))
        self.assertIn("Subject: Zoë und Jürgen", self.text_of("utf16.eml"))
        self.assertIn("Subject: 季度报告", self.text_of("cjk.eml"))


if __name__ == "__main__":
    unittest.main()
