"""Copies across texts: only within readers, whole words only, transformed writings too.

The attacker of the hostile tests may read ``public`` and drop files into
the swept folder; the victim's value sits in ``hr/``. Values are fresh each
run. Each test that shows a copy removed has beside it a look-alike that
must stay.
"""

from __future__ import annotations

import json
import random
import re
import string
import tempfile
import unittest
from pathlib import Path
from urllib.parse import quote

from bastion_agent.core.layout import Layout, read_jsonl
from bastion_agent.sanitizing import copies
from bastion_agent.sanitizing.copy_readers import CopySources, may_take_from
from bastion_agent.testing.labelled_docs import HR_PUBLIC_ACCESS
from bastion_agent.testing.testsupport import sanitize_as_extracted, sha256_hex, write_manifest

ACCESS = HR_PUBLIC_ACCESS + """
[[access.rules]]
paths = ["both/**"]
groups = ["hr", "public"]
"""  # anything else gets no group: read by every-group callers only


def password(symbols: str = "!#;&") -> str:
    """A password of letters, digits and a symbol, fresh each call (starts with a letter)."""
    body = [random.choice(string.ascii_letters + string.digits) for _ in range(10)]
    return random.choice(string.ascii_uppercase) + "".join(body) + random.choice(symbols) + random.choice(string.digits)


def ssn() -> str:
    return f"{random.randint(100, 665)}-{random.randint(10, 99)}-{random.randint(1000, 9999)}"


class Sweep:
    """A folder whose extract store is written directly (``{path: text}``), then ``sanitize`` through the CLI."""

    def __init__(self, case: unittest.TestCase, access: str = ACCESS):
        self.case = case
        self.folder = Path(tempfile.mkdtemp())
        case.addCleanup(lambda: __import__("shutil").rmtree(self.folder, ignore_errors=True))
        self.manifest = write_manifest(self.folder, dim=8, size=16, overlap=4, extra=access)
        self.out = self.folder / "out"
        self.layout = Layout(self.out)
        self.stdout = ""

    def run(self, documents: dict[str, str]) -> "Sweep":
        code, out, err = sanitize_as_extracted(self.layout, self.manifest, documents)
        self.case.assertEqual(code, 0, err)
        self.stdout = out + err
        return self

    def text_of(self, path: str) -> str:
        for row in read_jsonl(self.layout.sanitized_listing):
            if path in row["paths"]:
                return self.layout.doc_text_path(self.layout.sanitized_dir, row["doc"]).read_text(encoding="utf-8")
        raise AssertionError(f"{path} is not in the listing")

    def paths(self) -> list[str]:
        return sorted(path for row in read_jsonl(self.layout.sanitized_listing) for path in row["paths"])

    def summary(self) -> dict:
        summary = json.loads((self.out / "sanitize.summary.json").read_text(encoding="utf-8"))
        return {key: value for key, value in summary.items() if key not in ("started", "finished", "seconds", "elapsed")}


def glossary(guesses: list[str]) -> str:
    """The attacker's public file: every guess, guess ``i`` written ``i + 1`` times."""
    return "".join(f"term {n}: {guess}\n" * (n + 1) for n, guess in enumerate(guesses))


