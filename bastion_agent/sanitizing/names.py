"""Person names in the places a document itself marks as a name, and labelled dates of birth.

A name has no shape a pattern can trust ("Grant", "Rose", "Said" are words
too), but documents say where their names are: after "Dear" and an
honorific, under "Kind regards,", in a From/To/Cc/Reply-To header, in
``Jane Doe <jane@corp.io>``, after a form label ("Patient name:", "Signed
by:") and in a name column (``columns.py``). Only those places are read;
a name in running prose stays (docs/sanitize.md, "What is not removed").

What counts as the name: the capitalised words (and particles such as
"van", "de", "bin" between them, initials such as "J.") that follow the
marker, at most ``MAX_TOKENS`` of them; a run that holds a word of
``NOT_NAMES`` ("Sir", "Madam", "Team", "Support", "Foundation", a weekday...)
is not a person and stays whole, so "Dear Sir or Madam," and "-- Debian
Python Team <...>" keep everything.

Cost: the line-start markers are found by one pass whose pattern starts
with a line break or a cell delimiter (the engine skips to those in C), on
a lowercased copy; honorifics by one pass led by their capital letters;
display names by one pass led by ``<``; dates of birth by one pass over the
lowercased copy. Every look-around is bounded to its line.
"""

from __future__ import annotations

import re

from bastion_agent.sanitizing.copies import lead_pass, trie_pattern

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

MAX_TOKENS = 4
PERSON = "person-name"
DOB = "date-of-birth"

# Words that make a run of capitalised words something other than a person.
NOT_NAMES = frozenset("""
sir sirs madam madame mesdames messieurs monsieur all team teams colleague colleagues customer customers friend
friends everyone everybody hiring manager managers valued member members partner partners client clients user
users reader readers applicant applicants support there world folks guys people community committee board
department staff sales service services admin administrator administrators developer developers maintainer
maintainers project projects group groups list lists contributor contributors company inc ltd gmbh llc corp
corporation foundation association society university institute organization organisation office whom
concern recipient recipients subscriber subscribers debian ubuntu gnu linux mozilla apache python perl ruby
free software the and or of for to my our your this that these it we you they dear hr it ops security
notifications notification newsletter info noreply no-reply mailer daemon postmaster webmaster bot robot
system systems server root nobody unknown anonymous various authors author others other etc
monday tuesday wednesday thursday friday saturday sunday january february march april may june july august
september october november december today tomorrow yesterday morning afternoon evening night
herr frau damen herren kollegen kolleginnen kunde kunden alle liebe mitglieder
chers chères tous toutes équipe madame collègues beste allemaal heren dames team leden
señor señora señores todos equipo estimados
bug bugs issue issues release version package packages changelog readme license copyright note notes thanks
patient doctor physician nurse witness tenant landlord insured beneficiary guardian spouse mother father parent
student pupil employee room ward date time age sex gender male female number phone email address signature
journal magazine productions press kernel stable clerk disclaimer
dashboard revenue quarterly annual monthly weekly finance financial operations report reports analytics accounting
marketing engineering legal compliance payroll procurement overview summary budget forecast roadmap review
template policy process pipeline platform infrastructure database teams slack zoom jira confluence github gitlab
""".split())
PARTICLES = frozenset("van von de der den del della di da du le la dos das ter ten bin binti al el y zu af av".split())
_TITLES = "Mrs Mr Ms Mx Miss Mme Mlle Dr Dhr Prof Herr Frau Sra Srta Sr Mevr".split()
HONORIFIC = re.compile(r"(?:" + "|".join(_TITLES) + r")\.?[ \t]+(?=[^\W\d_])")
# One pass per first letter of a title, led by that capital (skipped to at memchr speed).
_HONORIFICS = tuple(re.compile(re.escape(first) + r"(?:" + "|".join(t[1:] for t in _TITLES if t[0] == first)
                               + r")\.?[ \t]+(?=[^\W\d_])") for first in sorted({t[0] for t in _TITLES}))
