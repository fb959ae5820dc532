"""Columns by their header: a cell is personal or secret because of the column it stands in.

``staff.csv`` with the header ``name,ssn,phone,password`` holds bare
``536228710``, ``2025550143`` and passwords of any shape: no detector that
looks at a value alone can tell them from an order number, but the header
says what they are. This module finds tables in a text, reads their header
row, and gives back the span of every cell below a header that names a
secret or personal field (``HEADERS``), whatever the cell holds.

Tables it recognises (the readers emit theirs in the first form, see
docs/extract.md):

- tab-separated lines, the header row first: TSV files, and every table the
  readers flatten (xlsx and ods sheets, HTML, docx). A block ends at a blank
  line;
- CSV with commas or semicolons, double-quoted cells (a quoted cell may
  hold the delimiter, ``""`` and line breaks). A block ends at a blank line,
  and it is a table only when its first data row has as many cells as the
  header (prose with commas rarely has);
- Markdown pipe tables (the ``|---|`` line after the header) and ASCII grid
  tables (``+----+`` rules).

Cost: one regular-expression pass finds header words that stand alone in a
cell (after a delimiter or at a line start); the prefix of the pattern is a
delimiter, which the engine skips to in C. Only a table whose header names a
sensitive column is read row by row, each row once; quoted cells are
bounded (``MAX_QUOTED``) and the next quote of the text is found once per
position, so an unterminated quote or a header of a hundred thousand
columns costs time linear in the text.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata

from bastion_agent.sanitizing.copies import lead_pass, trie_pattern

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 6

# rule id -> header words (after ``normal_header``: lowercase, NFKC, separators
# as single spaces, a trailing ":" / "#" / "no" / "number" form listed here).
_NUMBER = r"(?: (?:no|nr|num|number|nummer|numero|numéro|#))?"
HEADERS: dict[str, str] = {
    "password-column": (
        r"(?:(?:user|account|login|db|database|admin|root|wifi|wi fi|wlan|initial|temp|temporary|default|new|old|"
        r"current|one time|app|vpn|email|mail|windows|ad|domain|portal|system|encrypted)s? )?"
        r"(?:password|passwort|passwd|pass word|pass|pwd|pw|passphrase|passcode|kennwort|mot de passe|mdp|"
        r"wachtwoord|contraseña|contrasena|clave|credential|credentials|secret|api key|apikey|access token|token|"
        r"lösenord|losenord|hasło|haslo|senha|parola d ordine|parola chiave|salasana|adgangskode|passord)s?"
    ),
    "pin-column": r"(?:(?:card|sim|phone|door|alarm|safe|bank) )?(?:pin|pin code|pincode|pin nummer|puk|cvv|cvc|cvv2|security code)" + _NUMBER,
    "ssn-column": (
        r"(?:ssn|ss" + _NUMBER + r"|social security" + _NUMBER + r"|social security id|sin|nino|ni" + _NUMBER
        + r"|national insurance" + _NUMBER + r"|sozialversicherungsnummer|sv nummer|svnr|versicherungsnummer"
        r"|numéro de sécurité sociale|numero de securite sociale|nir|bsn|burgerservicenummer|sofinummer"
        r"|número de seguridad social|nss|personnummer|personal identity number|pesel|numer pesel"
        r"|codice fiscale|cod fiscale|cpf|nº cpf|n cpf|cnpj|henkilötunnus|cpr|cpr nummer"
        r"|fødselsnummer|fodselsnummer|numero di previdenza sociale)"
    ),
    "phone-column": (
        r"(?:(?:home|work|office|private|personal|business|direct|main|alt|alternate|alternative|emergency|contact|"
        r"day|evening|primary|secondary|landline|private) )?"
        r"(?:phone|phones|telephone|tel|mobile|mobile phone|cell|cellphone|cell phone|handy|telefon|telefonnummer|"
        r"mobilnummer|handynummer|rufnummer|téléphone|telephone|portable|mobiel|telefoon|telefoonnummer|teléfono|"
        r"telefono|móvil|movil|celular|fax|whatsapp|telefone|telemóvel|telemovel|cellulare|numer telefonu|"
        r"komórka|komorka|mobiltelefon|mobilnummer)" + _NUMBER
    ),
    "email-column": (
        r"(?:(?:work|private|personal|business|contact|primary|secondary|home|alt|alternate) )?"
        r"(?:e mail|email|mail|e mail address|email address|mail address|e mail adresse|email adresse|mailadresse|"
        r"e mailadresse|courriel|adresse e mail|adresse mail|e mailadres|correo|correo electrónico|correo electronico|"
        r"e post|e postadress|posta elettronica|indirizzo email|adres e mail|correio eletrônico|correio electrónico)"
    ),
    "account-column": (
        r"(?:iban|bic|swift|iban" + _NUMBER + r"|(?:bank )?account" + r" (?:no|nr|num|number|#)|bank account|"
        r"account number|kontonummer|bankverbindung|rekeningnummer|rekening|numéro de compte|cuenta|número de cuenta|"
        r"routing" + _NUMBER + r"|sort code|bank details)"
    ),
    "card-column": (
        r"(?:(?:credit |debit )?card" + r" (?:no|nr|num|number|#)|credit card|card number|cc" + _NUMBER
        + r"|pan|kreditkarte|kreditkartennummer|kartennummer|numéro de carte|carte bancaire|tarjeta)"
    ),
    "date-of-birth": (
        r"(?:date of birth|birth date|birthdate|birthday|dob|d o b|born|geburtsdatum|geburtstag|geb|"
        r"date de naissance|né le|née le|naissance|geboortedatum|geboren|fecha de nacimiento|fecha nacimiento|"
        r"data di nascita|data de nascimento|data nascimento|födelsedatum|fodelsedatum|data urodzenia|"
        r"syntymäaika|fødselsdato)"
    ),
    "address-column": (
        r"(?:(?:home|street|postal|mailing|residential|private|billing|shipping|permanent|current|delivery) )?"
        r"(?:address|addr|address line ?\d|street|street address|adresse|anschrift|wohnadresse|straße|strasse|"
        r"adres|woonadres|adresse postale|dirección|direccion|domicilio|wohnort|residence|endereço|endereco|morada|"
        r"indirizzo|residenza|adress|gatuadress|postadress|adres zamieszkania|ulica|logradouro)"
    ),
    "id-number-column": (
        r"(?:passport" + _NUMBER + r"|passport id|id" + r" (?:no|nr|num|number|#)|id card" + _NUMBER
        + r"|identity card" + _NUMBER + r"|national id" + _NUMBER + r"|personalausweis" + _NUMBER
        + r"|personalausweisnummer|ausweisnummer|ausweis" + _NUMBER + r"|reisepass" + _NUMBER
        + r"|reisepassnummer|driver s licen[cs]e" + _NUMBER + r"|drivers licen[cs]e" + _NUMBER
        + r"|driving licen[cs]e" + _NUMBER + r"|licen[cs]e number|führerschein" + _NUMBER
        + r"|tax id|tax" + r" (?:no|nr|number)|tin|steuer id|steuernummer|steueridentifikationsnummer"
        r"|numéro d identité|carte d identité|dni|nie|nif|paspoort" + _NUMBER + r"|paspoortnummer|pasaporte"
        r"|employee id|staff id|personnel" + _NUMBER + r"|personalnummer|patient id|mrn|medical record" + _NUMBER
        + r"|member id|membership" + _NUMBER + r"|customer id|insurance" + _NUMBER + r"|policy" + _NUMBER
        + r"|passaporto|passaporte|numer paszportu|paszport|dowód osobisty|numer dowodu|carta d identità"
        r"|documento|documento di identità|carteira de identidade|nip|regon|partita iva|körkort)"
    ),
    "person-name": (
        r"(?:full name|fullname|first name|firstname|last name|lastname|surname|given name|given names|family name|"
        r"middle name|maiden name|forename|forenames|legal name|display name|preferred name|real name|"
        r"employee|employee name|employees|staff|staff member|staff name|patient|patient name|customer name|"
        r"client name|contact|contact name|contact person|person|applicant|applicant name|candidate|candidate name|"
        r"tenant|tenant name|account holder|cardholder|card holder|name on card|beneficiary|guardian|"
        r"parent|parent name|student|student name|pupil|member name|insured|policyholder|policy holder|"
        r"signatory|next of kin|emergency contact|spouse|child|"
        r"vorname|nachname|familienname|mitarbeiter|mitarbeiterin|patientin|ansprechpartner|ansprechpartnerin|"
        r"prénom|prenom|nom de famille|nom complet|employé|employe|salarié|salarie|"
        r"voornaam|achternaam|volledige naam|medewerker|patiënt|"
        r"apellido|apellidos|nombre completo|empleado|paciente|"
        r"cognome|nome completo|nome e cognome|dipendente|sobrenome|apelido|funcionário|funcionario|"
        r"förnamn|fornamn|efternamn|fullständigt namn|anställd|nazwisko|imię|imie|imię i nazwisko|pracownik)"
    ),
}
# Headers that name a person only in a table about people: a bare "name" column
# of a product list holds product names. These count as person-name columns when
# another column of the same header is personal (e-mail, phone, ssn, address...).
AMBIGUOUS_NAME = re.compile(r"(?:name|names|nom|naam|nombre|nome|namn|customer|client|owner|holder|member|user name|"
                            r"kunde|kundin|client e|cliente|klant|assignee|author|manager)")
# Rule ids of columns that hold a person's data (what makes a bare "name" a person's).
PERSONAL_COLUMNS = frozenset({"ssn-column", "phone-column", "email-column", "account-column", "card-column",
                              "date-of-birth", "address-column", "id-number-column", "person-name"})
# Columns whose every non-empty cell goes, even one of punctuation only ("!#$%&*").
ANY_CELL = frozenset({"password-column", "pin-column"})

_COMPILED = [(rule, re.compile(pattern)) for rule, pattern in HEADERS.items()]

MAX_HEADER_CELL = 64      # characters of a header cell (longer: it is prose, not a header)
MAX_HEADER_WORDS = 6
MAX_QUOTED = 65_536       # characters of one quoted cell; a longer "quote" is read as plain text
PLACEHOLDER_CELL = re.compile(r"\[REDACTED:[a-z0-9\-]{1,63}\]")

# The words a sensitive header may start with (the header vocabulary's first words).
FIRST_WORDS = frozenset(
    re.match(r"[^\W\d_]+", alternative).group()
    for pattern in (*HEADERS.values(), AMBIGUOUS_NAME.pattern)
    for alternative in re.findall(r"(?:^|(?<=[(|?:]))[^\W\d_][^|()?]*", pattern.replace("(?:", "("))
) - {"no", "nr", "num", "number", "numero", "nummer", "numéro", "número"}
# The delimiter of a space-aligned table (a pandas frame in a log, ``column -t``, a notebook's text/plain):
# two or more spaces between cells, a cell's words one space apart.
SPACED = "  "
SPACE_GAP = re.compile(r" {2,}|\t")
# One pass per delimiter: the first word of every cell that starts after it (spaces, a quote, "*" or "#"
# before it). A pattern led by a literal is skipped through at memchr speed, a class is not.
_LEADS = ("\n", "\t", ",", ";", "|", SPACED)
# The lead of each pass: a space-aligned table's cell follows two spaces after a cell, not an indentation
# (more spaces are the padding class's: a second ``*`` over spaces backtracks quadratically on blank runs).
_LEAD_PATTERNS = {d: re.escape(d) + (r"(?<=\S  )" if d == SPACED else "") for d in _LEADS}
# A tab is a lead and also padding: ``lead_pass`` reads a run of tabs once (a match may then lack its word).
_PADDING = r"[ \t\"'*#_]*"
_CELL_WORDS = tuple(lead_pass(_LEAD_PATTERNS[d], _PADDING, r"[^\W\d_]+", tab=d == "\t") for d in _LEADS)
# The same passes over the lowercased text with the vocabulary inside the pattern (a trie of FIRST_WORDS,
# then no further letter): prose has a comma every few words, and each match of ``_CELL_WORDS`` would cost
# a Python step to be looked up and, nearly always, dropped. Lowering keeps every character a letter or
# not a letter (checked over all of Unicode), so the matches are the ones ``_CELL_WORDS`` keeps.
_CELL_HEADER_WORDS = tuple(lead_pass(_LEAD_PATTERNS[d], _PADDING, trie_pattern(sorted(FIRST_WORDS)) + r"(?![^\W\d_])",
                                     tab=d == "\t") for d in _LEADS)
_SEPARATORS = re.compile(r"[\s_\-./'’()\[\]]+")
_PIPE_RULE = re.compile(r"[ \t]*\|?[ \t]*:?-{2,}:?[ \t]*(?:\|[ \t]*:?-{2,}:?[ \t]*)*\|?[ \t]*")
_GRID_RULE = re.compile(r"[ \t]*\+[\-=+: ]*\+[ \t]*")
_PIPE_SPLIT = re.compile(r"(?<!\\)\|")
_LETTER = re.compile(r"[^\W\d_]")


# Tables repeat their header cells and code its keys: each distinct cell is folded and looked up once.
# Only cells up to CACHED_CELL characters are kept, so the caches hold at most ~4096 short strings.
CACHED_CELL = 256


def normal_header(cell: str) -> str:
    """A header cell as the vocabulary spells it: NFKC, lowercase, separators as one space, no ":"."""
    return _cached_header(cell) if len(cell) <= CACHED_CELL else _normal_header(cell)


def _normal_header(cell: str) -> str:
    if cell.isascii():  # NFKC leaves ASCII as it is, and ASCII holds no format (Cf) character
        folded = cell.lower()
    else:
        folded = unicodedata.normalize("NFKC", cell).lower()
        folded = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    folded = folded.strip(" \t\"'*#:=")
    return _SEPARATORS.sub(" ", folded).strip()


_cached_header = functools.lru_cache(maxsize=4096)(_normal_header)


def column_rule(cell: str) -> str | None:
    """The rule id of a header cell that names a sensitive column (``"ssn-column"``...), else None."""
    return _cached_rule(cell) if len(cell) <= CACHED_CELL else _column_rule(cell)


def _column_rule(cell: str) -> str | None:
    header = normal_header(cell)
    if not header or len(header) > MAX_HEADER_CELL:
        return None
    header = header.removesuffix(" s")  # "employee's" after the separators
    for rule, pattern in _COMPILED:
        if pattern.fullmatch(header):
            return rule
    qualified = QUALIFIER.fullmatch(cell.strip())
    if qualified is not None:  # "Date of Birth (DD/MM/YYYY)", "Passport # (expiry)", "Name (Last, First)"
        if NAME_PARTS.search(qualified.group(2).lower()) and AMBIGUOUS_NAME.fullmatch(normal_header(qualified.group(1))):
            return "person-name"
        return column_rule(qualified.group(1))
    return None


# A header with a qualifier after it: the format, the unit, which part of a name.
QUALIFIER = re.compile(r"([^()\[\]]{1,48}?)[ \t]*[(\[]([^()\[\]]{1,40})[)\]][ \t:]*")
NAME_PARTS = re.compile(r"\b(?:last|first|given|family|surname|middle|full|nome|cognome|nachname|vorname|prénom)\b")


_cached_rule = functools.lru_cache(maxsize=4096)(_column_rule)


def column_findings(text: str, enabled: frozenset[str] | set[str] | dict[str, int],
                    lowered: str | None = None) -> list[tuple[int, int, str]]:
    """(start, end, rule id) of every cell under a sensitive header, for the rule ids in ``enabled``.

    ``lowered`` is ``text.lower()`` when the caller has it (one copy serves every pass).
    """
    if not enabled or len(text) < 8:
        return []
    found: list[tuple[int, int, str]] = []
    done = 0
    scanner = _Scanner(text)
    starts = _hit_positions(text, text.lower() if lowered is None else lowered)
    for position in starts:
        if position < done:
            continue
        newline = text.rfind("\n", done, position)
        line_start = newline + 1 if newline != -1 else done
        pair = _label_and_value(scanner, line_start, enabled) or _label_line(scanner, line_start, enabled)
        table = None if pair else _table_at(scanner, line_start, enabled)
        if table is None:
            found.extend(pair)
            line_end = text.find("\n", position)
            done = len(text) if line_end == -1 else line_end + 1
            continue
        end, cells = table
        found.extend(cells)
        done = max(end, position + 1)
    if "<t" in text or "<d" in text or "<T" in text or "<D" in text:
        found.extend(_markup_pairs(text, enabled))
    return found


# A label cell and its value in markup: ``<th>Password</th><td>...</td>``, ``<dt>Born</dt><dd>...</dd>``.
MARKUP_PAIR = re.compile(r"<(t[hd]|dt)\b[^<>]{0,128}>[ \t\r\n]{0,64}([^<>]{1,64}?)[ \t\r\n]{0,64}</\1>[ \t\r\n]{0,64}"
                         r"<(td|dd)\b[^<>]{0,128}>[ \t\r\n]{0,64}([^<>]{1,256}?)[ \t\r\n]{0,64}</\3>", re.I)


def _markup_pairs(text: str, enabled) -> list[tuple[int, int, str]]:
    """The values of the label/value pairs of HTML tables and definition lists (vertical records)."""
    found = []
    for pair in MARKUP_PAIR.finditer(text):
        rule = column_rule(pair.group(2))
        value = pair.group(4)
        if rule in enabled and value.strip() and values_fit(rule, normal_header(pair.group(2)), [value]):
            found.append((pair.start(4), pair.end(4), rule))
    return found


def _label_and_value(scanner: "_Scanner", line_start: int, enabled) -> list[tuple[int, int, str]]:
    """A vertical record's row: a label in the first cell, its value in the second (``SSN<TAB>...``).

    Docx and xlsx records, HTML ``<th>``/``<td>`` rows and transposed
    sheets come out of extract as two-cell lines. The line is a label and
    its value when the second cell is no header word and either holds
    something other than letters or the next line starts with a label too
    (a block of such pairs); otherwise it is the header of a two-column table.
    """
    text = scanner.text
    line_end = scanner.line_end(line_start)
    delimiter = "\t" if "\t" in text[line_start:line_end] else "|" if "|" in text[line_start:line_end] else None
    if delimiter is None:
        return []
    cells = [cell for cell in scanner.row(line_start, delimiter)[0] if cell[1] > cell[0]]
    if len(cells) != 2:
        return []
    label, value = text[cells[0][0]:cells[0][1]], text[cells[1][0]:cells[1][1]]
    rule = column_rule(label)
    if rule not in enabled or column_rule(value) or AMBIGUOUS_NAME.fullmatch(normal_header(value)):
        return []
    if PLACEHOLDER_CELL.fullmatch(value) or not values_fit(rule, normal_header(label), [value]):
        return []
    if not _letters_only(value) or _next_starts_with_label(scanner, line_end, delimiter):
        return [(cells[1][0], cells[1][1], rule)]
    return []


LABEL_LINE = re.compile(r"[^\W\d_][^\W\d_ .'’()/\-]*(?:[ .'’()/\-]+[^\W\d_][^\W\d_.'’()/\-]*)*[ \t]*(?:#|\(.{1,40}\))?:?")
MAX_LINE_VALUE = 80  # characters of a value on the line under its label (longer: a paragraph under a heading)


def _label_line(scanner: "_Scanner", line_start: int, enabled) -> list[tuple[int, int, str]]:
    """A definition list as extract renders ``<dl>``: a line that is a label alone, its value on the next line.

    The value is taken when it is short, is not itself a label, and either
    holds something other than letters or the line after it is a label too
    (the record goes on); a heading over a paragraph stays.
    """
    text = scanner.text
    line_end = scanner.line_end(line_start)
    label = text[line_start:line_end].rstrip(" \t\r")
    if not label[:1].isupper() or len(label) > MAX_HEADER_CELL or not LABEL_LINE.fullmatch(label):
        return []  # a label stands at the line's start, capitalised, alone ("PASS: #" is a log line)
    rule = column_rule(label)
    if rule not in enabled or line_end >= len(text):
        return []
    value_end = scanner.line_end(line_end + 1)
    start, end = _trim(text, line_end + 1, value_end)
    value = text[start:end]
    if start != line_end + 1 or not value or len(value) > MAX_LINE_VALUE or "\t" in value:
        return []  # the value stands at the line's start too: an indented line is a paragraph or code
    if value.endswith((".", ":", "{", ";")) or value[:1] in "-*#(/<" or len(value.split()) > MAX_HEADER_WORDS:
        return []
    if column_rule(value) or PLACEHOLDER_CELL.fullmatch(value) or not values_fit(rule, normal_header(label), [value]):
        return []
    if rule not in ANY_CELL and not any(ch.isalnum() for ch in value):
        return []
    if _letters_only(value) and not _next_line_is_label(scanner, value_end):
        return []
    return [(start, end, rule)]


def _next_line_is_label(scanner: "_Scanner", line_end: int) -> bool:
    text = scanner.text
    if line_end >= len(text):
        return True
    following = scanner.line_end(line_end + 1)
    line = text[line_end + 1:following].strip()
    return not line or column_rule(line) is not None


def _letters_only(value: str) -> bool:
    return all(ch.isalpha() or ch in " '-" for ch in value)


def _next_starts_with_label(scanner: "_Scanner", line_end: int, delimiter: str) -> bool:
    text = scanner.text
    if line_end >= len(text):
        return True  # the last line of its text: a record of one pair
    following = line_end + 1
    end = scanner.line_end(following)
    if not text[following:end].strip():
        return True  # the last line of its block
    first = text[following:end].split(delimiter)[0].strip(" |")
    return column_rule(first) is not None


def _hit_positions(text: str, lowered: str):
    """Where a line holding a header word in a cell of its own starts (or a hit inside it)."""
    if text[:1] not in "\t,;|\n":
        yield 0
    if len(lowered) == len(text):
        hits = [match.start() for pattern in _CELL_HEADER_WORDS for match in pattern.finditer(lowered)
                if match.start("word") >= 0]
    else:  # a character whose lower case is longer would shift the offsets: look each word up
        words = FIRST_WORDS
        hits = [match.start() for pattern in _CELL_WORDS for match in pattern.finditer(text)
                if match.group("word") is not None and match.group("word").lower() in words]
    hits.sort()
    for start in hits:
        yield start + 1 if text[start] == "\n" else start


class _Scanner:
    """Reads rows of one text; remembers where the next quote is, so unterminated quotes cost nothing twice."""

    def __init__(self, text: str):
        self.text = text
        self.quote_at = -1
        self.quote_from = 0

    def next_quote(self, position: int) -> int:
        """The first quote at or after ``position`` (the length of the text when none)."""
        if self.quote_from <= position <= self.quote_at:
            return self.quote_at  # no quote lies between the last question and its answer
        found = self.text.find('"', position)
        self.quote_from, self.quote_at = position, len(self.text) if found == -1 else found
        return self.quote_at

    def line_end(self, position: int) -> int:
        end = self.text.find("\n", position)
        return len(self.text) if end == -1 else end

    def row(self, position: int, delimiter: str) -> tuple[list[tuple[int, int]], int]:
        """The cells (spans, quotes and spaces excluded) of the row at ``position``, and where the next starts."""
        text = self.text
        end = self.line_end(position)
        if delimiter == "|":
            return _pipe_cells(text, position, end), end + 1
        if delimiter == SPACED:
            return _spaced_cells(text, position, end), end + 1
        if self.next_quote(position) >= end:  # no quote in the line: a plain split
            cells, start = [], position
            while True:
                cut = text.find(delimiter, start, end)
                if cut == -1:
                    cells.append(_trim(text, start, end))
                    return cells, end + 1
                cells.append(_trim(text, start, cut))
                start = cut + 1
        return self._quoted_row(position, delimiter)

    def _quoted_row(self, position: int, delimiter: str) -> tuple[list[tuple[int, int]], int]:
        text, cells, start = self.text, [], position
        length = len(text)
        while True:
            lead = start
            while lead < length and text[lead] in " \t":
                lead += 1
            if lead < length and text[lead] == '"':
                close = self._closing_quote(lead + 1)
                if close is not None:
                    after = close + 1
                    while after < length and text[after] in " \t\r":
                        after += 1
                    if after >= length or text[after] in (delimiter, "\n"):
                        cells.append((lead + 1, close))
                        if after >= length or text[after] == "\n":
                            return cells, after + 1
                        start = after + 1
                        continue
            end = self.line_end(start)
            cut = text.find(delimiter, start, end)
            if cut == -1:
                cells.append(_trim(text, start, end))
                return cells, end + 1
            cells.append(_trim(text, start, cut))
            start = cut + 1

    def _closing_quote(self, position: int) -> int | None:
        """The quote that closes a cell opened before ``position`` (``""`` is an escaped quote), or None."""
        limit = position + MAX_QUOTED
        while True:
            quote = self.next_quote(position)
            if quote >= len(self.text) or quote > limit:
                return None
            if self.text.startswith('""', quote):
                position = quote + 2
                continue
            return quote


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in " \t\r":
        start += 1
    while end > start and text[end - 1] in " \t\r":
        end -= 1
    return start, end


def _spaced_cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The cells of a space-aligned row: text between runs of two or more spaces (or tabs)."""
    cells, position = [], start
    for gap in SPACE_GAP.finditer(text, start, end):
        if gap.start() > position:
            cells.append(_trim(text, position, gap.start()))
        position = gap.end()
    if position < end and text[position:end].strip():
        cells.append(_trim(text, position, end))
    return cells