class HostileCopyTests(unittest.TestCase):
    """An attacker who reads ``public`` and plants files learns nothing of ``hr`` through copies."""

    def setUp(self):
        # One shape for every guess: which rule finds a value in hr's own text may depend on its characters
        # (a ";" ends an assignment early), and that count is hr's own, not a copy's.
        self.guesses = [password("!") for _ in range(6)]

    def sweep_with_secret(self, secret: str) -> Sweep:
        return Sweep(self).run({
            "hr/ops/db.env": f"DB_PASSWORD={secret}\n",
            "hr/letters/exit.txt": f"Dear colleague,\nyour access ends today.\nDB_PASSWORD={secret}\n",
            "public/wiki/glossary.txt": glossary(self.guesses),
            f"public/wiki/{self.guesses[2]}.txt": "named after a guess\n",
        })

    def test_public_text_keeps_every_guess_whatever_hr_holds(self):
        first = self.sweep_with_secret(self.guesses[2])
        self.assertEqual(first.text_of("public/wiki/glossary.txt"), glossary(self.guesses))
        self.assertNotIn("[REDACTED", first.text_of("public/wiki/glossary.txt"))
        self.assertIn(f"public/wiki/{self.guesses[2]}.txt", first.paths())  # its name is judged on its own
        self.assertNotIn(self.guesses[2], first.text_of("hr/ops/db.env"))  # hr itself is clean

    def test_counts_and_stage_line_do_not_move_with_the_hidden_value(self):
        sweeps = [self.sweep_with_secret(self.guesses[n]) for n in (0, 5)]
        self.assertEqual(sweeps[0].summary(), sweeps[1].summary())
        lines = [re.sub(r" in [0-9.]+ s$", "", sweep.stdout.replace(str(sweep.out), "").strip()) for sweep in sweeps]
        self.assertEqual(lines[0], lines[1])
        self.assertEqual(sweeps[0].text_of("public/wiki/glossary.txt"), sweeps[1].text_of("public/wiki/glossary.txt"))

    def test_a_copy_in_a_text_of_narrower_readers_goes(self):
        secret = password()
        sweep = Sweep(self).run({
            "both/handbook.txt": f"DB_PASSWORD={secret}\n",
            "public/howto.txt": f"log in with {secret} then run the job\n",  # public readers all read both/
            "hr/notes.txt": f"the shared one is {secret} for now\n",  # hr readers all read both/
            "misc/unlabelled.txt": f"old: {secret}\n",  # every-group readers only
        })
        for path in ("public/howto.txt", "hr/notes.txt", "misc/unlabelled.txt"):
            self.assertNotIn(secret, sweep.text_of(path), path)
            self.assertIn("[REDACTED:", sweep.text_of(path), path)

    def test_a_copy_in_a_text_of_wider_or_other_readers_stays(self):
        hr_secret, public_secret, lone = password(), password(), password()
        sweep = Sweep(self).run({
            "hr/db.env": f"DB_PASSWORD={hr_secret}\n",
            "public/app.env": f"API_PASSWORD={public_secret}\n",
            "misc/old.env": f"OLD_PASSWORD={lone}\n",
            "both/list.txt": f"{hr_secret}\n{public_secret}\n{lone}\n",  # hr-only readers cannot read public/
            "public/list.txt": f"{hr_secret}\n{lone}\n",
        })
        self.assertEqual(sweep.text_of("both/list.txt"), f"{hr_secret}\n{public_secret}\n{lone}\n")
        self.assertEqual(sweep.text_of("public/list.txt"), f"{hr_secret}\n{lone}\n")

    def test_changed_labels_sanitize_the_text_again_and_erase_the_old_document(self):
        secret = password()
        documents = {"hr/db.env": f"DB_PASSWORD={secret}\n", "ops/notes.txt": f"login {secret} today\n"}
        sweep = Sweep(self).run(documents)  # ops/ has no group: every-group readers, who read hr/
        self.assertNotIn(secret, sweep.text_of("ops/notes.txt"))
        old = sweep.text_of("ops/notes.txt")
        sweep.manifest.write_text(sweep.manifest.read_text(encoding="utf-8")
                                  + '\n[[access.rules]]\npaths = ["ops/**"]\ngroups = ["public"]\n', encoding="utf-8")
        sweep.run(documents)
        self.assertIn(secret, sweep.text_of("ops/notes.txt"))  # public readers may not read hr/: judged alone
        erase = read_jsonl(sweep.layout.extract_dir / "erase.jsonl")
        self.assertIn(sha256_hex(old), {row["doc"] for row in erase})

    def test_a_value_found_later_erases_the_document_that_held_it(self):
        secret = password()
        howto = {"public/howto.txt": f"log in with {secret} then run the job\n"}
        sweep = Sweep(self).run(howto)
        old = sweep.text_of("public/howto.txt")
        self.assertIn(secret, old)  # nothing says it is a secret yet
        sweep.run({**howto, "both/app.env": f"APP_PASSWORD={secret}\n"})
        self.assertNotIn(secret, sweep.text_of("public/howto.txt"))
        erase = {row["doc"] for row in read_jsonl(sweep.layout.extract_dir / "erase.jsonl")}
        self.assertIn(sha256_hex(old), erase)  # its windows and vectors held the value: purged at the next embed


class DefaultCopyTests(unittest.TestCase):
    """With one group set for everything, a value reaches every text; only whole words are copies."""

    def test_without_access_every_text_loses_the_value(self):
        secret = password()
        sweep = Sweep(self, access="").run({"hr/db.env": f"DB_PASSWORD={secret}\n",
                                            "public/howto.txt": f"log in with {secret} then run\n"})
        self.assertEqual(sweep.text_of("public/howto.txt").count("[REDACTED:"), 1)
        self.assertNotIn(secret, sweep.text_of("public/howto.txt"))
        self.assertEqual(sweep.summary()["findings"], 1)  # the copy is another text's: not counted

    def test_a_copy_inside_a_longer_word_stays(self):
        secret = password()
        text = f"{secret}Ops and x{secret} and {secret}_v2\n"
        sweep = Sweep(self, access="").run({"a.env": f"DB_PASSWORD={secret}\n", "b.txt": text})
        self.assertEqual(sweep.text_of("b.txt"), text)

    def test_a_word_inside_a_longer_word_stays_in_the_matcher(self):
        matcher = copies.Matcher({"X!9abcdef": "r"})
        self.assertEqual(list(matcher.finditer("X!9abcdefOps")), [])
        self.assertEqual(list(matcher.finditer("aX!9abcdef")), [])
        self.assertEqual([(s, e) for s, e, _ in matcher.finditer("(X!9abcdef)")], [(1, 10)])