# A display name before an address in angle brackets.
DISPLAY = re.compile(r"<(?=[^\s<>@]{1,64}@[^\s<>@]{1,253}>)")
_TOKEN = re.compile(r"[^\W\d_](?:[^\W\d_]|['’](?=[^\W\d_])|-(?=[^\W\d_]))*\.?")

_SALUTATIONS = ("dear|dearest|hi|hello|hey|good morning|good afternoon|good evening|liebe|lieber|hallo|"
                "sehr geehrte|sehr geehrter|cher|chère|chere|bonjour|beste|geachte|hola|estimado|estimada|"
                "querido|querida|ciao|salve|gentile|gentilissima|gentilissimo|caro|cara|olá|ola|oi|prezado|prezada|"
                "hej|hejsa|cześć|czesc|witam|szanowny|szanowna|szanowni")
_CLOSINGS = ("kind regards|best regards|warm regards|warmest regards|regards|best wishes|best|sincerely|"
             "yours sincerely|sincerely yours|yours faithfully|yours truly|faithfully|cheers|thanks|thank you|"
             "many thanks|thanks again|all the best|with best regards|with kind regards|respectfully|"
             "mit freundlichen grüßen|mit freundlichen grüssen|freundliche grüße|viele grüße|beste grüße|"
             "liebe grüße|schöne grüße|grüße|cordialement|bien cordialement|bien à vous|amitiés|"
             "met vriendelijke groet|met vriendelijke groeten|vriendelijke groet|groeten|saludos|atentamente|"
             "un saludo|saludos cordiales|un abrazo|cordiali saluti|distinti saluti|saluti|un saluto|"
             "atenciosamente|abraços|cumprimentos|med vänliga hälsningar|vänliga hälsningar|hälsningar|mvh|"
             "pozdrawiam|z poważaniem|pozdrowienia")
_HEADERS = "from|to|cc|bcc|reply-to|sender|resent-from|von|an|aan|van|de|à|para|cci|kopie"
# Labels of a person's name in a form; those of BARE_LABELS need two words of name.
_LABELS = ("name|full name|first name|last name|surname|given names?|family name|middle name|maiden name|"
           "patient|patient name|patient's name|name of patient|employee|employee name|name of employee|"
           "customer|customer name|client|client name|contact|contact person|contact name|"
           "signed by|signature|signed|prepared by|approved by|reviewed by|authori[sz]ed by|submitted by|"
           "requested by|issued by|checked by|witnessed by|attending physician|physician|doctor|"
           "referring physician|treating physician|nurse|witness|applicant|tenant|landlord|insured|"
           "policyholder|policy holder|beneficiary|guardian|next of kin|emergency contact|spouse|mother|"
           "father|parent|student|pupil|account holder|cardholder|card holder|attn|attention|"
           "vorname|nachname|familienname|name des patienten|patientin|mitarbeiter|mitarbeiterin|"
           "unterschrift|ansprechpartner|ansprechpartnerin|nom|prénom|nom de famille|signé par|"
           "naam|voornaam|achternaam|patiënt|medewerker|nombre|apellidos?|paciente|empleado|firmado por|"
           "reporter|reported by|assignee|assigned to|owner|requester|requested for|raised by|opened by|"
           "closed by|resolved by|created by|author|chair|chairperson|chaired by|facilitator|moderator|"
           "organizer|organiser|minutes taken by|minutes by|minute taker|note taker|notes by|scribe|"
           "attendees|attendee|participants|present|absent|apologies|invitees|"
           "cognome|nome|nome completo|sobrenome|nome completo|efternamn|förnamn|namn|nazwisko|imię|"
           "imię i nazwisko")
# The labels of tickets and minutes: a name follows them only after a colon ("PRESENT|NOCARD" is a flag list).
COLON_LABELS = frozenset("""reporter assignee owner requester author chair chairperson facilitator moderator organizer
organiser scribe attendees attendee participants present absent apologies invitees""".split()) | frozenset({
    "reported by", "assigned to", "requested for", "raised by", "opened by", "closed by", "resolved by", "created by",
    "chaired by", "minutes taken by", "minutes by", "minute taker", "note taker", "notes by"})