def _spaced_header(text: str, header: list[tuple[int, int]]) -> bool:
    """A space-aligned header names its columns in a word or three; ``fullname:  the file to compile`` is a
    docstring, ``DB_USER = 'app'    # Database username`` a setting and its comment."""
    return all(len(text[s:e].split()) <= 3 and not text[s:e].endswith((":", "=")) and "=" not in text[s:e]
               and not text[s:e].startswith(("#", "//", ";", "--")) for s, e in header)


def _aligned(header: list[tuple[int, int]], header_start: int, cells: list[tuple[int, int]], row_start: int,
             rules: dict[int, str], starts: list[int]) -> list[tuple[int, int, str, int]]:
    """The cells of a space-aligned row that stand under a sensitive header cell (their columns overlap).

    Header cells and row cells each never overlap among themselves, so the
    walk over overlapping pairs costs at most the two counts together;
    ``starts`` are the header cells' columns, computed once per table.
    """
    found = []
    for start, end in cells:
        left, right = start - row_start, end - row_start
        index = bisect.bisect_left(starts, right) - 1  # the last header cell starting before this cell ends
        while index >= 0 and header[index][1] - header_start > left:
            if index in rules:
                found.append((start, end, rules[index], index))
                break
            index -= 1
    return found


def _pipe_cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    line = text[start:end]
    stripped = line.strip()
    if not stripped or "|" not in stripped:
        return [_trim(text, start, end)] if stripped else []
    cells, position = [], 0
    bounds = [m.start() for m in _PIPE_SPLIT.finditer(line)]
    edges = [-1] + bounds + [len(line)]
    for first, last in zip(edges, edges[1:]):
        cells.append(_trim(text, start + first + 1, start + last))
    if stripped.startswith("|"):
        cells = cells[1:]
    if stripped.endswith("|") and not stripped.endswith("\\|"):
        cells = cells[:-1]
    return cells


