"""Cells by their header and names where documents mark them (issue 24 items 3 and 4)."""

from __future__ import annotations

import random
import string
import unittest

from bastion_agent.sanitizing.sanitize import SanitizeSettings, Sanitizer

_rng = random.Random()


def digits(n: int) -> str:
    return "".join(_rng.choice("23456789") for _ in range(n))


def password() -> str:
    return "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(6)) + ";#&!$ " + digits(3)


def surname() -> str:
    return "Ok" + "".join(_rng.choice("aeiounrl") for _ in range(6)) + "-Baptiste"


class ColumnTests(unittest.TestCase):
    def test_staff_csv_tsv_and_markdown_lose_every_sensitive_cell(self):
        ssn, phone, pw, name = digits(9), digits(10), password(), "Ysolde " + surname()
        for text in (f"name,ssn,phone,password\n{name},{ssn},{phone},\"{pw}\"\n",
                     f"name\tssn\tphone\tpassword\n{name}\t{ssn}\t{phone}\t{pw}\n",
                     f"| name | ssn | phone | password |\n|---|---|---|---|\n| {name} | {ssn} | {phone} | {pw} |\n"):
            with self.subTest(text=text[:12]):
                clean = Sanitizer().redact(text)[0]
                for value in (ssn, phone, pw, name):
                    self.assertNotIn(value, clean)

    def test_lookalike_tables_keep_their_cells(self):
        for text in ("name,price,sku\nWidget,3.50,AB-1\n", "ext.\troom\n4412\tB2\n",
                     "  dis\t\t\tmodule\n  email\t\t\tpackage\n  enum\t\t\tmodule\n"):
            with self.subTest(text=text[:12]):
                self.assertEqual(Sanitizer().redact(text)[0], text)

    def test_hostile_header_of_many_columns_ragged_rows_and_quoted_newlines(self):
        header = ",".join(f"c{i}" for i in range(20000)) + ",password\n"
        pw = password().replace(" ", "")
        text = header + ",".join("x" for _ in range(20000)) + f",{pw}\n" + "a,b\n" + '"q\nq",' * 3 + "\n"
        self.assertNotIn(pw, Sanitizer().redact(text)[0])
        self.assertIsInstance(Sanitizer().redact('name,ssn\n"' + "x" * 200000 + "\n")[0], str)


class NameTests(unittest.TestCase):
    def test_marked_names_go_and_generic_salutations_stay(self):
        name = surname()
        clean = Sanitizer().redact(f"Dear Ms. {name},\n\nKind regards,\nIngrid {name}\n")[0]
        self.assertNotIn(name, clean)
        self.assertIn("Dear Ms. [REDACTED:person-name],", clean)
        text = "Dear Sir or Madam,\nplease find attached.\n\nBest regards,\nThe Ops Team\n"
        self.assertEqual(Sanitizer().redact(text)[0], text)

    def test_person_name_can_be_disabled(self):
        name = surname()
        text = f"Patient name: Ingrid {name}\n"
        self.assertNotIn(name, Sanitizer().redact(text)[0])
        self.assertIn(name, Sanitizer(SanitizeSettings(disable=("person-name",))).redact(text)[0])


if __name__ == "__main__":
    unittest.main()