# Labels followed by a list of people ("Attendees: Ana Ruiz, Tom Berg and Li Wu").
LIST_LABELS = frozenset("attendees attendee participants present absent apologies invitees".split())
BARE_LABELS = frozenset("name nom naam nombre nome namn imię contact client customer signature signed attn attention owner "
                        "author".split())
_MARKER = re.compile(
    r"[ \t>*]*(?:"
    r"(?P<salutation>" + _SALUTATIONS + r")[ \t]+"
    r"|(?P<closing>" + _CLOSINGS + r")[ \t]*[,.!]?[ \t]*(?=\n|$|[^\W\d_])"
    r"|(?P<header>" + _HEADERS + r")[ \t]*:[ \t]*"
    r"|(?P<label>" + _LABELS + r")[ \t]*(?::|\t|\|)[ \t]*"
    r")"
)
# The first words of every marker: one pass finds the first word after each line
# break or cell delimiter (led by that character, which the engine skips to in
# C), a set lookup decides, and only then is the marker itself matched there.
_FIRST_WORDS = frozenset(re.match(r"[^\W\d_]+", alternative).group()
                         for group in (_SALUTATIONS, _CLOSINGS, _HEADERS, _LABELS) for alternative in group.split("|"))
_FIRST_WORDS |= {"authorised", "authorized", "apellido", "reply"}
# The vocabulary is in the pattern (a trie of the words, then no further letter), so only a line or cell
# that starts with one of them costs a Python step; prose starts most lines with other words. One pass
# per lead character: a pattern led by a literal is skipped through in C, one led by a class is tried at
# every position (three times slower on prose). ``_leads`` merges the passes as one pass would read them.
# A tab is both a lead and padding: ``lead_pass`` reads a run of tabs once (a match may then lack its word).
_LEAD_WORDS = tuple(lead_pass(re.escape(lead), r"[ \t>*]*", trie_pattern(sorted(_FIRST_WORDS)) + r"(?![^\W\d_])",
                              tab=lead == "\t") for lead in "\n\t|")
# Literals of the date-of-birth labels, found with str.find; the label pattern is matched at each.
_DOB_WORDS = ("birth", "dob", "d.o.b", "geb", "naissance", "né", "nacimiento", "nascita", "born")
_MONTHS = ("jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|"
           "sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|januar|februar|märz|mai|juni|juli|"
           "oktober|dezember|janvier|février|mars|avril|juin|juillet|août|septembre|octobre|novembre|décembre|"
           "januari|februari|maart|mei|augustus|enero|febrero|marzo|abril|mayo|junio|julio|agosto|"
           "septiembre|octubre|noviembre|diciembre")
_DATE = (r"(?:\d{1,2}[./\-]\d{1,2}[./\-](?:\d{4}|\d{2})|\d{4}[./\-]\d{1,2}[./\-]\d{1,2}"
         r"|\d{1,2}\.?[ \t]+(?:" + _MONTHS + r")\.?,?[ \t]+\d{4}"
         r"|(?:" + _MONTHS + r")\.?[ \t]+\d{1,2}(?:st|nd|rd|th)?,?[ \t]+\d{4})")
_DOB = re.compile(
    r"(?:birth[ \t]?date|birthday|birth|dob|d\.o\.b\.?|geburtsdatum|geburtstag|geb\.|"
    r"naissance|né\(?e?\)? le|née le|geboortedatum|geboren(?: op| am)?|nacimiento|"
    r"nascita|born(?: on)?)"
    r"[ \t]*(?:\([^()\n]{0,20}\))?[ \t]*[:=\-]?[ \t]*(?:on[ \t]+)?(?P<date>" + _DATE + r")(?![\w])"
)