def _delimiter_of(text: str, line_start: int, line_end: int) -> str | None:
    """The delimiter of a header line: the first of tab, pipe, semicolon, comma that it holds."""
    line = text[line_start:line_end]
    if "\t" in line:
        return "\t"
    if line.lstrip().startswith("|") and line.count("|") >= 2:
        return "|"
    if ";" in line and line.count(";") >= line.count(","):
        return ";"
    if "," in line:
        return ","
    if "|" in line:
        return "|"
    if SPACED in line.strip():
        return SPACED
    return None


def _continues_a_table(text: str, line_start: int, delimiter: str) -> bool:
    """Is the line before ``line_start`` a row of the same shape (as many filled fields)? A header starts its table.

    A title line above a CSV header ("Exported from HR, 2024") has another
    count, so the header under it is still read.
    """
    if line_start == 0:
        return False
    back = max(0, line_start - 1 - 4096)
    newline = text.rfind("\n", back, line_start - 1)
    if newline == -1 and back > 0:
        return True  # a line longer than that before it: not a header's neighbour we can vouch for
    previous = text[newline + 1:line_start - 1]
    if not previous.strip() or delimiter not in previous:
        return False
    line_end = text.find("\n", line_start)
    line = text[line_start:line_end if line_end != -1 else len(text)]
    return _filled(previous, delimiter) == _filled(line, delimiter)


