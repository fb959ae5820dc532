"""Look-alike characters, split values, key blocks and path names: the attacker's ways around the rules.

Each case is the attacker's text; the check is that no part of the value
survives sanitize and that the text around it does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest

from bastion_agent.sanitizing.scanner import redact, sanitize_path

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ZW, SHY = "\u200b", "\u00ad"

# (name, text, the value as it would be read)
LOOKALIKES = [
    ("zero-width in token", f"token {TOKEN[:6]}{ZW}{TOKEN[6:]} end", TOKEN),
    ("soft hyphen in token", f"token {TOKEN[:10]}{SHY}{TOKEN[10:]} end", TOKEN),
    ("zero-width in e-mail", f"write to alice.smith{ZW}@gmail.com today", "alice.smith@gmail.com"),
    ("soft hyphen in e-mail", f"write to ali{SHY}ce.smith@gmail.com today", "alice.smith@gmail.com"),
    ("zero-width in card", f"card 4111{ZW}1111{ZW}1111{ZW}1111 exp", "4111111111111111"),
    ("fullwidth at", "write to alice.smith＠gmail.com today", "alice.smith@gmail.com"),
    ("fullwidth key", "key ＡＫＩＡIOSFODNN7EXAMPLE end", "AKIAIOSFODNN7EXAMPLE"),
    ("fullwidth digits card", "card ４１１１ １１１１ １１１１ １１１１ exp", "4111 1111 1111 1111"),
    ("cyrillic prefix", "key \u0410\u041aIAIOSFODNN7EXAMPLE end", "AKIAIOSFODNN7EXAMPLE"),
    ("cyrillic in token", "token ghр_" + TOKEN[4:] + " end", TOKEN),  # Cyrillic er
    ("decimal entity", "write to alice.smith&#64;gmail.com today", "alice.smith@gmail.com"),
    ("hex entity", "write to alice.smith&#x40;gmail.com today", "alice.smith@gmail.com"),
    ("named entity", "write to alice.smith&commat;gmail.com today", "alice.smith@gmail.com"),
    ("percent escape", "write to alice.smith%40gmail.com today", "alice.smith@gmail.com"),
    # Variation selectors after letters that have no variants render as nothing.
    ("variation selectors in a key", "key " + "\ufe0f".join("AKIAIOSFODNN7EXAMPLE") + " end", "AKIAIOSFODNN7EXAMPLE"),
    ("ideographic variation selector in an e-mail", "write to alice\U000e0100.smith@gmail.com today",
     "alice.smith@gmail.com"),
    # Dashes typesetting puts between digits: the figure dash is the one meant for phone
    # numbers, the non-breaking hyphen keeps one on a line (HTML &#8209;), the en dash
    # and the minus sign come from word processors and PDFs.
    ("non-breaking hyphens in a phone", "call 555\u2011867\u20115309 today", "555-867-5309"),
    ("figure dashes in an SSN", "ssn 536\u201222\u20128714 today", "536-22-8714"),
    ("en dashes in a phone", "phone: 555\u2013867\u20135309 today", "555-867-5309"),
    ("minus signs in a card", "card 4111\u22121111\u22121111\u22121111 today", "4111111111111111"),
]

HARMLESS = [
    ("russian prose", "Привет, мир! Это обычный текст без секретов."),
    ("greek prose", "Η γρήγορη καφέ αλεπού πηδάει."),
    ("german prose", "Grüße aus Zürich, Straße 5."),
    ("entities", "Tom &amp; Jerry &copy; 2024 &#8212; 50% off"),
    ("percent", "growth of 40% and 25%, see %20 in URLs"),
    ("soft hyphen prose", f"extra{SHY}ordinary docu{SHY}mentation"),
    ("cjk", "中文文本测试，这是一个句子。"),
    ("emoji with a variation selector", "ship it \u2764\ufe0f today"),
    ("ranges with dashes", "from 1990\u20132000, pages 12\u201334, \u22125 \u00b0C, ISO 8601\u20112019"),
]

SPLIT = [
    ("card over two lines", "Card: 4111 1111\n1111 1111, exp 04/29", "4111 1111\n1111 1111"),
    ("key over two lines", "aws AKIAIOSF\nODNN7EXAMPLE end", "AKIAIOSF\nODNN7EXAMPLE"),
    ("token over two lines", f"token {TOKEN[:20]}\n{TOKEN[20:]} end", f"{TOKEN[:20]}\n{TOKEN[20:]}"),
]

SPLIT_HARMLESS = [
    ("next line after a value", "password = hunter22x\nfoo bar", "foo bar"),
    ("numbers on lines", "Items: 4111\n1111 sold", "4111\n1111 sold"),
    ("version then word", "release 2.0\nThe next", "2.0\nThe next"),
]

PATHS = [
    ("e-mail then dash", "hr/alice.smith@corp-internal.com-cv.txt", "alice.smith@corp-internal.com"),
    ("password in name", "password=NamePw998877.txt", "NamePw998877"),
    ("ssn after underscore", "scans/scan_219-09-9999.pdf", "219-09-9999"),
    ("phone after slash", "n/+41 44 668 18 11 call log.txt", "+41 44 668 18 11"),
    ("card after underscore", "backup_4111111111111111.txt", "4111111111111111"),
    ("iban after underscore", "notes_DE89370400440532013000.txt", "DE89370400440532013000"),
]

PATHS_HARMLESS = [
    "docs/2024-03-15-report.txt",
    "lib/python3.11/site-packages/foo-1.2.3.dist-info/RECORD",
    "IMG_20240315_123456.jpg",
    "usr/share/doc/libssl3/changelog.Debian.gz",
    "src/auth/token_store.py",
]


def parts(value: str, size: int = 6) -> set[str]:
    compact = "".join(ch for ch in value if ch.isalnum())
    return {compact[i:i + size] for i in range(max(1, len(compact) - size + 1))}


class LookalikeTests(unittest.TestCase):
    def assert_gone(self, clean: str, value: str) -> None:
        folded = "".join(ch for ch in clean if ch.isalnum())
        for piece in parts(value):
            self.assertNotIn(piece, folded)

    def test_lookalikes_are_redacted_in_the_original(self):
        for name, text, value in LOOKALIKES:
            with self.subTest(name):
                clean = redact(text)
                self.assertIn("[REDACTED:", clean)
                self.assertTrue(clean.split(" ", 1)[0] == text.split(" ", 1)[0], clean)  # the word before stays
                self.assertTrue(clean.endswith(text.rsplit(" ", 1)[-1]), clean)
                import unicodedata
                normal = unicodedata.normalize("NFKC", clean).replace(ZW, "").replace(SHY, "")
                self.assert_gone(normal, value)

    def test_harmless_non_ascii_is_unchanged(self):
        for name, text in HARMLESS:
            with self.subTest(name):
                self.assertEqual(redact(text), text)

    def test_values_split_over_two_lines(self):
        for name, text, value in SPLIT:
            with self.subTest(name):
                clean = redact(text)
                self.assertNotIn(value, clean)
                for half in value.split("\n"):
                    self.assertNotIn(half.strip(), clean)

    def test_line_joining_takes_nothing_more(self):
        for name, text, kept in SPLIT_HARMLESS:
            with self.subTest(name):
                self.assertIn(kept, redact(text))

    def test_path_boundaries(self):
        for name, path, value in PATHS:
            with self.subTest(name):
                clean = sanitize_path(path, None)
                self.assertNotIn(value, clean)
                self.assertIn("[REDACTED:", clean)
                self.assertEqual(clean.rsplit(".", 1)[-1], path.rsplit(".", 1)[-1])

    def test_attachment_names_in_a_text_are_read_as_paths(self):
        # The e-mail reader writes each attached file as "[attachment: NAME]": a name.
        for name, path, value in PATHS:
            with self.subTest(name):
                text = f"See the files.\n[attachment: {path.rsplit('/', 1)[-1]}]\nThanks."
                clean = redact(text)
                self.assertNotIn(value, clean)
                self.assertTrue(clean.startswith("See the files.\n[attachment: ") and clean.endswith("]\nThanks."), clean)

    def test_harmless_paths_unchanged(self):
        for path in PATHS_HARMLESS:
            with self.subTest(path):
                self.assertEqual(sanitize_path(path, None), path)


class ReportPathTests(unittest.TestCase):
    def test_extract_report_shows_sanitized_folder_names(self):
        from bastion_agent.core.records import ListingRow
        from bastion_agent.extracting.extract import report_lines
        rows = [ListingRow(f"{folder}/notes.txt", None, 0, "text", "extracted")
                for folder in ("hr/alice.smith@corp-internal.com", "scans/scan_219-09-9999", "n/+41 44 668 18 11 calls")]
        report = "\n".join(report_lines(rows, {"files": 3}))
        for value in ("alice.smith@corp-internal.com", "219-09-9999", "+41 44 668 18 11"):
            self.assertNotIn(value, report)
        self.assertIn("[REDACTED:email]", report)


class KeyBlockTests(unittest.TestCase):
    """Real key material from the tools people use, in LF and CRLF, with text around it."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def assert_block_gone(self, block: str) -> None:
        body = [line for line in block.splitlines() if len(line) > 20 and not line.startswith("-----")]
        self.assertTrue(body)
        for ending in ("\n", "\r\n"):
            text = "before the key\n" + block.replace("\n", ending) + "\nafter the key\n"
            clean = redact(text)
            with self.subTest(ending=repr(ending)):
                self.assertIn("before the key", clean)
                self.assertIn("after the key", clean)
                for line in body:
                    self.assertNotIn(line.strip()[:24], clean)
                # the block without its END line still goes, to the end of its armour
                cut = text[:text.index("-----END")] + "\n\nNext paragraph."
                self.assertIn("Next paragraph.", redact(cut))
                for line in body:
                    self.assertNotIn(line.strip()[:24], redact(cut))

    def run_tool(self, *args, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=True, **kwargs)

    @unittest.skipUnless(shutil.which("gpg"), "gpg is not installed")
    def test_gpg_armored_secret_key(self):
        home = os.path.join(self.tmp, "gnupg")
        os.mkdir(home, 0o700)
        env = dict(os.environ, GNUPGHOME=home)
        if shutil.which("gpgconf"):  # gpg starts an agent for this home: stop it when the test ends
            self.addCleanup(subprocess.run, ["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True, timeout=30)
        self.run_tool("gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Red Team <rt@example.org>",
                      "ed25519", "default", "never", env=env)
        block = self.run_tool("gpg", "--batch", "--armor", "--export-secret-keys", env=env).stdout
        self.assertIn("\n\n", block)  # the armour's blank line, where the old pattern stopped
        self.assert_block_gone(block.strip())

    @unittest.skipUnless(shutil.which("ssh-keygen"), "ssh-keygen is not installed")
    def test_openssh_key(self):
        path = os.path.join(self.tmp, "id")
        self.run_tool("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rt@host", "-f", path)
        with open(path, encoding="ascii") as handle:
            self.assert_block_gone(handle.read().strip())

    def test_encrypted_pem_with_headers(self):
        block = None
        if shutil.which("openssl"):
            try:
                block = self.run_tool("openssl", "genrsa", "-traditional", "-aes128", "-passout", "pass:x", "1024").stdout
            except subprocess.CalledProcessError:
                block = None
        if not block or "DEK-Info" not in block:  # written by hand in the form openssl uses
            body = "\n".join("MIICXAIBAAKBgQC7" + "x9Qz" * 12 for _ in range(12))
            block = ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                     "DEK-Info: AES-128-CBC,B1ADB6CC4CEDC36D5C42551F5914B46A\n\n" + body + "\n-----END RSA PRIVATE KEY-----\n")
        self.assertIn("DEK-Info", block)
        self.assert_block_gone(block.strip())


if __name__ == "__main__":
    unittest.main()


# Coloured terminal output saved to a file (CI logs, ``grep --color=always``,
# ``less -R`` captures): the SGR sequence before a value ends in a letter
# ("\x1b[31m", "\x1b[K") that glues to the value's first character, so a
# detector's left edge refused it; a sequence inside a value split it.
# A terminal shows none of these characters.
ESC = "\x1b"
TERMINAL = [
    ("colour before a key", f"key {ESC}[31mAKIAQWERTY2345ASDFGH{ESC}[0m end", "AKIAQWERTY2345ASDFGH"),
    ("grep --color inside a key", f"key {ESC}[01;31m{ESC}[KAKIA{ESC}[m{ESC}[KQWERTY2345ASDFGH end",
     "AKIAQWERTY2345ASDFGH"),
    ("colour before a token", f"token {ESC}[36m{TOKEN}{ESC}[0m end", TOKEN),
    ("colour around a password", f"{ESC}[1mpassword{ESC}[0m={ESC}[33mZq8rT2vX9wLp7{ESC}[0m end", "Zq8rT2vX9wLp7"),
    ("colour before an SSN", f"ssn {ESC}[31m536-22-8714{ESC}[0m end", "536-22-8714"),
    ("colour before a phone", f"call {ESC}[35m+41 44 668 18 00{ESC}[0m end", "+41 44 668 18 00"),
    ("charset shifts inside a key", f"key AKIAQW{ESC}$B{ESC}(BERTY2345ASDFGH end", "AKIAQWERTY2345ASDFGH"),
]

TERMINAL_HARMLESS = [
    ("coloured log line", f"{ESC}[32mINFO{ESC}[0m server started on port 8080"),
    ("bold heading", f"{ESC}[1mUsage:{ESC}[0m tool [options] FILE"),
]


class TerminalEscapeTests(unittest.TestCase):
    def test_values_behind_terminal_escapes_are_redacted(self):
        for name, text, value in TERMINAL:
            with self.subTest(name):
                clean = redact(text)
                shown = "".join(ch for ch in clean if ch.isalnum())  # what is left, escapes and all
                for piece in parts(value):
                    self.assertNotIn(piece, shown)
                self.assertTrue(clean.endswith(" end"), clean)

    def test_harmless_coloured_text_is_unchanged(self):
        for name, text in TERMINAL_HARMLESS:
            with self.subTest(name):
                self.assertEqual(redact(text), text)


# JSON as serializers write it: PHP's json_encode escapes every "/" ("\/"),
# Gson escapes "=", "&", "<", ">" and "'" as \u003d..., any encoder may
# write an ASCII character as \u00XX. A reader of the JSON sees the plain
# characters; the detectors saw the escapes.
JSON_ESCAPED = [
    ("escaped slashes in a URL", 'cfg {"database_url":"postgres:\\/\\/app:Zq8rT2vX9wLp@db:5432\\/ledger"} end',
     "Zq8rT2vX9wLp"),
    ("gson query string", 'cfg {"jdbc":"jdbc:postgresql://db/ledger?user\\u003dapp\\u0026password\\u003dS3cr3tPw0rd9"} end',
     "S3cr3tPw0rd9"),
    ("escaped at", 'cfg {"owner":"alice.smith\\u0040gmail.com"} end', "alice.smith@gmail.com"),
]

JSON_HARMLESS = [
    ("regex literal", 'rule {"pattern":"^https?:\\/\\/[a-z]+\\/"} end'),
    ("escaped quotes", 'say {"text":"he said \\u0022hello\\u0022"} end'),
]


class JsonEscapeTests(unittest.TestCase):
    def test_values_behind_json_escapes_are_redacted(self):
        for name, text, value in JSON_ESCAPED:
            with self.subTest(name):
                clean = redact(text)
                shown = "".join(ch for ch in clean if ch.isalnum())
                for piece in parts(value):
                    self.assertNotIn(piece, shown)
                self.assertTrue(clean.startswith("cfg {") and clean.endswith("} end"), clean)

    def test_harmless_escaped_json_is_unchanged(self):
        for name, text in JSON_HARMLESS:
            with self.subTest(name):
                self.assertEqual(redact(text), text)