def name_findings(text: str, enabled: dict[str, int] | set[str], lowered: str | None = None) -> list[tuple[int, int, str]]:
    """(start, end, rule id) of the names and labelled dates of birth in ``text`` (``lowered``: ``text.lower()``)."""
    if not text or (PERSON not in enabled and DOB not in enabled):
        return []
    lowered = "\n" + (text.lower() if lowered is None else lowered)
    if len(lowered) != len(text) + 1:  # a character whose lower case is longer: keep offsets exact
        lowered = "\n" + "".join(ch if len(ch.lower()) != 1 else ch.lower() for ch in text)
    found: list[tuple[int, int, str]] = []
    if PERSON in enabled:
        found.extend(_marked(text, lowered))
        found.extend(_after_honorifics(text))
        found.extend(_display_names(text))
        found.extend(_speakers(text))
    if DOB in enabled:
        found.extend(_dates_of_birth(lowered))
    return found


def _dates_of_birth(lowered: str):
    """Dates after a date-of-birth label (``lowered`` has one leading line break)."""
    done = -1
    for word in _DOB_WORDS:
        position = lowered.find(word)
        while position != -1:
            if not lowered[position - 1].isalnum():
                match = _DOB.match(lowered, position)
                if match is not None and match.start("date") > done:
                    yield match.start("date") - 1, match.end("date") - 1, DOB
            position = lowered.find(word, position + 1)


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position, position + 4096)
    return end if end != -1 else min(len(text), position + 4096)


def read_name(text: str, position: int, limit: int, *, caps: bool = False) -> tuple[int, int, int] | None:
    """(start, end, words) of the name that starts at ``position`` (spaces skipped), or None.

    Words are capitalised (all capitals too when ``caps``), joined by one
    space or tab; particles may stand between two of them; an initial keeps
    its dot. A run holding a word of ``NOT_NAMES`` is no person's name.
    """
    while position < limit and text[position] in " \t":
        position += 1
    honorific = HONORIFIC.match(text, position, limit)
    if honorific is not None:  # "Dear Ms. Okonkwo", "Signed by: Dr. Berg": the title stays
        position = honorific.end()
    start, end, words, pending = position, None, 0, 0
    while words < MAX_TOKENS and position < limit:
        match = _TOKEN.match(text, position, limit)
        if match is None or (match.end() < len(text) and (text[match.end()].isalnum() or text[match.end()] == "_")):
            break  # "Mr C0B", "Dr D1mr": not a word of its own
        token = match.group()
        if token.endswith(("'s", "’s")):  # "Dr. Robert Hermann's gems": the name, not its possessive
            token = token[:-2]
        core = token.rstrip(".")
        particle = bool(words) and core.lower() in PARTICLES and core[0].islower()
        if not particle and not _capitalised(core, caps):
            break  # the name ended: "Mrs Roe yesterday and ..." is Mrs Roe, whatever words follow
        if core.lower() in NOT_NAMES:
            return None
        if particle:
            pending += 1
            if pending > 2:
                break
        else:
            words += 1
            pending = 0
            end = match.start() + len(token) - (len(core) > 1 and token != core)
        if len(token) != len(match.group()):
            break  # a possessive ends the name
        position = match.end()
        if text.startswith((" ", "\t"), position) and not text.startswith(("  ", "\t\t", " \t", "\t "), position):
            position += 1
        elif text.startswith(", ", position) and caps and words == 1:  # "SOLVANG-MURRAY, INGRID" in a form
            position += 2
        else:
            break
    if end is None:
        return None
    return start, end, words


def _capitalised(core: str, caps: bool) -> bool:
    if not core[0].isupper():
        return False
    if len(core) == 1:
        return True
    rest = core[1:]
    if any(ch.islower() for ch in rest):
        return not any(ch.isupper() for ch in rest[1:]) or "-" in core or "'" in core or core[:2] in ("Mc", "O'")
    return caps and len(core) > 1