def _filled(line: str, delimiter: str) -> int:
    """How many non-empty fields a line has, split naively (tab-aligned listings repeat their tabs)."""
    return sum(1 for field in line.split(delimiter) if field.strip())


def _header_rules(text: str, cells: list[tuple[int, int]]) -> dict[int, str] | None:
    """Column index -> rule id for a header row, or None when the row is not a header."""
    if sum(1 for start, end in cells if end > start) < 2:
        return None
    rules: dict[int, str] = {}
    ambiguous: list[int] = []
    for index, (start, end) in enumerate(cells):
        if end == start:
            continue
        if end - start > MAX_HEADER_CELL:
            return None
        cell = text[start:end]
        if not _LETTER.search(cell) or "@" in cell or "://" in cell or len(cell.split()) > MAX_HEADER_WORDS:
            return None
        rule = column_rule(cell)
        if rule is not None:
            rules[index] = rule
        elif AMBIGUOUS_NAME.fullmatch(normal_header(cell)):
            ambiguous.append(index)
    if ambiguous and any(rule in PERSONAL_COLUMNS for rule in rules.values()):
        rules.update((index, "person-name") for index in ambiguous)
    return rules or None


def _table_at(scanner: _Scanner, line_start: int, enabled) -> tuple[int, list] | None:
    """(where the table ends, its sensitive cells) when a header row starts at ``line_start``."""
    text = scanner.text
    line_end = scanner.line_end(line_start)
    delimiter = _delimiter_of(text, line_start, line_end)
    if delimiter is None:
        return None
    if _continues_a_table(text, line_start, delimiter):
        return None  # a row in the middle of a listing ("  email<TAB>package"), not its header
    header, position = scanner.row(line_start, delimiter)
    rules = _header_rules(text, header)
    if rules is None:
        return None
    rules = {index: rule for index, rule in rules.items() if rule in enabled}
    if not rules:
        return None
    width = len(header)
    first, starts = True, None
    found: list[tuple[int, int, str]] = []
    length = len(text)
    while position < length:
        line_end = scanner.line_end(position)
        line = text[position:line_end]
        if not line.strip(" \t\r"):
            break
        if delimiter == "|" and (_PIPE_RULE.fullmatch(line) or _GRID_RULE.fullmatch(line)):
            position = line_end + 1
            continue
        if delimiter != "|" and _GRID_RULE.fullmatch(line):
            position = line_end + 1
            continue
        cells, next_position = scanner.row(position, delimiter)
        if first and delimiter in ",;" and len(cells) != width:
            return None  # a comma in prose, not a table
        if delimiter == "|" and "|" not in line:
            break
        if delimiter == SPACED:
            if len(cells) < 2 or first and not _spaced_header(text, header):
                break
            if starts is None:
                starts = [start - line_start for start, _ in header]  # once per table: the header's columns
            found.extend(_aligned(header, line_start, cells, position, rules, starts))
        elif not _names_columns(text, cells):
            _take_cells(text, cells, rules, width, delimiter in ",;", found)
        first = False
        position = next_position
    if first:
        return None
    return position, _fitting(text, header, found)


