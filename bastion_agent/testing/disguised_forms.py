"""Planted forms of secrets and personal data as people and machines disguise them, with look-alikes that must stay.

Each case is a text holding fresh values (a new random draw every call), the
class it belongs to, and either the pieces that must not survive sanitizing
(``removed``) or nothing, when the whole text must come out unchanged
(``kept``). A piece survives when it can still be read in the output after a
reader undoes the disguise by eye: ``survives`` compares both with every
character that is not a letter or a digit (spaces, hyphens, combining marks,
cell delimiters) taken out, lowercased.

The bench (``bench/sanitize/sanitize_forms.py``) prints the counts per class; the
tests (``sanitizing/test_forms.py``) assert each case.
"""

from __future__ import annotations

import base64
import random
import string
import unicodedata
from dataclasses import dataclass, field

CLASSES = ("disguised", "ocr-pdf", "columns", "vertical", "names", "must-keep")


@dataclass(frozen=True)
class Case:
    """One planted text: its class, a short name, the text, what must go (empty: the text must stay whole)."""

    cls: str
    name: str
    text: str
    pieces: tuple[str, ...] = field(default_factory=tuple)
    ocr: bool = False  # the text is an OCR page (pages.py marks those in the listing)

    @property
    def keep(self) -> bool:
        return not self.pieces


def folded(text: str) -> str:
    """What a reader's eye keeps of a text: letters and digits only, lowercased, marks dropped."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text).lower()
                   if ch.isalnum() and not unicodedata.combining(ch))


def survives(case: Case, output: str) -> bool:
    """Does the output still show the case's text (a kept case) or any of its pieces (a removed one)?"""
    if case.keep:
        return output == case.text
    seen = folded(output)
    return any(folded(piece) in seen for piece in case.pieces)


class Draw:
    """Fresh values: every call draws new ones (``seed`` replays a run)."""

    def __init__(self, seed: int | None = None):
        self.seed = random.SystemRandom().randrange(1 << 32) if seed is None else seed
        self.rng = random.Random(self.seed)

    def digits(self, n: int) -> str:
        return str(self.rng.randint(1, 9)) + "".join(self.rng.choice(string.digits) for _ in range(n - 1))

    def word(self, n: int, alphabet: str = string.ascii_lowercase) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def password(self) -> str:
        return self.word(4, string.ascii_uppercase) + self.word(4) + self.digits(4) + self.rng.choice("!#%*")

    def aws(self) -> str:
        return "AKIA" + self.word(16, string.ascii_uppercase + "234567")

    def ssn(self) -> str:
        area = self.rng.choice([n for n in range(101, 899) if n != 666])
        return f"{area:03d}-{self.rng.randint(10, 99):02d}-{self.rng.randint(1000, 9999):04d}"

    def iban(self, country: str = "DE", length: int = 18) -> str:
        bban = self.digits(length)
        moved = bban + "".join(str(ord(c) - 55) for c in country) + "00"
        return f"{country}{98 - int(moved) % 97:02d}{bban}"

    def bad_iban(self) -> str:
        """An IBAN with one misread digit, whose digits hold no card number either (a typed page keeps it whole)."""
        from bastion_agent.sanitizing.validators import CARD_PREFIXES, luhn_ok

        while True:
            good = self.iban()
            last = good[-1]
            bad = good[:-1] + self.rng.choice([c for c in string.digits if c != last])  # one misread digit
            runs = (bad[2:][start:start + size] for start in range(len(bad) - 2) for size in range(13, 20))
            if not any(len(run) >= 13 and CARD_PREFIXES.match(run) and luhn_ok(run) for run in runs):
                return bad

    def name(self) -> tuple[str, str]:
        first = self.rng.choice(["Marta", "Jonas", "Ilse", "Tomasz", "Giulia", "Rafael", "Ingrid", "Oskar", "Lena",
                                 "Bruno", "Agnes", "Pavel", "Chiara", "Nils", "Beatriz", "Emil"])
        last = self.rng.choice(["Kowalczyk", "Lindqvist", "Moretti", "Carvalho", "Brandt", "Nowicki", "Sandberg",
                                "Ferreira", "Esposito", "Halvorsen", "Wojcik", "Bergstrom", "Rinaldi", "Teixeira"])
        return first, last + self.word(2)

    def email(self) -> tuple[str, str, str]:
        return self.word(6) + "." + self.word(5), self.word(7), self.rng.choice(["com", "org", "net", "de"])


def grouped(value: str, size: int = 4, sep: str = " ") -> str:
    return sep.join(value[i:i + size] for i in range(0, len(value), size))