def _marked(text: str, lowered: str):
    """Names after salutations, under closings, in mail headers and after form labels."""
    length = len(text)
    for lead in _leads(lowered):  # the line break or delimiter; in text, one character before
        match = _MARKER.match(lowered, lead + 1)
        if match is None:
            continue
        at_line = lowered[lead] == "\n"
        after = match.end() - 1
        kind = match.lastgroup
        if kind in ("salutation", "closing", "header") and not at_line:
            continue
        word_start = match.start(kind) - 1
        if kind != "salutation" and not text[word_start:word_start + 1].isupper():
            continue  # forms and letters capitalise their labels; YAML's "name:" does not
        limit = _line_end(text, after)
        if kind == "salutation":
            yield from _listed(text, after, limit, salutation=True)
        elif kind == "closing":
            rest = text[after:limit].strip()
            if rest:  # "Best, Anna"
                if text[match.start(kind) - 1 + len(match.group(kind))] in ",":
                    yield from _one(text, after, limit, 1, ",", whole=True)
                continue
            following = limit + 1
            for _ in range(2):  # the name's line, perhaps after one blank line
                if following >= length:
                    break
                line_end = _line_end(text, following)
                if text[following:line_end].strip():
                    yield from _one(text, following, line_end, 1, ",|", whole=True)
                    break
                following = line_end + 1
        elif kind == "header":
            yield from _header_names(text, after, limit)
        else:
            label = " ".join(match.group(kind).split())
            if label in COLON_LABELS and not match.group(0).rstrip(" \t").endswith(":"):
                continue
            if label in LIST_LABELS:
                yield from _listed(text, after, limit)
                continue
            minimum = 2 if label in BARE_LABELS else 1
            yield from _one(text, after, limit, minimum, ",;|\t(", caps=True, label=True)


def _leads(lowered: str) -> list[int]:
    """Where a marker word leads a line or a cell, left to right, as one pass over all lead characters finds them.

    A tab may stand in the spaces after a line break ("\\n\\tName:"): the
    tab's own match ends where the line break's does, and like one pass over
    ``[\\n\\t|]`` the merge keeps only the first of matches that overlap.
    """
    matches = sorted((match.start(), match.end()) for pattern in _LEAD_WORDS for match in pattern.finditer(lowered)
                     if match.start("word") >= 0)
    leads, consumed = [], -1
    for start, end in matches:
        if start >= consumed:
            leads.append(start)
            consumed = end
    return leads


def _one(text, position, limit, minimum, stops, *, whole=False, caps=False, salutation=False, label=False):
    """The name at ``position`` when it has enough words and what follows it is allowed."""
    name = read_name(text, position, limit, caps=caps)
    if name is None or name[2] < minimum:
        return
    start, end, _ = name
    rest = text[end:limit].lstrip(" \t")
    if salutation:
        if rest and rest[0] not in stops:
            return
    elif whole:
        if rest and rest[0] not in stops:
            return
    elif label:
        if rest and rest[0] not in stops and not text.startswith(("  ", "\t"), end):
            return
        from bastion_agent.sanitizing.columns import AMBIGUOUS_NAME, column_rule, normal_header

        value = text[start:end]
        if column_rule(value) or AMBIGUOUS_NAME.fullmatch(normal_header(value)):
            return  # a header row "Patient<TAB>Doctor", not a label and its value
    yield start, end, PERSON


# What separates the names of a list: a comma, a semicolon, "and", "&", "und", "et", "y", "e", "och", "i".
LIST_SEPARATOR = re.compile(r"[ \t]*(?:[,;&][ \t]*(?:(?:and|und|et|y|e|och|i)[ \t]+)?|[ \t](?:and|und|et|y|e|och|i)[ \t]+)")