# ``birth_date , gender,`` under ``first_name , last_name ,``: a SQL select list wrapped over lines, read as a table.
# A cell that is a column's name written as an identifier (snake_case, a sensitive column's name) says its row
# names more columns; a record never holds ``birth_date`` as a value.
COLUMN_IDENTIFIER = re.compile(r"[a-z]+(?:_[a-z]+)+")


def _names_columns(text: str, cells: list[tuple[int, int]]) -> bool:
    """Does this row name columns (an identifier of a sensitive column among its cells) rather than hold values?"""
    for start, end in cells:
        cell = text[start:end].strip()
        if COLUMN_IDENTIFIER.fullmatch(cell) and column_rule(cell) is not None:
            return True
    return False


def _fitting(text: str, header: list[tuple[int, int]], found: list[tuple[int, int, str, int]]) -> list:
    """The cells of the columns whose values fit their header (``values_fit``), as (start, end, rule)."""
    by_column: dict[int, list] = {}
    for cell in found:
        by_column.setdefault(cell[3], []).append(cell)
    kept = []
    for index, cells in by_column.items():
        name = normal_header(text[header[index][0]:header[index][1]]) if index < len(header) else ""
        if values_fit(cells[0][2], name, [text[s:e] for s, e, _, _ in cells]):
            kept.extend((s, e, rule) for s, e, rule, _ in cells)
    return kept