def spaced(text: str) -> str:
    """A PDF that draws each character on its own: one space between letters, two between words."""
    return "  ".join(" ".join(word) for word in text.split(" "))


def disguised(d: Draw) -> list[Case]:
    key, pw, ssn, iban = d.aws(), d.password(), d.ssn(), d.iban()
    local, host, tld = d.email()
    under = "".join(ch + "\u0332" for ch in key)
    struck = "".join(ch + "\u0336" for ch in ssn)
    pw_b64 = base64.b64encode(f"password={pw}".encode()).decode()
    key2, key3 = d.aws(), d.aws()
    cells = "".join(f"<td>{digit}</td>" for digit in ssn.replace("-", ""))
    cells_tab = "\t".join(ssn.replace("-", ""))
    iban2 = d.iban()
    user = d.word(6)
    return [
        Case("disguised", "underline-marks", f"Deploy key {under} for the runner.", (key,)),
        Case("disguised", "strike-marks", f"SSN {struck} on file.", (ssn,)),
        Case("disguised", "strike-marks-key", "key: " + "".join(ch + "\u0336" for ch in key2), (key2,)),
        Case("disguised", "iban-hyphens", f"Wire to {grouped(iban, 4, '-')} by Friday.", (iban,)),
        Case("disguised", "iban-hyphen-break", f"Account: {iban[:12]}-\n{iban[12:]} (main)", (iban,)),
        Case("disguised", "iban-grouped-hyphen-break",
             f"IBAN {grouped(iban2[:12])}-\n{grouped(iban2[12:])}\nthanks", (iban2,)),
        Case("disguised", "aws-three-lines", f"aws key:\n{key[:7]}\n{key[7:14]}\n{key[14:]}\n", (key,)),
        Case("disguised", "aws-concat-python", f'KEY = "{key3[:4]}" + "{key3[4:12]}" + "{key3[12:]}"\n', (key3,)),
        Case("disguised", "aws-concat-js", f"const k = '{key[:8]}' +\n  '{key[8:]}';", (key,)),
        Case("disguised", "ssn-html-cells", f"<table><tr><th>SSN</th>{cells}</tr></table>", (ssn,)),
        Case("disguised", "ssn-tab-cells", f"SSN\t{cells_tab}\n", (ssn,)),
        Case("disguised", "base64-password", f"The config blob is {pw_b64} if you need it.", (pw, pw_b64)),
        Case("disguised", "email-at-dot", f"Write to {local} (at) {host} (dot) {tld} please.",
             (f"{local}{host}",)),
        Case("disguised", "email-brackets", f"Contact: {local}[at]{host}[dot]{tld}", (f"{local}{host}",)),
        Case("disguised", "email-bracket-at", f"mail {local} [at] {host}.{tld} for access", (f"{local}{host}",)),
        Case("disguised", "email-AT-DOT", f"{local} AT {host} DOT {tld}", (f"{local}{host}",)),
        Case("disguised", "underline-email", "".join(ch + "\u0332" for ch in f"{local}@{host}.{tld}"), (f"{local}{host}",)),
        Case("disguised", "strike-password", "password: " + "".join(ch + "\u0336" for ch in pw), (pw,)),
        Case("disguised", "iban-dots", f"IBAN {grouped(iban2, 4, '.')}", (iban2,)),
        Case("disguised", "aws-implicit-concat", f'key = ("{key2[:4]}" "{key2[4:12]}" "{key2[12:]}")\n', (key2,)),
        Case("disguised", "aws-php-concat", f"$k = '{key3[:4]}' . '{key3[4:12]}' . '{key3[12:]}';", (key3,)),
        Case("disguised", "aws-java-lines", f'String k = "{key[:6]}" +\n    "{key[6:13]}" +\n    "{key[13:]}";', (key,)),
        Case("disguised", "ssn-pipe-cells", "| SSN | " + " | ".join(ssn.replace("-", "")) + " |\n", (ssn,)),
        Case("disguised", "email-words", f"mail {local} at {host} dot {tld} today", (f"{local}{host}",)),
        Case("disguised", "base64-password-colon", "blob " + base64.b64encode(f"db_password: {pw}".encode()).decode(),
             (pw,)),
        Case("disguised", "pandas-password",
             f"   user      password   role\n0  {user}  {pw}  admin\n1  {d.word(5)}   {d.password()}   viewer\n",
             (pw,)),
        Case("disguised", "jupyter-password",
             f'"text/plain": [\n "  login  password\\n",\n "0 {user}  {pw}\\n"\n]', (pw,)),
        Case("disguised", "jupyter-last-line",
             f'   "text/plain": [\n    "    user      password\\n",\n    "0  {user}  {pw}"\n   ]', (pw,)),
    ]