def _listed(text: str, position: int, limit: int, *, salutation: bool = False):
    """Every name of a list after a marker ("Hi Ana and Tom,", "Attendees: Ana Ruiz, Tom Berg"), or none.

    A salutation's list must end as a salutation does (``,;:!`` or the line's
    end); a label's list ends at the line's end or before anything that is
    not a name, and the names read up to there are kept.
    """
    names = []
    for _ in range(32):
        name = read_name(text, position, limit, caps=not salutation)
        if name is None:
            break
        names.append(name)
        separator = LIST_SEPARATOR.match(text, name[1], limit)
        if separator is None or separator.end() >= limit:
            position = name[1]
            break
        position = separator.end()
    if not names:
        return
    rest = text[position:limit].lstrip(" \t")
    if salutation and rest and rest[0] not in ",;:!":
        return
    if not salutation and len(names) == 1:
        yield from _one(text, names[0][0], limit, 1, ",;|\t(", caps=True, label=True)
        return
    for start, end, _ in names:
        yield start, end, PERSON


def _header_names(text: str, position: int, limit: int):
    """Display names of a From/To/Cc/Reply-To header: each address of the list, quoted or not."""
    for part in _split_addresses(text, position, limit):
        start, end = part
        while start < end and text[start] in " \t":
            start += 1
        if start >= end:
            continue
        if text[start] == '"':
            close = text.find('"', start + 1, end)
            if close > start + 1 and _is_display_name(text[start + 1:close]):
                yield start + 1, close, PERSON
            continue
        bracket = text.find("<", start, end)
        stop = bracket if bracket != -1 else end
        name = read_name(text, start, stop, caps=False)
        if name is not None and not text[name[1]:stop].strip():
            yield name[0], name[1], PERSON


def _split_addresses(text: str, position: int, limit: int):
    """Spans of the comma-separated parts of a header value (commas inside quotes do not split)."""
    start, quoted = position, False
    for index in range(position, limit):
        ch = text[index]
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            yield start, index
            start = index + 1
    yield start, limit


def _is_display_name(value: str) -> bool:
    words = [w.strip(",") for w in value.split()]
    return bool(words) and all(w and (w[0].isupper() or w.lower() in PARTICLES) for w in words) and not any(
        w.lower() in NOT_NAMES for w in words)


def _after_honorifics(text: str):
    for pattern in _HONORIFICS:
        for match in pattern.finditer(text):
            if match.start() and (text[match.start() - 1].isalnum() or text[match.start() - 1] in "._-"):
                continue
            yield from _honorific_name(text, match)


def _honorific_name(text: str, match: re.Match):
    name = read_name(text, match.end(), _line_end(text, match.end()))
    if name is not None:
        yield name[0], name[1], PERSON


VIA = re.compile(r"[ \t]+\(?via[ \t]+[^\W\d_][\w .&\-]{0,40}\)?$")


def _display_names(text: str):
    """``Jane Doe <jane@corp.io>``: two or more capitalised words right before an address in brackets."""
    for match in DISPLAY.finditer(text):
        bracket = match.start()
        back = max(0, bracket - 160)
        newline = text.rfind("\n", back, bracket)
        line_start = newline + 1 if newline != -1 else back
        segment_end = bracket
        while segment_end > line_start and text[segment_end - 1] in " \t":
            segment_end -= 1
        if segment_end > line_start and text[segment_end - 1] in "\"'":
            quote = text[segment_end - 1]
            opening = text.rfind(quote, line_start, segment_end - 1)
            if opening != -1 and _is_display_name(text[opening + 1:segment_end - 1]):
                yield opening + 1, segment_end - 1, PERSON
            continue
        via = VIA.search(text, line_start, segment_end)
        if via is not None:  # "Ana Ruiz via Teams <noreply@...>": the service relays the person's name
            segment_end = via.start()
        words = _words_before(text, line_start, segment_end)
        if words is not None:
            yield words[0], segment_end, PERSON