# Header words that name a sensitive column in one sense and something harmless in another: a "pin" of a
# GPIO header, the "pass" count of a test run, a "sin" of trigonometry, a camera's "pan", an "address" of a
# register map, the "parent" of a tree, the "mobile" share of traffic. Their column is sensitive only when
# most of its values have the shape of what the header would name.
_DIGITS = re.compile(r"\d")
_NUMERIC = re.compile(r"[\d\s.,:%+\-/()]*(?:ms|s|kb|mb|gb|k|m|x)?", re.I)
_HEX = re.compile(r"(?:0x[0-9a-f]+|[0-9a-f]+h|\$[0-9a-f]+)", re.I)
VERDICTS = frozenset("pass passed fail failed failure ok error skip skipped yes no true false none null n/a na - x "
                     "y n ✓ ✗ ✔ ✘ green red pending todo done".split())
WEAK_SECRET_HEADERS = frozenset({"pass", "passes", "token", "tokens", "secret", "credential", "credentials", "pw"})


def _digit_count(value: str) -> int:
    return len(_DIGITS.findall(value))


def _fits(rule: str, header: str, value: str) -> bool:
    """Does one value have the shape a column of this rule under this (ambiguous) header would hold?"""
    if rule == "password-column":
        return value.strip().lower() not in VERDICTS and not _NUMERIC.fullmatch(value.strip())
    if rule == "pin-column":
        return 4 <= _digit_count(value) <= 8 and not any(ch.isalpha() for ch in value)
    if rule == "ssn-column":
        return _digit_count(value) >= 8
    if rule == "card-column":
        return _digit_count(value) >= 12
    if rule == "phone-column":
        return _digit_count(value) >= 6 and "%" not in value
    if rule == "address-column":
        return any(ch.isalpha() for ch in value) and not _HEX.fullmatch(value.strip())
    if rule == "person-name":
        return (any(ch.isalpha() for ch in value) and not _NUMERIC.fullmatch(value.strip())
                and not _CODE_CELL.search(value))
    return True


