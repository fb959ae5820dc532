"""The detectors of ``sanitize``, kept as data: one row per rule.

A row names what it finds (``id``, which is also the placeholder:
``[REDACTED:<id>]``), its ``category`` (what ``[sanitize] disable`` turns off
as a group), a regular expression, and how the scanner reaches it:

- ``keywords``: lowercase literals; the rule only runs in a window around a
  place where one of them occurs. All keywords of all rules are found in one
  combined pass, so adding a keyword rule adds no pass over the text.
- ``scope="run"``: keyword-less token shapes; the rule only runs inside long
  runs of token characters, found once for all such rules.
- ``scope="document"``: multi-line shapes (key blocks, YAML blocks); the
  whole text is searched, but only when a keyword occurs somewhere in it.
- ``scope="number"``: digit shapes (phone, card, SSN); the rule only runs
  inside runs of 7 or more digits with separators, found once for all.
- ``scope="text"``: the few other keyword-less shapes (IBAN, IP addresses),
  one pass each, each starting with a literal or a class the regular
  expression engine can skip to quickly.

``anchor`` speeds up keyword rules: "keyword" when every match starts at
its keyword (a token prefix such as ``ghp_``), "line" when it starts at the
beginning of the keyword's line; the rule is then tried once per keyword
instead of searched through a window.

A named group ``secret``, when present, is what gets replaced (the key name
in ``password = hunter2`` stays readable); otherwise the whole match.
``entropy`` is a minimum Shannon entropy (bits per character) of that
secret, and ``validator`` names a check in ``validators.CHECKS`` (Luhn,
mod-97, placeholder and template heuristics...). Adding a detector is adding
a row here (and a test in ``test_sanitize.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

SECRET = "secret"
PERSONAL = "personal"

# category -> kind; a user may disable a rule id, a category or a kind.
CATEGORIES = {
    "cloud": SECRET,
    "code-hosting": SECRET,
    "chat": SECRET,
    "payment": SECRET,
    "ai": SECRET,
    "saas": SECRET,
    "private-key": SECRET,
    "jwt": SECRET,
    "url-credentials": SECRET,
    "assignment": SECRET,
    "high-entropy": SECRET,
    "custom": SECRET,
    "email": PERSONAL,
    "phone": PERSONAL,
    "card": PERSONAL,
    "iban": PERSONAL,
    "ssn": PERSONAL,
    "ip": PERSONAL,
    "password-hash": SECRET,
    "national-id": PERSONAL,
    "person-name": PERSONAL,
    "date-of-birth": PERSONAL,
    "address": PERSONAL,
}

SCOPES = ("keyword", "run", "number", "document", "text", "context", "structure")


@dataclass(frozen=True)
class Rule:
    """One detector (see the module docstring for the fields)."""

    id: str
    category: str
    pattern: str
    keywords: tuple[str, ...] = ()
    entropy: float | None = None
    validator: str | None = None
    scope: str = ""
    anchor: str = ""

    @property
    def kind(self) -> str:
        return CATEGORIES.get(self.category, SECRET)

    @property
    def effective_scope(self) -> str:
        if self.scope:
            return self.scope
        return "keyword" if self.keywords else "text"


# Left and right edges of a token: not inside a longer word.
TOKEN_START = r"(?<![A-Za-z0-9_\-])"
TOKEN_END = r"(?![A-Za-z0-9_\-])"


def keyed(names: str, value: str) -> str:
    """An identifier containing one of ``names``, a separator, then ``value`` as the secret.

    Covers ``etsyToken = "..."``, ``"cloudflare": "..."``, ``ETSY_KEY: ...``,
    ``<sumoToken>...``, ``("ARTIFACTORY", "...")``.
    """
    return (
        r"(?i:(?<![\w.\-])[\w.\-]{0,40}?(?:" + names + r")[\w.\-]{0,40}?[\"'`\]]{0,2}[ \t]*"
        r"(?::{1,3}=|=>|[?.+]?=|:|,|>)[ \t\"'`]{0,4}\s{0,6})(?P<secret>" + value + r")(?![\w\-])"
    )


RULES: tuple[Rule, ...] = (
    # --- private keys (multi-line) -------------------------------------------
    # BEGIN to END whatever lies between (Proc-Type/DEK-Info, Version:, Comment:
    # headers, the blank line of every armour, CRLF, escaped \n in a string);
    # without an END within the budget, every following line that looks like
    # armour (a header, base64, a blank line, the =CRC line) goes too.
    Rule("private-key", "private-key",
       r"-----BEGIN[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----(?:(?P<body>[\s\S]{0,32768}?)"
       r"-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
       r"|(?P<open>(?:[ \t]*\r?\n[ \t]*(?:[A-Za-z][\w\-]{0,40}:[^\r\n]*|[A-Za-z0-9+/=]{1,128})[ \t]*\r?(?=\n|\Z)"
       r"|[ \t]*\r?\n[ \t]*\r?(?=\n))*)(?:\r?\n-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----)?)",
       keywords=("-----begin",), validator="key_block", scope="document"),
    Rule("putty-private-key", "private-key",
       r"PuTTY-User-Key-File-\d+:(?:[\s\S]{0,16384}?Private-MAC:[ \t]*[0-9a-fA-F]+|[\s\S]{16384})",
       keywords=("putty-user-key-file",), scope="document"),
    Rule("age-secret-key", "private-key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
       keywords=("age-secret-key-1",), anchor="keyword"),
    # --- cloud -----------------------------------------------------------------
    Rule("aws-access-key", "cloud",
       r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z2-7]{16}(?![A-Za-z0-9])",
       keywords=("akia", "asia", "abia", "acca", "a3t", "agpa", "aida", "aipa", "anpa", "anva", "apka", "aroa"),
       entropy=3.0, anchor="keyword"),
    Rule("aws-secret-key", "cloud", keyed(r"aws", r"[A-Za-z0-9/+]{40}"), keywords=("aws",), entropy=4.0),
    Rule("aws-bedrock-key", "cloud",
       r"ABSK[A-Za-z0-9+/]{100,}={0,2}|bedrock-api-key-[A-Za-z0-9+/]{20,}={0,2}",
       keywords=("absk", "bedrock-api-key-"), entropy=3.0, anchor="keyword"),
    Rule("gcp-api-key", "cloud", TOKEN_START + r"AIza[\w\-]{35}" + TOKEN_END, keywords=("aiza",), entropy=3.0,
       validator="vendor_token", anchor="keyword"),
    Rule("azure-ad-client-secret", "cloud",
       r"(?<![\w~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![\w~.\-])",
       keywords=("q~",), entropy=3.0),
    Rule("azure-storage-key", "cloud", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{86}==)", keywords=("accountkey",)),
    Rule("azure-sas-signature", "cloud", r"[?&]sig=(?P<secret>[A-Za-z0-9%+/]{40,}(?:%3D|=){0,2})", keywords=("sig=",)),
    Rule("alibaba-access-key", "cloud", TOKEN_START + r"LTAI[A-Za-z0-9]{12,20}" + TOKEN_END,
       keywords=("ltai",), entropy=3.0, anchor="keyword"),
    Rule("digitalocean-token", "cloud", TOKEN_START + r"do[opr]_v1_[a-f0-9]{64}" + TOKEN_END, keywords=("_v1_",)),
    Rule("heroku-api-key", "cloud",
       TOKEN_START + r"HRKU-[0-9A-Za-z_\-]{36,}" + TOKEN_END + "|" +
       keyed("heroku", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
       keywords=("hrku-", "heroku")),
    Rule("yandex-token", "cloud",
       TOKEN_START + r"t1\.[A-Za-z0-9_\-]+={0,2}\.[A-Za-z0-9_\-]{60,}={0,2}|" + TOKEN_START + r"AQVN[A-Za-z0-9_\-]{35,38}" + TOKEN_END + "|"
       + keyed("yandex", r"YC[A-Za-z0-9_\-]{38}"),
       keywords=("t1.", "aqvn", "yandex"), entropy=3.0),
    Rule("scalingo-token", "cloud", TOKEN_START + r"tk-us-[\w\-]{48}" + TOKEN_END, keywords=("tk-us-",), anchor="keyword"),
    Rule("flyio-token", "cloud",
       TOKEN_START + r"fo1_[\w\-]{43}" + TOKEN_END + "|" + TOKEN_START + r"fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3}",
       keywords=("fo1_", "fm1", "fm2_"), entropy=3.0, anchor="keyword"),
    Rule("vault-token", "cloud", TOKEN_START + r"hv[sb]\.[\w\-]{24,}" + TOKEN_END,
       keywords=("hvs.", "hvb."), entropy=3.0, anchor="keyword"),
    Rule("openshift-token", "cloud", TOKEN_START + r"sha256~[\w\-]{43}" + TOKEN_END,
       keywords=("sha256~",), entropy=3.0, anchor="keyword"),
    Rule("databricks-token", "cloud", TOKEN_START + r"dapi[a-f0-9]{32}(?:-\d)?" + TOKEN_END,
       keywords=("dapi",), anchor="keyword"),
    Rule("pulumi-token", "cloud", TOKEN_START + r"pul-[a-f0-9]{40}" + TOKEN_END, keywords=("pul-",), anchor="keyword"),
    Rule("terraform-cloud-token", "cloud", r"[A-Za-z0-9]{14}\.atlasv1\.[\w=\-]{40,120}", keywords=("atlasv1",), entropy=3.0),
    Rule("planetscale-token", "cloud", TOKEN_START + r"pscale_(?:pw|tkn|oauth)_[\w=.\-]{20,}",
       keywords=("pscale_",), entropy=3.0, anchor="keyword"),
    Rule("doppler-token", "cloud", r"(?i)" + TOKEN_START + r"dp\.pt\.[a-z0-9]{43}" + TOKEN_END,
       keywords=("dp.pt.",), anchor="keyword"),
    Rule("infracost-token", "cloud", r"(?<![\w.\-])ico-[a-zA-Z0-9]{32}" + TOKEN_END,
       keywords=("ico-",), entropy=3.0, anchor="keyword"),
    Rule("prefect-token", "cloud", TOKEN_START + r"pnu_[a-zA-Z0-9]{36}" + TOKEN_END,
       keywords=("pnu_",), entropy=3.0, anchor="keyword"),
    Rule("octopus-deploy-key", "cloud", TOKEN_START + r"API-[A-Z0-9]{26}" + TOKEN_END,
       keywords=("api-",), entropy=3.0, anchor="keyword"),
    Rule("cloudflare-api-key", "cloud",
       TOKEN_START + r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}" + TOKEN_END + "|" + keyed("cloudflare", r"[\w\-]{40}|[a-f0-9]{37}"),
       keywords=("v1.0-", "cloudflare"), entropy=3.0),
    # the vendor's name as a word (SUMO_, sumologic, SumoLogic), not the start of ``sumOfValues``; an access
    # id is 14 characters (3.81 bits at most): 3.0 bits cut 1 random id in 900 (``suf5ugggIgRru8``), 2.5 none
    Rule("sumologic-key", "cloud", keyed(r"(?-i:sumo|Sumo|SUMO)(?:logic|Logic|LOGIC)?(?![a-z])",
                                         r"su[a-zA-Z0-9]{12}|[a-zA-Z0-9]{64}"), keywords=("sumo",), entropy=2.5,
       validator="has_digit"),
    Rule("kubernetes-secret", "cloud",
       r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\r?\n(?P<block>(?:(?P=indent)[ \t]+[^\n]*(?:\n|$))+)",
       keywords=("kind: secret", "kind:secret", "kind: \"secret", "kind: 'secret"), validator="kubernetes_secret",
       scope="document"),
    # --- code hosting and package registries ----------------------------------
    Rule("github-token", "code-hosting",
       TOKEN_START + r"gh[pousr]_[A-Za-z0-9]{36}" + TOKEN_END + "|" + TOKEN_START + r"github_pat_\w{60,}",
       keywords=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), entropy=3.0, anchor="keyword"),
    Rule("gitlab-token", "code-hosting",
       TOKEN_START + r"(?:glpat|gldt|glrtr|glrt|glcbt|glft|glsoat|glffct|glwt)-[\w\-]{20,}(?:\.[\w\-]{2,}){0,2}" + TOKEN_END + "|"
       + TOKEN_START + r"glptt-[\w\-]{40}" + TOKEN_END + "|" + TOKEN_START + r"glimt-[\w\-]{25,}" + TOKEN_END + "|"
       + TOKEN_START + r"glagent-[\w\-]{50,}" + TOKEN_END
       + "|" + TOKEN_START + r"gloas-[\w\-]{64,}" + TOKEN_END + "|" + TOKEN_START + r"GR1348941[\w\-]{20,}" + TOKEN_END
       + "|_gitlab_session=[0-9a-z]{32}",
       keywords=("glpat-", "gldt-", "glrt-", "glrtr-", "glwt-", "glcbt-", "glft-", "glsoat-", "glffct-", "glptt-", "glimt-",
                 "glagent-", "gloas-", "gr1348941", "_gitlab_session="),
       entropy=3.0, anchor="keyword"),
    Rule("npm-token", "code-hosting", TOKEN_START + r"npm_[A-Za-z0-9]{36}" + TOKEN_END,
       keywords=("npm_",), entropy=3.0, anchor="keyword"),
    Rule("pypi-token", "code-hosting", TOKEN_START + r"pypi-AgE[\w\-]{70,}", keywords=("pypi-age",), anchor="keyword"),
    Rule("rubygems-token", "code-hosting", TOKEN_START + r"rubygems_[a-f0-9]{48}" + TOKEN_END,
       keywords=("rubygems_",), anchor="keyword"),
    Rule("clojars-token", "code-hosting", r"(?i)" + TOKEN_START + r"CLOJARS_[a-z0-9]{60}" + TOKEN_END,
       keywords=("clojars_",), anchor="keyword"),
    Rule("sonar-token", "code-hosting",
       TOKEN_START + r"sq[pua]_[A-Za-z0-9]{40}" + TOKEN_END + "|" + keyed("sonar", r"[A-Za-z0-9]{40}"),
       keywords=("sqp_", "squ_", "sqa_", "sonar"), entropy=3.0),
    Rule("artifactory-token", "code-hosting",
       TOKEN_START + r"AKCp[A-Za-z0-9]{69}" + TOKEN_END + "|" + TOKEN_START + r"cmVmd[A-Za-z0-9]{59}" + TOKEN_END + "|"
       + keyed("jfrog|artifactory|bintray|xray", r"[a-z0-9]{64}|[a-z0-9]{73}"),
       keywords=("akcp", "cmvmd", "jfrog", "artifactory", "bintray", "xray"), entropy=3.0),
    Rule("sourcegraph-token", "code-hosting",
       TOKEN_START + r"sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}" + TOKEN_END + "|" + keyed("sourcegraph", r"[a-fA-F0-9]{40}"),
       keywords=("sgp_", "sourcegraph"), entropy=3.0),
    # --- chat ---------------------------------------------------------------------
    Rule("slack-token", "chat",
       TOKEN_START + r"xoxe\.xox[bp]-\d-[A-Za-z0-9]{40,}" + TOKEN_END + "|"
       + TOKEN_START + r"xox[bpseo]-(?:[0-9A-Za-z]+-)*[0-9A-Za-z]+(?![\w#*\-])" + "|"
       + TOKEN_START + r"xox[ar]-(?:[0-9A-Za-z]+-)*[0-9A-Za-z]+(?![\w#*\-])" + "|"
       + TOKEN_START + r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{40,}" + TOKEN_END,
       keywords=("xox", "xapp-"), validator="slack_token", entropy=2.5, anchor="keyword"),
    Rule("slack-webhook", "chat",
       r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
       keywords=("hooks.slack.com",)),
    Rule("discord-webhook", "chat", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w\-]{20,}",
       keywords=("discord",)),
    Rule("discord-bot-token", "chat",
       r"(?<![\w\-.])[A-Za-z0-9_\-]{23,28}\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}(?![\w\-.])",
       scope="run", entropy=3.5),
    Rule("telegram-bot-token", "chat", r"(?<![\w:])\d{5,16}:A[A-Za-z0-9_\-]{32,40}" + TOKEN_END, keywords=(":a",), entropy=3.0),
    Rule("teams-webhook", "chat",
       r"https://[\w.\-]+\.webhook\.office\.com/webhookb2/[\w@/.\-]{20,}|https://outlook\.office\.com/webhook/[\w@/.\-]{20,}",
       keywords=("webhook.office.com", "outlook.office.com/webhook")),
    # --- payment --------------------------------------------------------------------
    Rule("stripe-key", "payment", TOKEN_START + r"(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,}" + TOKEN_END + "|"
       + TOKEN_START + r"whsec_[A-Za-z0-9]{32,}" + TOKEN_END,
       keywords=("sk_live_", "sk_test_", "sk_prod_", "rk_live_", "rk_test_", "rk_prod_", "whsec_"), entropy=3.0, anchor="keyword"),
    Rule("square-token", "payment",
       TOKEN_START + r"(?:EAAA|sq0atp-)[\w\-]{22,60}" + TOKEN_END + "|" + TOKEN_START + r"sq0csp-[0-9A-Za-z\\\-_]{43}",
       keywords=("eaaa", "sq0atp-", "sq0csp-"), entropy=3.0, anchor="keyword"),
    Rule("braintree-token", "payment", r"access_token\$production\$[0-9a-z]{16}\$[0-9a-f]{32}",
       keywords=("access_token$",), anchor="keyword"),
    Rule("plaid-token", "payment",
       r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
       keywords=("access-",), anchor="keyword"),
    Rule("flutterwave-key", "payment", TOKEN_START + r"FLW(?:PUBK|SECK)(?:_TEST)?-[a-f0-9]{12,32}(?:-X)?" + TOKEN_END,
       keywords=("flwpubk", "flwseck"), anchor="keyword"),
    Rule("shopify-token", "payment", TOKEN_START + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + TOKEN_END,
       keywords=("shpat_", "shpca_", "shppa_", "shpss_"), anchor="keyword"),
    Rule("easypost-token", "payment", TOKEN_START + r"EZ[AT]K[A-Za-z0-9]{54}" + TOKEN_END,
       keywords=("ezak", "eztk"), anchor="keyword"),
    Rule("duffel-token", "payment", TOKEN_START + r"duffel_(?:test|live)_[\w=\-]{43}" + TOKEN_END,
       keywords=("duffel_",), anchor="keyword"),
    Rule("shippo-token", "payment", TOKEN_START + r"shippo_(?:live|test)_[a-fA-F0-9]{40}" + TOKEN_END,
       keywords=("shippo_",), anchor="keyword"),
    Rule("gocardless-token", "payment", keyed("gocardless", r"live_[\w=\-]{40}"), keywords=("gocardless",)),
    Rule("facebook-token", "saas",
       r"(?<![\w])\d{15,16}(?:\||%7C)[\w\-]{27,40}" + TOKEN_END + "|" + TOKEN_START + r"EAA[MC][A-Za-z0-9]{100,}",
       keywords=("facebook", "fb_", "%7c", "eaam", "eaac"), entropy=3.0),
    # --- AI ---------------------------------------------------------------------------
    Rule("openai-api-key", "ai",
       TOKEN_START + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}" + TOKEN_END + "|"
       + TOKEN_START + r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}" + TOKEN_END,
       keywords=("t3blbkfj", "sk-proj-", "sk-svcacct-", "sk-admin-")),
    Rule("anthropic-api-key", "ai", TOKEN_START + r"sk-ant-(?:api|admin|sid)\d{2}-[\w\-]{80,}",
       keywords=("sk-ant-",), anchor="keyword"),
    Rule("huggingface-token", "ai",
       r"(?<![A-Za-z0-9])hf_[A-Za-z]{34}(?![A-Za-z0-9])|" + TOKEN_START + r"api_org_[A-Za-z]{34}(?![A-Za-z0-9])",
       keywords=("hf_", "api_org_"), entropy=3.0, anchor="keyword"),
    Rule("perplexity-api-key", "ai", TOKEN_START + r"pplx-[A-Za-z0-9]{48}" + TOKEN_END,
       keywords=("pplx-",), entropy=3.0, anchor="keyword"),
    Rule("groq-api-key", "ai", TOKEN_START + r"gsk_[A-Za-z0-9]{52}" + TOKEN_END,
       keywords=("gsk_",), entropy=3.0, anchor="keyword"),
    Rule("replicate-token", "ai", TOKEN_START + r"r8_[A-Za-z0-9]{37}" + TOKEN_END,
       keywords=("r8_",), entropy=3.0, anchor="keyword"),
    Rule("xai-api-key", "ai", TOKEN_START + r"xai-[A-Za-z0-9]{80}" + TOKEN_END,
       keywords=("xai-",), entropy=3.0, anchor="keyword"),
    # --- SaaS ---------------------------------------------------------------------------
    Rule("sendgrid-token", "saas", TOKEN_START + r"SG\.[A-Za-z0-9=_\-.]{66}" + TOKEN_END,
       keywords=("sg.",), entropy=3.0, anchor="keyword"),
    Rule("sendinblue-token", "saas", TOKEN_START + r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}" + TOKEN_END,
       keywords=("xkeysib-",), anchor="keyword"),
    Rule("mailgun-token", "saas", TOKEN_START + r"(?:pub)?key-[a-f0-9]{32}" + TOKEN_END, keywords=("key-",), entropy=3.0),
    Rule("mailchimp-api-key", "saas", TOKEN_START + r"[0-9a-f]{32}-us\d{1,2}" + TOKEN_END, keywords=("-us",)),
    Rule("twilio-api-key", "saas", r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])", scope="run", entropy=3.0),
    Rule("new-relic-key", "saas",
       r"(?i)" + TOKEN_START + r"(?:NRAK-[A-Z0-9]{27}|NRJS-[a-f0-9]{19}|NRII-[a-z0-9\-]{32})" + TOKEN_END,
       keywords=("nrak-", "nrjs-", "nrii-"), entropy=3.0, anchor="keyword"),
    Rule("sentry-token", "saas",
       TOKEN_START + r"sntrys_eyJ[A-Za-z0-9+/=_\-]{100,}|" + TOKEN_START + r"sntryu_[a-f0-9]{64}(?![A-Za-z0-9])",
       keywords=("sntrys_", "sntryu_"), anchor="keyword"),
    Rule("grafana-token", "saas",
       TOKEN_START + r"glc_[A-Za-z0-9+/]{32,400}={0,2}|" + TOKEN_START + r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}" + TOKEN_END + "|"
       + TOKEN_START + r"eyJrIjoi[A-Za-z0-9]{60,100}={0,2}",
       keywords=("glc_", "glsa_", "eyjrijoi"), entropy=3.0, anchor="keyword"),
    Rule("dynatrace-token", "saas", TOKEN_START + r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}" + TOKEN_END,
       keywords=("dt0c01.",), anchor="keyword"),
    Rule("linear-api-key", "saas", TOKEN_START + r"lin_api_[A-Za-z0-9]{40}" + TOKEN_END,
       keywords=("lin_api_",), anchor="keyword"),
    Rule("notion-token", "saas", TOKEN_START + r"ntn_\d{11}[A-Za-z0-9]{32,35}" + TOKEN_END + "|"
       + TOKEN_START + r"secret_[A-Za-z0-9]{43}" + TOKEN_END,
       keywords=("ntn_", "secret_"), entropy=3.0, anchor="keyword"),
    Rule("postman-api-key", "saas", TOKEN_START + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + TOKEN_END,
       keywords=("pmak-",), anchor="keyword"),
    Rule("readme-api-key", "saas", TOKEN_START + r"rdme_[a-z0-9]{70}" + TOKEN_END,
       keywords=("rdme_",), entropy=3.0, anchor="keyword"),
    Rule("typeform-token", "saas", TOKEN_START + r"tfp_[\w\-.=]{59}" + TOKEN_END,
       keywords=("tfp_",), entropy=3.0, anchor="keyword"),
    Rule("onepassword-token", "saas",
       TOKEN_START + r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}" + TOKEN_END + "|"
       + TOKEN_START + r"ops_eyJ[A-Za-z0-9+/_\-]{200,}={0,3}",
       keywords=("a3-", "ops_eyj"), entropy=3.0, anchor="keyword"),
    Rule("atlassian-token", "saas", TOKEN_START + r"ATATT3[A-Za-z0-9_\-=]{150,}",
       keywords=("atatt3",), entropy=3.0, anchor="keyword"),
    Rule("adobe-secret", "saas", TOKEN_START + r"p8e-[A-Za-z0-9]{32}" + TOKEN_END,
       keywords=("p8e-",), entropy=3.0, anchor="keyword"),
    Rule("airtable-token", "saas", TOKEN_START + r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}" + TOKEN_END, scope="run"),
    Rule("authress-key", "saas",
       r"(?i)" + TOKEN_START + r"(?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_\-][a-z0-9\-]{10,32}\.[a-z0-9+/_=\-]{30,120}",
       keywords=(".acc_", ".acc-")),
    Rule("clickhouse-secret", "saas", TOKEN_START + r"4b1d[A-Za-z0-9]{38}" + TOKEN_END,
       keywords=("4b1d",), entropy=3.0, anchor="keyword"),
    Rule("defined-networking-token", "saas", TOKEN_START + r"(?i:dnkey-[a-z0-9=_\-]{26}-[a-z0-9=_\-]{52})" + TOKEN_END,
       keywords=("dnkey-",), anchor="keyword"),
    Rule("dropbox-token", "saas", TOKEN_START + r"sl\.[A-Za-z0-9\-=_]{135}" + TOKEN_END, scope="run"),
    Rule("frameio-token", "saas", TOKEN_START + r"fio-u-[\w=\-]{64}" + TOKEN_END, keywords=("fio-u-",), anchor="keyword"),
    Rule("harness-token", "saas", TOKEN_START + r"(?:pat|sat)\.[\w\-]{22}\.[\w\-]{24}\.[\w\-]{20}" + TOKEN_END, scope="run"),
    Rule("intra42-secret", "saas", TOKEN_START + r"s-s4t2(?:ud|af)-[a-f0-9]{64}" + TOKEN_END,
       keywords=("s-s4t2",), anchor="keyword"),
    Rule("mapbox-token", "saas", r"(?i)" + TOKEN_START + r"[ps]k\.[a-z0-9]{60}\.[a-z0-9]{22}" + TOKEN_END, scope="run"),
    Rule("settlemint-token", "saas", TOKEN_START + r"sm_(?:aat|pat|sat)_[a-z0-9]{16}" + TOKEN_END,
       keywords=("sm_aat_", "sm_pat_", "sm_sat_"), anchor="keyword"),
    Rule("sidekiq-secret", "saas", keyed("contribsys", r"[a-f0-9]{8}:[a-f0-9]{8}"), keywords=("contribsys",)),
    Rule("cloudant-credential", "saas", keyed("cloudant", r"[0-9a-f]{64}|[a-z]{24}"), keywords=("cloudant",)),
    Rule("jwt", "jwt",
       r"(?<![\w\-])eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]*){0,3}|"
       r"(?<![\w\-])ZXlK[A-Za-z0-9+/]{60,}={0,2}",
       keywords=("eyj", "zxlk"), validator="jwt", anchor="keyword"),
    # --- more vendor formats, each by its documented prefix and body -------------------
    Rule("figma-token", "saas", TOKEN_START + r"figd_[\w\-]{38,48}" + TOKEN_END,
       keywords=("figd_",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # Google's OAuth client secret, access token and refresh token.
    Rule("google-oauth-token", "cloud",
       TOKEN_START + r"GOCSPX-[\w\-]{28}" + TOKEN_END + "|" + TOKEN_START + r"ya29\.[\w\-]{30,}" + TOKEN_END + "|"
       + r"(?<![\w/])1//0[\w\-]{40,}" + TOKEN_END,
       keywords=("gocspx-", "ya29.", "1//0"), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("cloudflare-scoped-token", "cloud", TOKEN_START + r"cf(?:at|ut|k)_[A-Za-z0-9]{40,60}" + TOKEN_END,
       keywords=("cfat_", "cfut_", "cfk_"), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("netlify-token", "cloud", TOKEN_START + r"nfp_[A-Za-z0-9]{30,50}" + TOKEN_END,
       keywords=("nfp_",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("vercel-token", "cloud", TOKEN_START + r"vc[pikar]_[A-Za-z0-9]{40,70}" + TOKEN_END,
       keywords=("vcp_", "vci_", "vck_", "vca_", "vcr_"), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("supabase-token", "cloud", TOKEN_START + r"sbp_(?:v0_)?[a-f0-9]{40}" + TOKEN_END,
       keywords=("sbp_",), validator="vendor_token", anchor="keyword"),
    # Not the API host name (akab-….luna.akamaiapis.net).
    Rule("akamai-token", "cloud", TOKEN_START + r"akab-[a-z0-9]{16}-[a-z0-9]{16}" + TOKEN_END + r"(?!\.)",
       keywords=("akab-",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # A Salesforce session id: the org id (00D...), "!", then the session part.
    Rule("salesforce-token", "saas", TOKEN_START + r"00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{40,}",
       keywords=("00d",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # PostHog's personal API key (the project key, phc_, is public by design and stays).
    Rule("posthog-personal-key", "saas", TOKEN_START + r"phx_[A-Za-z0-9]{40,60}" + TOKEN_END,
       keywords=("phx_",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("postman-collection-token", "saas", TOKEN_START + r"PMAT-[A-Z0-9]{26}" + TOKEN_END,
       keywords=("pmat-",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("wundergraph-key", "saas", TOKEN_START + r"cosmo_[a-f0-9]{32}" + TOKEN_END,
       keywords=("cosmo_",), validator="vendor_token", anchor="keyword"),
    Rule("instagram-token", "saas", TOKEN_START + r"IGQV[\w\-]{100,}",
       keywords=("igqv",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # A New Relic license key: 36 characters then NRAL (an EU one begins eu01x).
    Rule("new-relic-license", "saas", TOKEN_START + r"[a-z0-9]{36}NRAL" + TOKEN_END,
       keywords=("nral",), entropy=3.0, validator="vendor_token"),
    # Mailgun's newer private keys: three hex groups (32, 8 and 8 digits).
    Rule("mailgun-key", "saas", TOKEN_START + r"[a-f0-9]{32}-[a-f0-9]{8}-[a-f0-9]{8}" + TOKEN_END,
       scope="run", validator="vendor_token"),
    Rule("tavily-key", "ai", TOKEN_START + r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{32}" + TOKEN_END,
       keywords=("tvly-",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("together-key", "ai", TOKEN_START + r"tgp_v1_[\w\-]{40,50}" + TOKEN_END,
       keywords=("tgp_v1_",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    Rule("llamacloud-key", "ai", TOKEN_START + r"llx-[A-Za-z0-9_\-]{40,60}" + TOKEN_END,
       keywords=("llx-",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # "sk-" and 32 hex digits: the keys of DeepSeek and of other OpenAI-compatible services.
    Rule("sk-hex-key", "ai", TOKEN_START + r"sk-[a-f0-9]{32}" + TOKEN_END,
       keywords=("sk-",), entropy=3.0, validator="vendor_token", anchor="keyword"),
    # --- credentials in URLs, headers, command lines, assignments --------------------
    Rule("url-credentials", "url-credentials",
       # a "#" left raw inside the password (it should be %23) does not end the URL before its "@";
       # a "#" with nothing after it (``http://host:80#@evil/``, an open-redirect payload) still does
       r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://(?P<secret>[^\s:@/?#\"'<>]*:[^\s@/?#\"'<>]+(?:#[^\s@/?#\"'<>\\]+)*)"
       r"@[^\s/?#@\"'<>]",
       keywords=("://",), validator="url_credentials"),
    Rule("auth-header", "url-credentials",
       r"(?i)(?<![\w\-])(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
       r"(?:(?:bearer|basic|token|api-?token|apikey|digest|negotiate|ntlm|sso-key|key)[ \t]+)?"
       r"(?P<secret>[A-Za-z0-9+/=._~\-:%]{8,})",
       keywords=("authorization",), validator="auth_header", anchor="keyword"),
    # ``Bearer X`` / ``Basic X`` wherever it sits: a code string, a recorded HTTP cassette's list
    # item, a test's expected header. The scheme word is the key; a value with no digit is prose.
    Rule("auth-scheme-token", "url-credentials",
       r"(?<![\w\-])(?i:bearer|basic)[ \t]+(?P<secret>[A-Za-z0-9+/=._~\-]{16,})(?![\w\-])",
       keywords=("bearer", "basic"), entropy=3.0, validator="has_digit", anchor="keyword"),
    # A NATS nkey seed: "S", the key type, then 56 base32 characters (the seed of an
    # operator, account, user, server or cluster signing key).
    Rule("nkey-seed", "cloud", r"(?<![A-Za-z0-9])S[UAONCXP][A-Z2-7]{56}(?![A-Za-z0-9])", scope="run", entropy=3.0),
    Rule("cli-user-password", "url-credentials",
       r"(?:(?<=\s)-u|--user)(?:[ \t]+|=)(?P<secret>[^\s]+)",
       keywords=("-u", "--user"), validator="cli_user", anchor="keyword"),
    Rule("netrc-password", "url-credentials",
       r"(?i)(?<![\w\-])(?:machine[ \t]+\S+|default)(?:\s+(?:login|account|port|macdef)[ \t]+\S+){0,4}\s+password[ \t]+(?P<secret>\S+)",
       keywords=("machine", "default"), validator="plausible", anchor="keyword"),
    Rule("pgpass-line", "url-credentials",
       r"(?m)^(?:[A-Za-z0-9.\-_\[\]]+|\*):(?:\d{1,5}|\*):[^\s:]+:[^\s:]+:(?P<secret>(?:[^\s:\\]|\\.){1,200})[ \t]*\r?$",
       validator="plausible"),
    Rule("mysql-password", "url-credentials",
       r"(?<![\w\-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb|mariadb-dump)(?:[ \t]+[^\s|;&]+){0,12}?"
       r"[ \t]+-p(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"|;&]+)",
       keywords=("mysql", "mariadb"), validator="cli_password", anchor="keyword"),
    Rule("sshpass-password", "url-credentials",
       r"(?<![\w\-])sshpass(?:[ \t]+-[a-oq-z]\S*)*[ \t]+-p[ \t]*(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"]+)",
       keywords=("sshpass",), validator="cli_password", anchor="keyword"),
    # Other tools that take a password on their command line, each by its own flag
    # (docker's "-p" is a port mapping except after "login"): runbooks, shell history.
    Rule("cli-password", "url-credentials",
       r"(?<![\w\-])(?:redis-cli(?:[ \t]+[^\s|;&]+){0,12}?[ \t]+-a[ \t]+"
       r"|(?:docker|podman|nerdctl|buildah|skopeo)[ \t]+login(?:[ \t]+[^\s|;&]+){0,8}?[ \t]+(?:-p|--password)(?:[ \t]+|=)"
       r"|ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-w[ \t]+"
       r"|(?:sqlcmd|osql|isql|bcp)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-P[ \t]*"
       r"|openssl(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+(?:-k[ \t]+|-pass(?:in|out)?[ \t]+pass:)"
       r"|(?:keytool|jarsigner)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-(?:src|dest)?(?:store|key)pass[ \t]+"
       r"|--(?:[a-z0-9]+-){0,3}pass(?:word|phrase)[ \t]+(?=[^\s\-]))"
       r"(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"|;&]+)",
       keywords=("redis-cli", "docker", "podman", "nerdctl", "buildah", "skopeo", "ldap", "sqlcmd", "osql", "isql",
                 "bcp", "openssl", "keytool", "jarsigner", "--"),
       validator="flag_password", anchor="keyword"),
    # SQL that sets a password, in a CREATE, ALTER or GRANT statement: PostgreSQL's
    # [ENCRYPTED] PASSWORD '...', MySQL's and Oracle's IDENTIFIED BY (Oracle's unquoted).
    Rule("sql-password", "url-credentials",
       r"(?i)(?<![\w\-])(?:CREATE|ALTER|GRANT)[ \t][^\n;]{0,300}?[ \t]"
       r"(?:IDENTIFIED[ \t]+BY[ \t]+(?:PASSWORD[ \t]+)?|PASSWORD[ \t]+(?=['\"]))"
       r"(?P<secret>''(?:'')?[^'\s]{1,200}''|'(?:[^'\n]|'')+'|\"[^\"\n]+\"|[^\s;'\"]+)",  # ''X'': run from a string
       keywords=("password", "identified"), validator="cli_password"),
    # A password set by a macro: C's #define, an RPM spec's %define/%global (also JSON-escaped; a bare
    # value only when it ends the line, as in a spec file). One blank or escaped tab per step: a run of blanks
    # inside a repeated run (``(?:[ \t]+|\\t)+``) split them every way, exponential (25 blanks: three seconds).
    Rule("macro-password", "assignment",
       r"(?i)(?:#define|%define|%global)(?:[ \t]|\\t)+(?P<key>[\w.\-]{0,60}?(?:pass|pwd|secret|token)[\w.\-]{0,60}?)"
       r"(?:[ \t]|\\t)+(?P<value>\\?\"(?:[^\"\\\n]|\\[^\"\n]){1,200}\\?\"|'[^'\n]{1,200}'|[^\s\"'\\(){}]{1,200}(?=[ \t]*\r?(?:\n|$)))",
       keywords=("#define", "%define", "%global"), validator="assignment", anchor="keyword"),
    # A literal compared with a credential (``if (password !== "X")``, ``if (api_key != "X")``) is the credential;
    # so is one on the left (``if ("X" == password)``, the "Yoda" order some style guides ask for).
    Rule("compared-secret", "assignment",
       r"(?i)(?<![\w.\-])(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd|key)[\w.\-]{0,80}?)[ \t]*(?P<op>!==?|===?)[ \t]*"
       r"(?P<value>\"(?:[^\"\\\n]|\\.){1,200}\"|'(?:[^'\\\n]|\\.){1,200}')",
       keywords=("secret", "token", "pass", "pwd", "key"), validator="compared_secret"),
    Rule("compared-secret", "assignment",
       r"(?i)(?<![\w\\])(?P<value>\"(?:[^\"\\\n]|\\.){1,200}\"|'(?:[^'\\\n]|\\.){1,200}')[ \t]*(?P<op>!==?|===?)[ \t]*"
       r"(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd|key)[\w.\-]{0,80}?)(?![\w.\-(\[])",
       keywords=("secret", "token", "pass", "pwd", "key"), validator="compared_secret"),
    # A credential word opening a statement, its one argument a quoted literal: a directive of a config file or a
    # call without parentheses (Chef's and Ruby's DSLs: ``password "X"``; ``secret "X";``). The bare command names
    # ``passwd`` and ``pwd`` take a user or nothing, so only the full words count; the value has no space (a prompt
    # or a message has).
    Rule("directive-secret", "assignment",
       r"(?im)^[ \t]*(?P<key>[\w.\-]{0,80}?(?:password|passphrase|secret|token)[\w.\-]{0,80}?)[ \t]+"
       r"(?P<value>\"[^\"\s\\]{1,200}\"|'[^'\s\\]{1,200}')[ \t]*;?[ \t]*\r?$",
       keywords=("password", "passphrase", "secret", "token"), validator="directive_secret", anchor="line"),
    # Shortened password keys (PSWD, PASWRD, PSSWORD, pw) beside a value: ``X3_PSWD=...``, ``user:admin pw:...``.
    Rule("short-password-key", "assignment",
       r"(?i)(?<![A-Za-z0-9])(?P<key>(?:[\w.]{0,40}[_.\-])?(?:p(?:s{1,2}w(?:o?r)?d|as(?:w(?:o?r)?d))|pw))"
       r"(?P<kq>[\"']?)[ \t]*(?P<op>:=|=|:)[ \t]*(?P<value>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|[^\s\"',;]{1,200})",
       keywords=("pw", "psw", "pssw", "pasw"), validator="short_password"),
    # libcurl's password options: the value, or the part after "user:" of USERPWD.
    Rule("curl-option-password", "url-credentials",
       r"CURLOPT_(?:PROXY)?(?:(?P<pair>USERPWD)|PASSWORD|KEYPASSWD|TLSAUTH_PASSWORD)[ \t]*,[ \t]*(?:L|u8|u|U)?(?P<q>[\"'])"
       r"(?(pair)[^\"':\n]*:)(?P<secret>[^\"'\n]{1,200})(?P=q)",
       keywords=("curlopt_",), validator="cli_password", anchor="keyword"),
    # A command-line flag that names a token or secret, then its value (``--token X``, ``-secret X``).
    Rule("cli-token", "url-credentials",
       r"(?<![\w\-])--?(?i:(?:[a-z0-9]+[\-_]){0,3}(?:token|secret|bearer))[ \t]+"
       r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s'\"|;&]+)",
       keywords=("token", "secret", "bearer"), validator="flag_token"),
    # PowerShell turns a plain-text password into a SecureString: the plain text is the secret.
    Rule("securestring-password", "url-credentials",
       r"(?i)ConvertTo-SecureString(?:[ \t]+-(?:String|AsPlainText|Force)\b)*[ \t]+"
       r"(?P<secret>\\?\"(?:[^\"\\\n]|\\[^\"\n])+\\?\"|'[^'\n]+'|[^\s\"'$(|;\-][^\s|;]*)",
       keywords=("convertto-securestring",), validator="cli_password", anchor="keyword"),
    Rule("prose-password", "assignment",
       r"(?i)(?<![\w\-])(?:pass(?:word|phrase|code|wort)|pin(?:[ \-]?(?:code|number))?)"
       r"[ \t]+(?:is|was|will be|is now|is set to|ist|lautet)[ \t:]+[\"'\u201c\u2018]?(?P<secret>[^\s\"'\u201d\u2019]{4,64}?)[\"'\u201d\u2019]?"
       r"(?=[\s,;!?)]|[.:](?:\s|$)|$)",
       keywords=("password", "passphrase", "passcode", "passwort", "pin"),
       validator="prose_secret", anchor="keyword"),
    Rule("password-hash", "password-hash",
       r"\$(?:1|apr1|md5)\$[./0-9A-Za-z]{1,8}\$[./0-9A-Za-z]{22}(?![./0-9A-Za-z])"
       r"|\$[56]\$(?:rounds=\d{1,9}\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{43,86}(?![./0-9A-Za-z])"
       r"|\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}(?![./0-9A-Za-z])"
       r"|\$(?:y|gy|7)\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{1,86}\$[./A-Za-z0-9]{43}(?![./0-9A-Za-z])"
       r"|\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
       r"|\$(?:pbkdf2(?:-sha\d+)?|sha1|scrypt)\$[\w=,.$/+\-]{20,}",
       keywords=("$1$", "$apr1$", "$md5$", "$5$", "$6$", "$2$", "$2a$", "$2b$", "$2x$", "$2y$", "$y$", "$gy$", "$7$",
                 "$argon2", "$pbkdf2", "$sha1$", "$scrypt$"),
       anchor="keyword"),
    Rule("config-key-value", "assignment",
       r"(?i)<add\s+key=\"(?P<key>[^\"]{1,100})\"\s+value=(?P<value>\"[^\"]{1,1000}\")",
       keywords=("<add",), validator="assignment", anchor="keyword"),
    Rule("secret-assignment", "assignment",
       r"(?i)(?<![\w.\-])(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd|auth|cred|key)[\w.\-]{0,80}?)"
       r"(?:\[[0-9]{0,6}\](?=[ \t]*=[ \t]*\"))?"  # a C array declarator: ``char password[] = "…"``, ``secret[25] = "…"``
       r"(?P<kq>[\"'`]?\]?)"
       r"(?:[ \t]*(?::[ \t]*)?(?:string|str|String|const|final|char\s*\*|bytes)\b)?"  # one blank run (two split it every way)
       r"(?:[ \t]*(?P<op>:{1,3}=|=>|[?.+]?=|==|:|,)[ \t]*|(?P<xop>>)\s*)"
       r"(?:!!\w+[ \t]+)?(?:(?:bearer|basic|token)[ \t]+)?"
       r"(?P<value>\\?\"(?:[^\"\\\n]|\\[^\"\n]){1,1000}\\?\"|'(?:[^'\\\n]|\\.){1,1000}'|`[^`\n]{1,1000}`"
       r"|(?:[^\s\"'`,;&<>(){}\[\]\\|\uff0c\uff1b\u3001\u3002]|\\(?![nrt\\\"']))+)",
       keywords=("secret", "token", "pass", "pwd", "auth", "cred", "key"), validator="assignment"),
    # The blanks after the operator are read by one quantifier (two around an optional indicator would split a
    # long run of blanks every way before failing: quadratic on a line of tabs after a key).
    Rule("secret-block", "assignment",
       r"(?im)^(?P<indent>[ \t]*)(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd)[\w.\-]{0,80}?)[ \t]*[:=][ \t]*(?:[|>][\-+]?[ \t]*)?\r?\n"
       r"(?:[ \t]*\r?\n){0,8}"  # YAML allows blank lines before the value
       r"(?P<block>(?:(?P=indent)[ \t]+\S[^\n]*(?:\n|$))+)",
       keywords=("secret", "token", "pass", "pwd"), validator="secret_block", anchor="line"),
    # The value of a credential-named key, whole, found by context.py (its pattern is not used:
    # the key vocabulary and a value scanner per syntax decide; see docs/sanitize.md).
    Rule("credential-value", "assignment", r"(?!)", scope="context"),
    Rule("high-entropy-string", "high-entropy",
       r"(?:(?<=[=:\"'`])|(?<=[=:] ))(?P<secret>[A-Za-z0-9+/_\-]{20,}={0,2})(?![A-Za-z0-9+/=_\-])",
       validator="high_entropy", scope="run"),
    # --- personal data ------------------------------------------------------------------
    Rule("email", "email",
       # the local part in any script (RFC 6531: josé.garcía@...), "_" inside it (li_wei@), the domain in ASCII
       r"(?<![\w.%+\-])[^\W_](?:[\w.%+\-]{0,62}[\w%+\-])?@"
       r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+(?:[A-Za-z]{2,24}|xn--[A-Za-z0-9\-]{2,59})(?![\w\-]|\.[A-Za-z0-9])",
       keywords=("@",), validator="email"),
    Rule("phone", "phone",
       r"(?:"
       r"\+[1-9]\d{0,2}(?:[ .\-]?\(?\d{1,5}\)?){1,6}"  # E.164 / international
       r"|00[1-9]\d{0,2}(?:[ .\-]\(?\d{1,5}\)?){2,6}"  # 00 international prefix
       r"|(?:1[ .\-])?(?:\([2-9]\d{2}\)[ .\-]?[2-9]\d{2}[ .\-]|[2-9]\d{2}(?P<nsep>[ .\-])[2-9]\d{2}(?P=nsep))\d{4}"  # North America, one separator
       r"|0[1-9]\d{0,3}(?:[ .\-/]\d{2,8}){1,4}"  # national numbers with a trunk 0 (FR, UK, DE, NL, ...)
       r")(?![\w\-/]|\.\d)",
       validator="phone", scope="number"),
    Rule("phone-labelled", "phone",
       r"(?i)\b(?:phone|tel|telephone|mobile|cell|fax|whatsapp|telefon|t[ée]l[ée]phone|handy)\b[^\n\d+(]{0,20}"
       r"(?P<secret>\+?\(?\d[\d ()./\-]{5,20}\d)(?![\w\-])",
       keywords=("phone", "tel", "mobile", "cell", "fax", "whatsapp", "handy", "t\u00e9l\u00e9phone"),
       validator="phone_labelled", anchor="keyword"),
    Rule("card-number", "card",
       r"\d(?:\d{3}([ \-]?)\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{3}([ \-]?)\d{6}\2\d{5}|\d{12,18})"
       r"(?![\w\-]|\.\d)",
       validator="card", scope="number"),
    Rule("iban", "iban", r"(?i:[A-Z][A-Z]\d\d(?: ?[A-Z0-9]){11,30})(?![A-Za-z0-9])", validator="iban"),
    Rule("uk-national-insurance", "national-id",
       # grouped in pairs, or the six digits whole with a space after the letters (``PR 123612C``); in one case
       r"(?i)(?<![A-Za-z0-9])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
       r"(?:(?P<sep>[ \-]?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)|[ ]?\d{6}[ ]?)[A-D](?![A-Za-z0-9])",
       validator="uk_nino"),
    Rule("de-tax-id", "national-id", r"(?<![\d.,\-/])[1-9]\d(?P<sep>[ ]?)\d{3}(?P=sep)\d{3}(?P=sep)\d{3}(?![\d\-/]|[.,]\d)",
       validator="de_tax_id", scope="number"),
    Rule("us-ssn", "ssn", r"\d{3}([\- .])\d{2}\1\d{4}(?![\w\-]|\.\d)", validator="ssn", scope="number"),
    Rule("us-ssn-labelled", "ssn",
       r"(?i:\b(?:ssn|social security(?: number| no\.?)?)\b[^\n\d]{0,20})(?P<secret>\d{9})(?!\d)",
       keywords=("ssn", "social security"), validator="ssn", anchor="keyword"),
    Rule("ipv4", "ip",
       r"\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\w]|\.\d)",  # from the first dot; the check takes back the first number
       validator="public_ip"),
    Rule("ipv6", "ip",
       r":[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:]*(?:\d{1,3}(?:\.\d{1,3}){3})?(?![\w:]|\.[\w.])",  # a full stop may end the sentence
       validator="public_ipv6"),
)

# Findings of the structure scanners, which read where a value stands rather
# than its shape: ``columns.py`` (every cell under a header such as "ssn" or
# "password") and ``names.py`` (names where a document marks them: salutations,
# sign-offs, mail headers, form labels, honorifics; labelled dates of birth).
# Their rows carry no pattern the keyword scan runs (scope "structure"); they
# are here so that ``[sanitize] disable`` and the summary's categories know them.
_NEVER = r"(?!)"
STRUCTURE_RULES: tuple[Rule, ...] = tuple(
    Rule(rule_id, category, _NEVER, scope="structure") for rule_id, category in (
        ("password-column", "assignment"),
        ("pin-column", "assignment"),
        ("ssn-column", "ssn"),
        ("phone-column", "phone"),
        ("email-column", "email"),
        ("account-column", "iban"),
        ("card-column", "card"),
        ("id-number-column", "national-id"),
        ("address-column", "address"),
        ("date-of-birth", "date-of-birth"),
        ("person-name", "person-name"),
    )
)
RULES += STRUCTURE_RULES

RULES_BY_ID = {rule.id: rule for rule in RULES}