def ocr_pdf(d: Draw) -> list[Case]:
    key = d.aws()
    broken = key[:11] + "." + key[11:]
    ssn, ssn2, ssn3, iban = d.ssn(), d.ssn(), d.ssn(), d.iban()
    return [
        Case("ocr-pdf", "ocr-iban-checksum", f"Bankverbindung IBAN {grouped(d_bad := d.bad_iban())}\n", (d_bad,), ocr=True),
        Case("ocr-pdf", "ocr-aws-stray-dot", f"access key {broken} rotated\n", (key[:11], key[11:]), ocr=True),
        Case("ocr-pdf", "letter-spaced-ssn", spaced(f"SSN {ssn}") + "\n", (ssn,)),
        Case("ocr-pdf", "letter-spaced-one-gap", " ".join(f"SSN{ssn2}") + "\n", (ssn2,)),
        Case("ocr-pdf", "letter-spaced-value", "SSN: " + " ".join(ssn3) + "\n", (ssn3,)),
        Case("ocr-pdf", "letter-spaced-iban", spaced(f"IBAN {iban}") + "\n", (iban,)),
    ]


def columns(d: Draw) -> list[Case]:
    first, last = d.name()
    dob = f"{d.rng.randint(1, 28):02d}/{d.rng.randint(1, 12):02d}/{d.rng.randint(1950, 2001)}"
    passport = d.word(2, string.ascii_uppercase) + d.digits(7)
    cf = d.word(6, string.ascii_uppercase) + d.digits(2) + "A" + d.digits(2) + "H" + d.digits(3) + "X"
    cpf = f"{d.digits(3)}.{d.digits(3)}.{d.digits(3)}-{d.digits(2)}"
    street = f"Rua {d.word(7).title()} {d.rng.randint(1, 999)}"
    pw, pesel, haslo = d.password(), d.digits(11), d.password()
    return [
        Case("columns", "name-qualifier", f"ID,\"Name (Last, First)\",Team\n{d.digits(4)},\"{last}, {first}\",ops\n",
             (last,)),
        Case("columns", "dob-qualifier", f"id\tDate of Birth (DD/MM/YYYY)\tteam\n{d.digits(3)}\t{dob}\tops\n", (dob,)),
        Case("columns", "passport-qualifier", f"staff;Passport # (expiry);desk\n{d.digits(3)};{passport} (2031);4\n",
             (passport,)),
        Case("columns", "codice-fiscale", f"Nome\tCodice fiscale\tReparto\n{first}\t{cf}\tvendite\n", (cf,)),
        Case("columns", "cpf", f"Cliente,CPF,Cidade\n{d.digits(3)},{cpf},Recife\n", (cpf,)),
        Case("columns", "endereco", f"Código\tEndereço\tCidade\n{d.digits(3)}\t{street}\tPorto\n", (street,)),
        Case("columns", "losenord", f"Användare,Lösenord,Roll\n{d.word(6)},{pw},admin\n", (pw,)),
        Case("columns", "pesel", f"Imię;PESEL;Dział\n{first};{pesel};IT\n", (pesel,)),
        Case("columns", "haslo", f"| Login | Hasło | Rola |\n|---|---|---|\n| {d.word(5)} | {haslo} | user |\n",
             (haslo,)),
        Case("columns", "cognome", f"Nome\tCognome\tTelefono\n{first}\t{last}\t+39 {d.digits(9)}\n", (last,)),
        *[Case("columns", f"header-{header}", f"Ref\t{header}\tNote\n{d.digits(3)}\tVALUE\tok\n".replace("VALUE", value),
               (value,)) for header, value in _foreign_cells(d)],
    ]