# ``birth_date``, ``emp_dept_name(emp_no) as department``, ``employees;``: a SQL select list read as a
# table, not names (a person's name holds no "_", ";" or "=", nor a word followed by "(").
_CODE_CELL = re.compile(r"[_;=<>{}]|\w\(")


AMBIGUOUS_HEADERS = {
    "password-column": WEAK_SECRET_HEADERS,
    "pin-column": frozenset({"pin", "pins"}),
    "ssn-column": frozenset({"sin", "ni", "nir", "nss"}),
    "card-column": frozenset({"pan", "cc"}),
    "phone-column": frozenset({"mobile", "cell", "tel", "portable", "handy"}),
    "address-column": frozenset({"address", "addr", "adres", "residence"}),
}


# A sentence addressed to the reader: "Your mail password.", "Your account's PIN".
ADDRESSED = re.compile(r"(?i)your(?:[ \t]+[\w'\-]+){1,8}[.!]?")


def values_fit(rule: str, header: str, values: list[str]) -> bool:
    """Is a column under this header what the header names, judged by its values as well?

    An unambiguous header (``password``, ``ssn``) decides alone, as before. A
    header word with a harmless sense (``AMBIGUOUS_HEADERS``) and every name
    column need at least half of their values to have the expected shape;
    a column of numbers under ``parent`` or ``Pass`` stays.
    """
    filled = [value for value in values if value.strip()]
    if rule == "password-column" and filled and all(ADDRESSED.fullmatch(value.strip()) for value in filled):
        return False  # "Your mail password.": a guide telling its reader what goes there, no password
    if rule != "person-name" and header not in AMBIGUOUS_HEADERS.get(rule, ()):
        return True
    if not filled:
        return True
    return 2 * sum(1 for value in filled if _fits(rule, header, value)) >= len(filled)


def _take_cells(text: str, cells, rules: dict[int, str], width: int, realign: bool, found: list) -> None:
    """The sensitive cells of one row; a CSV row with more cells than the header is read both ways.

    An unquoted comma inside a value (``12 Main St, Springfield``) shifts
    every later cell one place right: the row's sensitive cells are taken
    counted from the left and from the right, so the shift cannot expose one.
    """
    count = len(cells)
    positions = [(index, rule) for index, rule in rules.items() if index < count]
    if realign and count > width:
        positions += [(count - width + index, rule) for index, rule in rules.items()]
    for index, rule in positions:
        start, end = cells[index]
        if end <= start:
            continue
        value = text[start:end]
        if PLACEHOLDER_CELL.fullmatch(value):
            continue
        if rule not in ANY_CELL and not any(ch.isalnum() for ch in value):
            continue
        found.append((start, end, rule, index))
