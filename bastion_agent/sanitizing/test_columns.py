"""Cells by their header and names where documents mark them."""

from __future__ import annotations

import random
import string
import unittest

from bastion_agent.sanitizing.scanner import Sanitizer
from bastion_agent.sanitizing.settings import SanitizeSettings

_rng = random.Random()


def digits(n: int) -> str:
    return "".join(_rng.choice("23456789") for _ in range(n))


def password() -> str:
    return "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(6)) + ";#&!$ " + digits(3)


def surname() -> str:
    return "Ok" + "".join(_rng.choice("aeiounrl") for _ in range(6)) + "-Baptiste"


def forename() -> str:
    return "Ys" + "".join(_rng.choice("aeiounrl") for _ in range(5))


def birth_date() -> str:
    day, month, year = _rng.randint(10, 28), _rng.randint(1, 12), _rng.randint(1940, 2005)
    return _rng.choice((f"{day:02d}/{month:02d}/{year}", f"{year}-{month:02d}-{day:02d}",
                        f"{day} {'March' if month < 7 else 'October'} {year}"))


def name_placements() -> list[tuple[str, str, tuple[str, ...]]]:
    """(place, text, values that must go) for each place a document marks a name; fresh names every run."""
    first, last, born = forename(), surname(), birth_date()
    mail = f"{first.lower()}@corp-mail.io"
    return [
        ("salutation", f"Dear Ms. {last},\n\nthank you for the call.\n", (last,)),
        ("salutation with a first name", f"Hi {first},\nthe rota is attached.\n", (first,)),
        ("sign-off", f"See you on Monday.\n\nKind regards,\n{first} {last}\nHead of Payroll\n", (first, last)),
        ("signature after a blank line", f"Best regards,\n\n{first} {last}\n", (first, last)),
        ("sign-off on one line", f"Thanks for the help.\nBest, {first}\n", (first,)),
        ("From display name", f"From: {first} {last} <{mail}>\nSubject: rota\n", (first, last)),
        ("From display name in quotes", f'From: "{last}, {first}" <{mail}>\n', (first, last)),
        ("To and Cc display names", f"To: {first} {last} <{mail}>, Ops <ops@corp.io>\nCc: {last} Berg <b@corp.io>\n",
         (first, last)),
        ("Reply-To display name", f"Reply-To: {first} {last} <{mail}>\n", (first, last)),
        ("display name before an address", f"Contact {first} {last} <{mail}> about the lease.\n", (first, last)),
        ("form label Patient name", f"Patient name: Ingrid {last}\nWard: 4B\n", (last,)),
        ("form label in capitals", f"PATIENT NAME: {last.upper()}, {first.upper()}\n", (last.upper(), first.upper())),
        ("form label Employee", f"Employee: {first} {last}\n", (first, last)),
        ("form label Signed by", f"Signed by: {first} {last}\n", (first, last)),
        ("form label Name", f"Name: {first} {last}\n", (first, last)),
        ("honorific in prose", f"The visit of Dr. {last} went well.\n", (last,)),
        ("honorific then lower-case words", f"we spoke to Mrs {first} {last} yesterday and she agreed\n",
         (first, last)),
        ("honorific then and", f"Mr. {last} and the landlord signed.\n", (last,)),
        ("date of birth", f"Date of birth: {born}\n", (born,)),
        ("DOB", f"DOB {born}\n", (born,)),
        ("Name column of a staff table", f"Name,E-mail,Dept\n{first} {last},{mail},Payroll\n", (first, last)),
        ("Employee column", f"employee\tteam\n{first} {last}\tPayroll\n", (first, last)),
    ]


NAME_LOOKALIKES = [
    ("generic salutation", "Dear Sir or Madam,\nplease find attached.\n"),
    ("salutation of a group", "Dear all,\nHi team,\nHello everyone,\n"),
    ("sign-off of a team", "Kind regards,\nThe Ops Team\n"),
    ("sign-off followed by prose", "Thanks,\nplease reply by Friday.\n"),
    ("From of a role", "From: Debian Python Team <team@example.org>\n"),
    ("form label with prose", "Patient name: see the attached form\n"),
    ("lower-case YAML name", "metadata:\n  name: api-key\n"),
    ("a label naming no one", "Name: the name of the setting\n"),
    ("a date that is not a birth", "Date of release: 14/03/2020\nBuilt: 2021-05-01\n"),
    ("a product table", "Name,Price,SKU\nWidget Pro,3.50,AB-1\n"),
    ("a capitalised acronym", "Open it in MS Excel or Dr.Web first.\n"),
    ("an honorific at the end of a line", "He signed it as Dr.\n"),
]


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

    def test_every_sensitive_column_of_a_staff_table_in_each_syntax(self):
        header = ("name", "ssn", "phone", "password", "PIN")
        row = ("Ysolde " + surname(), digits(9), digits(10), password(), digits(4))
        tables = {
            "csv": ",".join(header) + "\n" + ",".join(f'"{cell}"' for cell in row) + "\n",
            "semicolon csv": ";".join(header) + "\n" + ";".join(f'"{cell}"' for cell in row) + "\n",
            "tsv": "\t".join(header) + "\n" + "\t".join(row) + "\n",
            "markdown": "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n| " + " | ".join(row) + " |\n",
        }
        for syntax, text in tables.items():
            with self.subTest(syntax=syntax):
                clean = Sanitizer().redact(text)[0]
                for value in row:
                    self.assertNotIn(value, clean)
                for word in header:
                    self.assertIn(word, clean)  # the header stays readable

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

    def test_many_distinct_and_huge_header_cells_keep_memory_bounded(self):
        # Header cells are remembered between documents to fold each once; a hostile folder of tables with
        # ever new (or megabyte-long) header cells must not grow that memory, and a long cell is still read.
        from bastion_agent.sanitizing import columns

        sanitizer = Sanitizer()
        for batch in range(3):
            header = ",".join(f"h{batch}x{i}" for i in range(3000)) + ",password," + "w" * 100_000 + "\n"
            sanitizer.redact(header + ",".join("x" for _ in range(3000)) + ",Vb7#mQ2z,y\n")
        for cache in (columns._cached_rule, columns._cached_header):
            self.assertLessEqual(cache.cache_info().currsize, 4096)
        long_cell = " " * 300 + "Password"
        pw = password().replace(" ", "")
        self.assertNotIn(pw, sanitizer.redact(f"user,{long_cell}\nkim,{pw}\n")[0])


class NameTests(unittest.TestCase):
    def test_each_place_a_document_marks_a_name(self):
        for place, text, values in name_placements():
            with self.subTest(place=place):
                clean = Sanitizer().redact(text)[0]
                for value in values:
                    self.assertNotIn(value, clean)

    def test_lookalikes_of_marked_names_stay(self):
        for place, text in NAME_LOOKALIKES:
            with self.subTest(place=place):
                self.assertEqual(Sanitizer().redact(text)[0], text)

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