def _foreign_cells(d: Draw) -> list[tuple[str, str]]:
    """(header, a fresh value) of personal columns in other languages and with qualifiers."""
    first, last = d.name()
    return [
        ("Indirizzo", f"Via {d.word(6).title()} {d.rng.randint(1, 200)}"),
        ("Data di nascita (gg/mm/aaaa)", f"{d.rng.randint(10, 28)}/0{d.rng.randint(1, 9)}/19{d.rng.randint(50, 99)}"),
        ("Cellulare", f"+39 3{d.digits(9)}"),
        ("Nome completo", f"{first} {last}"),
        ("Senha", d.password()),
        ("Data de nascimento", f"{d.rng.randint(10, 28)}-0{d.rng.randint(1, 9)}-19{d.rng.randint(50, 99)}"),
        ("Telefone", f"+55 11 9{d.digits(8)}"),
        ("Morada", f"Rua {d.word(6).title()} {d.rng.randint(1, 300)}"),
        ("Personnummer", f"19{d.rng.randint(50, 99)}0{d.rng.randint(1, 9)}1{d.rng.randint(0, 9)}-{d.digits(4)}"),
        ("Efternamn", last),
        ("Adress", f"{d.word(7).title()}gatan {d.rng.randint(1, 90)}"),
        ("Födelsedatum", f"19{d.rng.randint(50, 99)}-0{d.rng.randint(1, 9)}-1{d.rng.randint(0, 9)}"),
        ("Nazwisko", last),
        ("Adres", f"ul. {d.word(7).title()} {d.rng.randint(1, 90)}"),
        ("Numer telefonu", f"+48 {d.digits(9)}"),
        ("Data urodzenia", f"{d.rng.randint(10, 28)}.0{d.rng.randint(1, 9)}.19{d.rng.randint(50, 99)}"),
        ("Numer dowodu", d.word(3, string.ascii_uppercase) + d.digits(6)),
        ("Phone (mobile)", f"+44 7{d.digits(9)}"),
        ("E-mail (work)", f"{d.word(6)}@{d.word(6)}.com"),
        ("Address [home]", f"{d.rng.randint(1, 99)} {d.word(6).title()} Road"),
        ("IBAN (primary)", d.iban()),
        ("Employee ID (HR)", d.word(2, string.ascii_uppercase) + d.digits(6)),
    ]


def vertical(d: Draw) -> list[Case]:
    ssn, pw, dob = d.ssn().replace("-", ""), d.password(), f"{d.rng.randint(1950, 2001)}-0{d.rng.randint(1, 9)}-1{d.rng.randint(0, 9)}"
    first, last = d.name()
    passport = d.word(2, string.ascii_uppercase) + d.digits(7)
    pin = d.digits(4)
    return [
        Case("vertical", "tsv-label-value", f"Employee record\nSSN\t{ssn}\nDepartment\tSales\n", (ssn,)),
        Case("vertical", "html-th-td", f"<table><tr><th>Password</th><td>{pw}</td></tr></table>", (pw,)),
        Case("vertical", "html-dl", f"<dl><dt>Date of birth</dt><dd>{dob}</dd></dl>", (dob,)),
        Case("vertical", "docx-rows", f"Full name\t{first} {last}\nPassport number\t{passport}\n", (last, passport)),
        Case("vertical", "xlsx-sheet", f"# Sheet: Staff\nField\tValue\nPIN\t{pin}\nOffice\tBerlin\n", (pin,)),
        Case("vertical", "pipe-label-value", f"| Field | Value |\n|---|---|\n| Password | {pw} |\n", (pw,)),
        Case("vertical", "dl-as-extracted", f"Profile\nDate of birth\n{dob}\nPassport number\n{passport}\n", (dob, passport)),
        Case("vertical", "xlsx-as-extracted", f"Sheet 1\nFull name\t{first} {last}\nSSN\t{ssn}\nPIN\t{pin}\n",
             (last, ssn, pin)),
    ]