# A chat line's speaker after its time ("[09:14] Ana Ruiz: ..."), a signature after "-- " on its own line,
# an IRC line's nick ("<ana_r> ..."), each led by a literal the engine skips to.
CHAT_SPEAKER = re.compile(r"\[(?:\d{4}-\d\d-\d\d[ T])?\d{1,2}:\d\d(?::\d\d)?(?:[ \t]?[AaPp][Mm])?\][ \t]+")
SIGNATURES = tuple(re.compile(re.escape(dash) + r"[ \t]?(?:\r?\n)?(?=[^\W\d_])") for dash in ("--", "—", "–"))
SIGNATURE_TAIL = re.compile(r"[ \t]*(?:\r?\n[ \t]*(?:\r?\n|$|.{0,80}(?:@|\+?\d[\d ()\-]{5}|https?://))|$)")
IRC_NICK = re.compile(r"<[@+%~&]?([A-Za-z\[\]\\`_^{|}][\w\[\]\\`^{|}\-]{1,31})>[ \t]")
IRC_STAMP = re.compile(r"[ \t]*\[?\d{1,2}:\d\d(?::\d\d)?\]?[ \t]+")
# Tag names of markup, which a line may start with as an IRC line starts with its nick.
MARKUP_TAGS = frozenset("""a abbr b body br code div em head html i img li link meta ol p pre script section span strong
style sub sup table tbody td template th thead title tr u ul""".split())


def _speakers(text: str):
    """Names that chat logs, IRC logs and signatures mark by where they stand on a line."""
    if "]" in text:
        for match in CHAT_SPEAKER.finditer(text):
            if not _starts_line(text, match.start()):
                continue
            limit = _line_end(text, match.end())
            name = read_name(text, match.end(), limit)
            if name is not None and text.startswith(":", name[1]):
                yield name[0], name[1], PERSON
    for signature in SIGNATURES:
        for match in signature.finditer(text):
            if match.start() and text[match.start() - 1] != "\n":
                continue
            limit = _line_end(text, match.end())
            if _ends_a_message(text, limit):  # "-- Drop Table" in SQL is a comment, not a signature
                yield from _one(text, match.end(), limit, 1, "<(,", whole=True)
    if "<" in text and "</" not in text:  # markup closes its tags; an IRC log has none
        yield from _irc_nicks(text)


def _irc_nicks(text: str):
    """Nicks that lead their lines (after a time stamp at most), in a text that is mostly such lines.

    Manuals start lines with ``<version> = ...`` and ``<authfile> and ...``:
    a nick without a time stamp counts only when at least half of the
    text's non-blank lines start with a nick.
    """
    found, stamped = [], False
    for match in IRC_NICK.finditer(text):
        line_start = text.rfind("\n", max(0, match.start() - 40), match.start()) + 1
        lead = text[line_start:match.start()]
        if lead and not IRC_STAMP.fullmatch(lead):
            continue  # a nick leads its line, after a time stamp at most
        if match.group(1).lower() not in MARKUP_TAGS and not text.startswith("=", match.end()):
            found.append((match.start(1), match.end(1), PERSON))
            stamped = stamped or bool(lead)
    lines = sum(1 for line in text.splitlines() if line.strip()) if found and not stamped else 0
    if stamped or 2 * len(found) >= lines:
        yield from found


def _starts_line(text: str, position: int) -> bool:
    """Only spaces or tabs between the line's start and ``position``."""
    while position > 0 and text[position - 1] in " \t":
        position -= 1
    return position == 0 or text[position - 1] == "\n"


def _ends_a_message(text: str, line_end: int) -> bool:
    """Does a signature's line end the message: the text's end, a blank line, or a line of contact details?"""
    return SIGNATURE_TAIL.match(text, line_end) is not None


def _words_before(text: str, line_start: int, end: int) -> tuple[int, int] | None:
    """The run of name words that ends at ``end`` (two to MAX_TOKENS), read backwards."""
    start, words = end, 0
    for token in reversed(text[line_start:end].split(" ")):
        core = token.rstrip(".")
        if not core or not _TOKEN.fullmatch(token):
            break
        if core.lower() in NOT_NAMES:
            return None
        if not (words and core.lower() in PARTICLES and core[0].islower()):
            if not _capitalised(core, False):
                break
            words += 1
        start -= len(token) + (start != end)
        if words >= MAX_TOKENS:
            break
    if words < 2:
        return None
    while text[start] in " \t":
        start += 1
    if text[start].islower():  # a particle first: not part of the name
        return None
    return start, end