def transformed(value: str, number: str, account: str) -> dict[str, str]:
    """Ten writings of values found elsewhere, as a reader undoes them at a glance."""
    half = len(value) // 2
    return {
        "upper": f"note: {value.upper()}\n",
        "lower": f"note: {value.lower()}\n",
        "percent": f"https://svc.example/login?pw={quote(value, safe='')}&x=1\n",
        "percent-plus": f"form body: pw={quote(value, safe='').replace('%20', '+')}\n",
        "json": "{\"note\": " + json.dumps(value) + "}\n",
        "split-line": f"value: {value[:half]}\n    {value[half:]}\n",
        "split-concat": f'pw = "{value[:half]}" +\n     "{value[half:]}"\n',
        "bare-ssn": f"case ref {number.replace('-', '')} closed\n",
        "ssn-spaced": f"case ref {number.replace('-', ' ')} closed\n",
        "bare-account": f"wire to {account} today\n",
    }


def _survives(clean: str, original: str, value: str, number: str, account: str) -> bool:
    """Whether a reader still gets the value (or a number) from a form: unchanged, or a tell-tale piece of it left."""
    if clean == original or "[REDACTED:" not in clean:
        return True
    folded = clean.casefold()
    pieces = [value[:5], value[-5:], number[-4:], account[-4:]]
    return any(piece.casefold() in folded for piece in pieces if piece.casefold() in original.casefold())


class TransformedCopyTests(unittest.TestCase):
    def test_at_least_nine_of_ten_transformed_copies_go(self):
        value = password()[:6] + "/\"\\é" + password()[:5]
        number, account = ssn(), str(random.randint(10 ** 9, 10 ** 10 - 1))
        source = (f"DB_PASSWORD={value}\n\nname,ssn,account number\nAlice Smith,{number},{account}\n"
                  f"Bob Jones,{ssn()},{random.randint(10 ** 9, 10 ** 10 - 1)}\n")
        forms = transformed(value, number, account)
        sweep = Sweep(self, access="").run({"src.csv": source, **{f"{name}.txt": text for name, text in forms.items()}})
        self.assertNotIn(value, sweep.text_of("src.csv"))
        kept = [name for name in forms if _survives(sweep.text_of(f"{name}.txt"), forms[name], value, number, account)]
        self.assertLessEqual(len(kept), 1, kept)

    def test_look_alikes_of_transformed_copies_stay(self):
        value, number = password(), ssn()
        other = str(int(number.replace("-", "")) + 1)
        stays = {"other-number": f"case ref {other} closed\n",
                 "inside-word": f"token {value.upper()}X here\n",
                 "other-value": f"note: {password().upper()}\n",
                 "split-other": f"value: {value[:4]}\n    zz{value[4:]}\n"}
        sweep = Sweep(self, access="").run({"src.csv": f"DB_PASSWORD={value}\nname,ssn\nAl Smith,{number}\n",
                                            **{f"{name}.txt": text for name, text in stays.items()}})
        for name, text in stays.items():
            self.assertEqual(sweep.text_of(f"{name}.txt"), text, name)

    def test_transformed_copies_stay_within_readers(self):
        value = password()
        sweep = Sweep(self).run({"hr/db.env": f"DB_PASSWORD={value}\n",
                                 "public/g.txt": f"{value.upper()}\n{quote(value, safe='')}\n"})
        self.assertEqual(sweep.text_of("public/g.txt"), f"{value.upper()}\n{quote(value, safe='')}\n")


class ReaderRuleTests(unittest.TestCase):
    def test_subset_of_groups_is_subset_of_readers(self):
        self.assertTrue(may_take_from(frozenset({"hr"}), frozenset({"hr", "public"})))
        self.assertTrue(may_take_from(frozenset(), frozenset({"public"})))  # every-group readers only
        self.assertFalse(may_take_from(frozenset({"public"}), frozenset({"hr"})))
        self.assertFalse(may_take_from(frozenset({"hr", "public"}), frozenset({"hr"})))
        self.assertFalse(may_take_from(frozenset({"public"}), frozenset()))

    def test_one_matcher_per_target_group_set(self):
        sources = CopySources()
        sources.add(frozenset({"hr"}), {"Hr-Value-123": "r"})
        sources.add(frozenset({"public"}), {"Pub-Value-456": "r"})
        self.assertEqual(set(sources.values_for(frozenset({"public"}))), {"Pub-Value-456"})
        self.assertEqual(set(sources.values_for(frozenset())), {"Hr-Value-123", "Pub-Value-456"})
        self.assertIs(sources.matcher_for(frozenset({"hr"})), sources.matcher_for(frozenset({"hr"})))
        self.assertIsNone(sources.matcher_for(frozenset({"board"})))


if __name__ == "__main__":
    unittest.main()