def marked_names(d: Draw) -> list[Case]:
    cases = []
    markers = [
        ("reporter", "Reporter: {f} {l}\nStatus: open\n"),
        ("assignee", "Assignee: {f} {l}\nPriority: high\n"),
        ("attendees", "Attendees: {f} {l}, {f2} {l2}\nAgenda: budget\n"),
        ("chair", "Chair: {f} {l}\n"),
        ("minutes-by", "Minutes taken by: {f} {l}\n"),
        ("hi-and", "Hi {f} and {f2},\nthe build is green.\n"),
        ("dash-signature", "See you tomorrow.\n-- {f} {l}\n"),
        ("via-teams", "{f} {l} via Teams <noreply@email.teams.microsoft.com>\n"),
        ("chat-speaker", "[09:14] {f} {l}: can you restart the job?\n"),
        ("irc-nick", "<{nick}> anyone seen the deploy logs?\n"),
        ("reported-by", "Reported by: {f} {l}\nComponent: billing\n"),
        ("assigned-to", "Assigned to: {f} {l}\n"),
        ("owner", "Owner: {f} {l}\nDue: Friday\n"),
        ("present-list", "Present: {f} {l}, {f2} {l2} and Ana Costa\n"),
        ("facilitator", "Facilitator: {f} {l}\n"),
        ("chat-am", "[9:14 AM] {f} {l}: pushed the fix\n"),
        ("chat-date", "[2024-03-02 09:14] {f} {l}: lgtm\n"),
        ("irc-stamped", "[09:14] <{nick}> build is red again\n[09:15] <bot> ok\n"),
        ("hallo-und", "Hallo {f} und {f2},\nanbei der Bericht.\n"),
        ("ciao", "Ciao {f},\nti mando il file.\n"),
        ("ola", "Olá {f},\nsegue o arquivo.\n"),
        ("hej", "Hej {f}!\nHär är filen.\n"),
        ("czesc", "Cześć {f},\nw załączniku plik.\n"),
        ("pozdrawiam", "Plik w załączniku.\nPozdrawiam,\n{f} {l}\n"),
        ("atenciosamente", "Segue o relatório.\nAtenciosamente,\n{f} {l}\n"),
        ("cordiali-saluti", "In allegato il file.\nCordiali saluti,\n{f} {l}\n"),
        ("halsningar", "Filen bifogas.\nMed vänliga hälsningar,\n{f} {l}\n"),
        ("signature-break", "Thanks!\n-- \n{f} {l}\n{f}.{l}@corpmail.net\n"),
        ("via-slack", "{f} {l} via Slack <notifications@slack.com>\n"),
        ("cc-minutes", "Apologies: {f} {l}\n"),
    ]
    for name, template in markers:
        (f, l), (f2, l2) = d.name(), d.name()
        nick = f.lower() + d.word(2)
        text = template.format(f=f, l=l, f2=f2, l2=l2, nick=nick)
        pieces = {"hi-and": (f, f2), "irc-nick": (nick,), "irc-stamped": (nick,), "attendees": (l, l2),
                  "present-list": (l, l2), "hallo-und": (f, f2), "ciao": (f,), "ola": (f,), "hej": (f,),
                  "czesc": (f,)}.get(name, (l,))
        cases.append(Case("names", name, text, pieces))
    return cases


def must_keep(d: Draw) -> list[Case]:
    n = d.rng.randint
    return [
        Case("must-keep", "pass-fail", f"test\tpass\tfail\nparser\t{n(10, 99)}\t{n(0, 9)}\nlexer\t{n(10, 99)}\t0\n"),
        Case("must-keep", "result-pass", f"case,result\nlogin_ok,Pass\nlogout,Fail\n"),
        Case("must-keep", "gpio-pin", f"Signal\tPin\tDirection\nLED\t{n(2, 27)}\tout\nBTN\t{n(2, 27)}\tin\n"),
        Case("must-keep", "register-address", f"Register | Address | Reset\n---|---|---\nCTRL | 0x{n(0, 255):02X}00 | 0x0\n"
                                               f"STAT | 0x{n(0, 255):02X}04 | 0x1\n"),
        Case("must-keep", "mobile-os", f"Platform,Mobile,Desktop\nShare,{n(10, 80)}%,{n(10, 80)}%\n"),
        Case("must-keep", "sin-trig", f"x\tsin\tcos\n0.5\t0.4794\t0.8776\n1.0\t0.8415\t0.5403\n"),
        Case("must-keep", "parent-tree", f"node,parent,depth\n{n(10, 99)},{n(1, 9)},2\n{n(10, 99)},{n(1, 9)},3\n"),
        Case("must-keep", "token-count", f"model\ttoken\tlatency\nsmall\t{n(100, 4000)}\t{n(5, 90)}ms\n"),
        Case("must-keep", "pan-camera", f"shot,pan,tilt\n1,{n(-90, 90)},{n(-30, 30)}\n2,{n(-90, 90)},0\n"),
        Case("must-keep", "pass-number", f"pass: {n(1000, 9999)}\n"),
        Case("must-keep", "tokens-number", f"tokens: {n(1024, 8192)}\n"),
        Case("must-keep", "name-dashboard", "Name: Quarterly Revenue Dashboard\nOwner team: analytics\n"),
        Case("must-keep", "prepared-by", "Prepared by: Finance Operations\nDate: 2024-03-01\n"),
        Case("must-keep", "iban-typed-bad", f"Order ref DE{n(10, 99)} {d.digits(4)} but no account.\n"),
        Case("must-keep", "spaced-words", "T A B L E  O F  C O N T E N T S\n"),
        Case("must-keep", "plus-strings", 'msg = "Hello, " + name + "!"\n'),
        Case("must-keep", "at-in-prose", "We met (at) the office and left (dot) by five.\n"),
        Case("must-keep", "base64-image", "icon: iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk\n"),
    ]


def all_cases(d: Draw) -> list[Case]:
    return [*disguised(d), *ocr_pdf(d), *columns(d), *vertical(d), *marked_names(d), *must_keep(d)]
