"""The tables of the man page reader, as data: what each escape, request and mdoc macro stands for.

They sit apart from the reader (``troff.py``) because they change for a
different reason: a character or macro the reader does not know yet is one
entry here, and the reader's logic stays as it is. Only literal tables live
here, no code.
"""

from __future__ import annotations

# ----------------------------------------------------------------- escapes

SPECIAL = {
    "aq": "'", "dq": '"', "em": "\u2014", "en": "\u2013", "hy": "-", "bu": "\u2022", "lq": "\u201c",
    "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122",
    "mu": "\u00d7", "di": "\u00f7", "de": "\u00b0", "->": "\u2192", "<-": "\u2190", "<=": "\u2264",
    ">=": "\u2265", "!=": "\u2260", "==": "\u2261", "ti": "~", "ha": "^", "rs": "\\", "sl": "/",
    "ba": "|", "bv": "|", "br": "|", "pl": "+", "mi": "\u2212", "eq": "=", "lB": "[", "rB": "]",
    "lC": "{", "rC": "}", "la": "\u27e8", "ra": "\u27e9", "Fo": "\u00ab", "Fc": "\u00bb",
    "fo": "\u2039", "fc": "\u203a", "sc": "\u00a7", "ps": "\u00b6", "ct": "\u00a2", "Eu": "\u20ac",
    "eu": "\u20ac", "Po": "\u00a3", "Ye": "\u00a5", "ss": "\u00df", "12": "\u00bd", "14": "\u00bc",
    "34": "\u00be", "ga": "`", "aa": "\u00b4", "at": "@", "sh": "#", "Do": "$", "dg": "\u2020",
    "dd": "\u2021", "pc": "\u00b7", "md": "\u22c5", "+-": "\u00b1", "no": "\u00ac", "if": "\u221e",
    "ul": "_", "ru": "_", "rn": "\u203e", "ci": "\u25cb", "sq": "\u25a1", "OK": "\u2713",
    "rh": "\u261e", "lh": "\u261c", "ae": "\u00e6", "AE": "\u00c6", "o/": "\u00f8", "O/": "\u00d8",
    "tf": "\u2234", "ap": "~", "Bq": "\u201e", "bq": "\u201a", "r!": "\u00a1",
    "r?": "\u00bf", "hA": "\u21d4", "rA": "\u21d2", "lA": "\u21d0",
}
ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ",": "\u0327",
            "o": "\u030a", "v": "\u030c"}
GREEK = dict(zip("abgdezyhiklmncoprstufxqw", "\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8\u03b9\u03ba"
                  "\u03bb\u03bc\u03bd\u03be\u03bf\u03c0\u03c1\u03c3\u03c4\u03c5\u03c6\u03c7\u03c8\u03c9"))
# Escapes whose argument is delimited by the character after them and yields no text.
DELIMITED = frozenset("bhvlLDoxXZRABSHwC")
# Escapes followed by a name (one character, (xx or [name]) that yield no text here.
NAMED_SILENT = frozenset("fFgkmMVY$")
SIMPLE = {"&": "", "^": "", "|": "", "%": "", ":": "", ",": "", "/": "", ")": "", "{": "", "}": "",
           "a": "", "d": "", "u": "", "r": "", "p": "", "z": "", "c": "", "E": "\\", "e": "\\",
           "\\": "\\", "-": "-", " ": " ", "~": " ", "0": " ", "t": "\t", "'": "\u00b4", "`": "`",
           ".": ".", "!": "", "?": "", "\n": ""}


# ----------------------------------------------------------------- requests and macros

# Requests and macros that break the line (a new paragraph) and show nothing themselves.
PARAGRAPH = frozenset("PP LP P sp Pp Lp HP br ne bp Sp".split())
IGNORED = frozenset(
    "ad na hy nh ft ps vs ll lt in ti ta ce ul cu ev cc c2 ec eo lf pl po pn ns rs rm rn als chop tr "
    "IX PD RS RE Os UC AT DT Bl El Ed Ek Bk Ud Dx hw pc ss cs bd fp fam nop mso mk rt fl ab tm tm1 tmc "
    "nx ch it wh dt em vpt cp do kern lg sty fschar fchar char schar rchar return shift substring "
    "length asciify unformat backtrace pnr pev pm ptr blm lsm rj hcode hla hlm hpf hpfa hym hys shc "
    "linetabs warn warnscale defcolor gcolor fcolor ME UE MT UR".split()
)
FONT_ALTERNATING = frozenset("BI IB RB BR IR RI".split())
FONT_JOINED = frozenset("B I SM SB".split())
# mdoc macros that may be called inside another's arguments; their names are not text.
MDOC_CALLABLE = frozenset(
    "Ad An Ar At Bsx Bx Cd Cm Dv Dx Em Er Ev Fa Fl Fn Fr Ft Fx Ic Li Lk Ms Mt Nm No Ns Nx Ox Pa Pf "
    "Sx Sy Tn Ux Va Vt Xr Ao Ac Aq Bo Bc Bq Bro Brc Brq Do Dc Dq Eo Ec Oo Oc Op Po Pc Pq Qo Qc Ql Qq "
    "So Sc Sq Ta Eq St Lb In Fd Ot Bf Ef".split()
)
MDOC_QUOTES = {"Aq": ("\u27e8", "\u27e9"), "Bq": ("[", "]"), "Brq": ("{", "}"), "Dq": ("\u201c", "\u201d"),
                "Op": ("[", "]"), "Pq": ("(", ")"), "Qq": ('"', '"'), "Sq": ("\u2018", "\u2019"),
                "Ql": ("\u2018", "\u2019")}
MDOC_OPEN = {"Ao": "\u27e8", "Bo": "[", "Bro": "{", "Do": "\u201c", "Oo": "[", "Po": "(", "Qo": '"', "So": "\u2018"}
MDOC_CLOSE = {"Ac": "\u27e9", "Bc": "]", "Brc": "}", "Dc": "\u201d", "Oc": "]", "Pc": ")", "Qc": '"', "Sc": "\u2019"}
PUNCTUATION = frozenset(". , : ; ) ] ? ! ".split())
MDOC_STANDARDS = {"-p1003.1": "IEEE Std 1003.1 (\u201cPOSIX.1\u201d)", "-ansiC": "ANSI X3.159-1989 (\u201cANSI C89\u201d)",
                   "-isoC": "ISO/IEC 9899:1990 (\u201cISO C90\u201d)", "-isoC-99": "ISO/IEC 9899:1999 (\u201cISO C99\u201d)"}
