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
L = r"(?<![A-Za-z0-9_\-])"
R = r"(?![A-Za-z0-9_\-])"


def keyed(names: str, value: str) -> str:
    """An identifier containing one of ``names``, a separator, then ``value`` as the secret.

    Covers ``etsyToken = "..."``, ``"cloudflare": "..."``, ``ETSY_KEY: ...``,
    ``<sumoToken>...``, ``("ARTIFACTORY", "...")``.
    """
    return (
        r"(?i:(?<![\w.\-])[\w.\-]{0,40}?(?:" + names + r")[\w.\-]{0,40}?[\"'`\]]{0,2}[ \t]*"
        r"(?::{1,3}=|=>|[?.+]?=|:|,|>)[ \t\"'`]{0,4}\s{0,6})(?P<secret>" + value + r")(?![\w\-])"
    )


R_ = Rule  # short alias for the table below

RULES: tuple[Rule, ...] = (
    # --- private keys (multi-line) -------------------------------------------
    # BEGIN to END whatever lies between (Proc-Type/DEK-Info, Version:, Comment:
    # headers, the blank line of every armour, CRLF, escaped \n in a string);
    # without an END within the budget, every following line that looks like
    # armour (a header, base64, a blank line, the =CRC line) goes too.
    R_("private-key", "private-key",
       r"-----BEGIN[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----(?:(?P<body>[\s\S]{0,32768}?)"
       r"-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----"
       r"|(?P<open>(?:[ \t]*\r?\n[ \t]*(?:[A-Za-z][\w\-]{0,40}:[^\r\n]*|[A-Za-z0-9+/=]{1,128})[ \t]*\r?(?=\n|\Z)"
       r"|[ \t]*\r?\n[ \t]*\r?(?=\n))*)(?:\r?\n-----END[ A-Z0-9]{0,30}PRIVATE KEY(?: BLOCK)?-----)?)",
       keywords=("-----begin",), validator="key_block", scope="document"),
    R_("putty-private-key", "private-key",
       r"PuTTY-User-Key-File-\d+:(?:[\s\S]{0,16384}?Private-MAC:[ \t]*[0-9a-fA-F]+|[\s\S]{16384})",
       keywords=("putty-user-key-file",), scope="document"),
    R_("age-secret-key", "private-key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
       keywords=("age-secret-key-1",), anchor="keyword"),
    # --- cloud -----------------------------------------------------------------
    R_("aws-access-key", "cloud",
       r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z2-7]{16}(?![A-Za-z0-9])",
       keywords=("akia", "asia", "abia", "acca", "a3t", "agpa", "aida", "aipa", "anpa", "anva", "apka", "aroa"),
       entropy=3.0, anchor="keyword"),
    R_("aws-secret-key", "cloud", keyed(r"aws", r"[A-Za-z0-9/+]{40}"), keywords=("aws",), entropy=4.0),
    R_("aws-bedrock-key", "cloud",
       r"ABSK[A-Za-z0-9+/]{100,}={0,2}|bedrock-api-key-[A-Za-z0-9+/]{20,}={0,2}",
       keywords=("absk", "bedrock-api-key-"), entropy=3.0, anchor="keyword"),
    R_("gcp-api-key", "cloud", L + r"AIza[\w\-]{35}" + R, keywords=("aiza",), entropy=3.0, anchor="keyword"),
    R_("azure-ad-client-secret", "cloud",
       r"(?<![\w~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![\w~.\-])",
       keywords=("q~",), entropy=3.0),
    R_("azure-storage-key", "cloud", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{86}==)", keywords=("accountkey",)),
    R_("azure-sas-signature", "cloud", r"[?&]sig=(?P<secret>[A-Za-z0-9%+/]{40,}(?:%3D|=){0,2})", keywords=("sig=",)),
    R_("alibaba-access-key", "cloud", L + r"LTAI[A-Za-z0-9]{12,20}" + R, keywords=("ltai",), entropy=3.0, anchor="keyword"),
    R_("digitalocean-token", "cloud", L + r"do[opr]_v1_[a-f0-9]{64}" + R, keywords=("_v1_",)),
    R_("heroku-api-key", "cloud",
       L + r"HRKU-AA[0-9A-Za-z_\-]{58}" + R + "|" +
       keyed("heroku", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
       keywords=("hrku-", "heroku")),
    R_("yandex-token", "cloud",
       L + r"t1\.[A-Za-z0-9_\-]+={0,2}\.[A-Za-z0-9_\-]{60,}={0,2}|" + L + r"AQVN[A-Za-z0-9_\-]{35,38}" + R + "|"
       + keyed("yandex", r"YC[A-Za-z0-9_\-]{38}"),
       keywords=("t1.", "aqvn", "yandex"), entropy=3.0),
    R_("scalingo-token", "cloud", L + r"tk-us-[\w\-]{48}" + R, keywords=("tk-us-",), anchor="keyword"),
    R_("flyio-token", "cloud",
       L + r"fo1_[\w\-]{43}" + R + "|" + L + r"fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3}",
       keywords=("fo1_", "fm1", "fm2_"), entropy=3.0, anchor="keyword"),
    R_("vault-token", "cloud", L + r"hv[sb]\.[\w\-]{24,}" + R, keywords=("hvs.", "hvb."), entropy=3.0, anchor="keyword"),
    R_("openshift-token", "cloud", L + r"sha256~[\w\-]{43}" + R, keywords=("sha256~",), entropy=3.0, anchor="keyword"),
    R_("databricks-token", "cloud", L + r"dapi[a-f0-9]{32}(?:-\d)?" + R, keywords=("dapi",), anchor="keyword"),
    R_("pulumi-token", "cloud", L + r"pul-[a-f0-9]{40}" + R, keywords=("pul-",), anchor="keyword"),
    R_("terraform-cloud-token", "cloud", r"[A-Za-z0-9]{14}\.atlasv1\.[\w=\-]{40,120}", keywords=("atlasv1",), entropy=3.0),
    R_("planetscale-token", "cloud", L + r"pscale_(?:pw|tkn|oauth)_[\w=.\-]{20,}", keywords=("pscale_",), entropy=3.0, anchor="keyword"),
    R_("doppler-token", "cloud", r"(?i)" + L + r"dp\.pt\.[a-z0-9]{43}" + R, keywords=("dp.pt.",), anchor="keyword"),
    R_("infracost-token", "cloud", r"(?<![\w.\-])ico-[a-zA-Z0-9]{32}" + R, keywords=("ico-",), entropy=3.0, anchor="keyword"),
    R_("prefect-token", "cloud", L + r"pnu_[a-zA-Z0-9]{36}" + R, keywords=("pnu_",), entropy=3.0, anchor="keyword"),
    R_("octopus-deploy-key", "cloud", L + r"API-[A-Z0-9]{26}" + R, keywords=("api-",), entropy=3.0, anchor="keyword"),
    R_("cloudflare-api-key", "cloud",
       L + r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}" + R + "|" + keyed("cloudflare", r"[\w\-]{40}|[a-f0-9]{37}"),
       keywords=("v1.0-", "cloudflare"), entropy=3.0),
    R_("sumologic-key", "cloud", keyed("sumo", r"su[a-zA-Z0-9]{12}|[a-zA-Z0-9]{64}"), keywords=("sumo",), entropy=3.0,
       validator="has_digit"),
    R_("kubernetes-secret", "cloud",
       r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\r?\n(?P<block>(?:(?P=indent)[ \t]+[^\n]*(?:\n|$))+)",
       keywords=("kind: secret", "kind:secret", "kind: \"secret", "kind: 'secret"), validator="kubernetes_secret",
       scope="document"),
    # --- code hosting and package registries ----------------------------------
    R_("github-token", "code-hosting",
       L + r"gh[pousr]_[A-Za-z0-9]{36}" + R + "|" + L + r"github_pat_\w{60,}",
       keywords=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), entropy=3.0, anchor="keyword"),
    R_("gitlab-token", "code-hosting",
       L + r"(?:glpat|gldt|glrt|glcbt|glft|glsoat|glffct)-[\w\-]{20,}(?:\.[\w\-]{2,})?" + R + "|"
       + L + r"glptt-[\w\-]{40}" + R + "|" + L + r"glimt-[\w\-]{25,}" + R + "|" + L + r"glagent-[\w\-]{50,}" + R
       + "|" + L + r"gloas-[\w\-]{64,}" + R + "|" + L + r"GR1348941[\w\-]{20,}" + R
       + "|_gitlab_session=[0-9a-z]{32}",
       keywords=("glpat-", "gldt-", "glrt-", "glcbt-", "glft-", "glsoat-", "glffct-", "glptt-", "glimt-",
                 "glagent-", "gloas-", "gr1348941", "_gitlab_session="),
       entropy=3.0, anchor="keyword"),
    R_("npm-token", "code-hosting", L + r"npm_[A-Za-z0-9]{36}" + R, keywords=("npm_",), entropy=3.0, anchor="keyword"),
    R_("pypi-token", "code-hosting", L + r"pypi-AgE[\w\-]{70,}", keywords=("pypi-age",), anchor="keyword"),
    R_("rubygems-token", "code-hosting", L + r"rubygems_[a-f0-9]{48}" + R, keywords=("rubygems_",), anchor="keyword"),
    R_("clojars-token", "code-hosting", r"(?i)" + L + r"CLOJARS_[a-z0-9]{60}" + R, keywords=("clojars_",), anchor="keyword"),
    R_("sonar-token", "code-hosting",
       L + r"sq[pua]_[A-Za-z0-9]{40}" + R + "|" + keyed("sonar", r"[A-Za-z0-9]{40}"),
       keywords=("sqp_", "squ_", "sqa_", "sonar"), entropy=3.0),
    R_("artifactory-token", "code-hosting",
       L + r"AKCp[A-Za-z0-9]{69}" + R + "|" + L + r"cmVmd[A-Za-z0-9]{59}" + R + "|"
       + keyed("jfrog|artifactory|bintray|xray", r"[a-z0-9]{64}|[a-z0-9]{73}"),
       keywords=("akcp", "cmvmd", "jfrog", "artifactory", "bintray", "xray"), entropy=3.0),
    R_("sourcegraph-token", "code-hosting",
       L + r"sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}" + R + "|" + keyed("sourcegraph", r"[a-fA-F0-9]{40}"),
       keywords=("sgp_", "sourcegraph"), entropy=3.0),
    # --- chat ---------------------------------------------------------------------
    R_("slack-token", "chat",
       L + r"xoxe\.xox[bp]-\d-[A-Za-z0-9]{40,}" + R + "|"
       + L + r"xox[bpseo]-(?:[0-9A-Za-z]+-)*[0-9A-Za-z]+(?![\w#*\-])" + "|"
       + L + r"xox[ar]-(?:[0-9A-Za-z]+-)*[0-9A-Za-z]+(?![\w#*\-])" + "|"
       + L + r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{40,}" + R,
       keywords=("xox", "xapp-"), validator="slack_token", entropy=2.5, anchor="keyword"),
    R_("slack-webhook", "chat",
       r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
       keywords=("hooks.slack.com",)),
    R_("discord-webhook", "chat", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w\-]{20,}",
       keywords=("discord",)),
    R_("discord-bot-token", "chat",
       r"(?<![\w\-.])[A-Za-z0-9_\-]{23,28}\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}(?![\w\-.])",
       scope="run", entropy=3.5),
    R_("telegram-bot-token", "chat", r"(?<![\w:])\d{5,16}:A[A-Za-z0-9_\-]{32,40}" + R, keywords=(":a",), entropy=3.0),
    R_("teams-webhook", "chat",
       r"https://[\w.\-]+\.webhook\.office\.com/webhookb2/[\w@/.\-]{20,}|https://outlook\.office\.com/webhook/[\w@/.\-]{20,}",
       keywords=("webhook.office.com", "outlook.office.com/webhook")),
    # --- payment --------------------------------------------------------------------
    R_("stripe-key", "payment", L + r"(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,}" + R + "|" + L + r"whsec_[A-Za-z0-9]{32,}" + R,
       keywords=("sk_live_", "sk_test_", "sk_prod_", "rk_live_", "rk_test_", "rk_prod_", "whsec_"), entropy=3.0, anchor="keyword"),
    R_("square-token", "payment",
       L + r"(?:EAAA|sq0atp-)[\w\-]{22,60}" + R + "|" + L + r"sq0csp-[0-9A-Za-z\\\-_]{43}",
       keywords=("eaaa", "sq0atp-", "sq0csp-"), entropy=3.0, anchor="keyword"),
    R_("braintree-token", "payment", r"access_token\$production\$[0-9a-z]{16}\$[0-9a-f]{32}", keywords=("access_token$",), anchor="keyword"),
    R_("plaid-token", "payment",
       r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
       keywords=("access-",), anchor="keyword"),
    R_("flutterwave-key", "payment", L + r"FLW(?:PUBK|SECK)(?:_TEST)?-[a-f0-9]{12,32}(?:-X)?" + R,
       keywords=("flwpubk", "flwseck"), anchor="keyword"),
    R_("shopify-token", "payment", L + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + R,
       keywords=("shpat_", "shpca_", "shppa_", "shpss_"), anchor="keyword"),
    R_("easypost-token", "payment", L + r"EZ[AT]K[A-Za-z0-9]{54}" + R, keywords=("ezak", "eztk"), anchor="keyword"),
    R_("duffel-token", "payment", L + r"duffel_(?:test|live)_[\w=\-]{43}" + R, keywords=("duffel_",), anchor="keyword"),
    R_("shippo-token", "payment", L + r"shippo_(?:live|test)_[a-fA-F0-9]{40}" + R, keywords=("shippo_",), anchor="keyword"),
    R_("gocardless-token", "payment", keyed("gocardless", r"live_[\w=\-]{40}"), keywords=("gocardless",)),
    R_("facebook-token", "saas",
       r"(?<![\w])\d{15,16}(?:\||%7C)[\w\-]{27,40}" + R + "|" + L + r"EAA[MC][A-Za-z0-9]{100,}",
       keywords=("facebook", "fb_", "%7c", "eaam", "eaac"), entropy=3.0),
    # --- AI ---------------------------------------------------------------------------
    R_("openai-api-key", "ai",
       L + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}" + R + "|"
       + L + r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}" + R,
       keywords=("t3blbkfj", "sk-proj-", "sk-svcacct-", "sk-admin-")),
    R_("anthropic-api-key", "ai", L + r"sk-ant-(?:api|admin|sid)\d{2}-[\w\-]{80,}", keywords=("sk-ant-",), anchor="keyword"),
    R_("huggingface-token", "ai",
       r"(?<![A-Za-z0-9])hf_[A-Za-z]{34}(?![A-Za-z0-9])|" + L + r"api_org_[A-Za-z]{34}(?![A-Za-z0-9])",
       keywords=("hf_", "api_org_"), entropy=3.0, anchor="keyword"),
    R_("perplexity-api-key", "ai", L + r"pplx-[A-Za-z0-9]{48}" + R, keywords=("pplx-",), entropy=3.0, anchor="keyword"),
    R_("groq-api-key", "ai", L + r"gsk_[A-Za-z0-9]{52}" + R, keywords=("gsk_",), entropy=3.0, anchor="keyword"),
    R_("replicate-token", "ai", L + r"r8_[A-Za-z0-9]{37}" + R, keywords=("r8_",), entropy=3.0, anchor="keyword"),
    R_("xai-api-key", "ai", L + r"xai-[A-Za-z0-9]{80}" + R, keywords=("xai-",), entropy=3.0, anchor="keyword"),
    # --- SaaS ---------------------------------------------------------------------------
    R_("sendgrid-token", "saas", L + r"SG\.[A-Za-z0-9=_\-.]{66}" + R, keywords=("sg.",), entropy=3.0, anchor="keyword"),
    R_("sendinblue-token", "saas", L + r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}" + R, keywords=("xkeysib-",), anchor="keyword"),
    R_("mailgun-token", "saas", L + r"(?:pub)?key-[a-f0-9]{32}" + R, keywords=("key-",), entropy=3.0),
    R_("mailchimp-api-key", "saas", L + r"[0-9a-f]{32}-us\d{1,2}" + R, keywords=("-us",)),
    R_("twilio-api-key", "saas", r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])", scope="run", entropy=3.0),
    R_("new-relic-key", "saas",
       r"(?i)" + L + r"(?:NRAK-[A-Z0-9]{27}|NRJS-[a-f0-9]{19}|NRII-[a-z0-9\-]{32})" + R,
       keywords=("nrak-", "nrjs-", "nrii-"), entropy=3.0, anchor="keyword"),
    R_("sentry-token", "saas",
       L + r"sntrys_eyJ[A-Za-z0-9+/=_\-]{100,}|" + L + r"sntryu_[a-f0-9]{64}(?![A-Za-z0-9])",
       keywords=("sntrys_", "sntryu_"), anchor="keyword"),
    R_("grafana-token", "saas",
       L + r"glc_[A-Za-z0-9+/]{32,400}={0,2}|" + L + r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}" + R + "|"
       + L + r"eyJrIjoi[A-Za-z0-9]{60,100}={0,2}",
       keywords=("glc_", "glsa_", "eyjrijoi"), entropy=3.0, anchor="keyword"),
    R_("dynatrace-token", "saas", L + r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}" + R, keywords=("dt0c01.",), anchor="keyword"),
    R_("linear-api-key", "saas", L + r"lin_api_[A-Za-z0-9]{40}" + R, keywords=("lin_api_",), anchor="keyword"),
    R_("notion-token", "saas", L + r"ntn_\d{11}[A-Za-z0-9]{32,35}" + R + "|" + L + r"secret_[A-Za-z0-9]{43}" + R,
       keywords=("ntn_", "secret_"), entropy=3.0, anchor="keyword"),
    R_("postman-api-key", "saas", L + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + R, keywords=("pmak-",), anchor="keyword"),
    R_("readme-api-key", "saas", L + r"rdme_[a-z0-9]{70}" + R, keywords=("rdme_",), entropy=3.0, anchor="keyword"),
    R_("typeform-token", "saas", L + r"tfp_[\w\-.=]{59}" + R, keywords=("tfp_",), entropy=3.0, anchor="keyword"),
    R_("onepassword-token", "saas",
       L + r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}" + R + "|"
       + L + r"ops_eyJ[A-Za-z0-9+/]{200,}={0,3}",
       keywords=("a3-", "ops_eyj"), entropy=3.0, anchor="keyword"),
    R_("atlassian-token", "saas", L + r"ATATT3[A-Za-z0-9_\-=]{150,}", keywords=("atatt3",), entropy=3.0, anchor="keyword"),
    R_("adobe-secret", "saas", L + r"p8e-[A-Za-z0-9]{32}" + R, keywords=("p8e-",), entropy=3.0, anchor="keyword"),
    R_("airtable-token", "saas", L + r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}" + R, scope="run"),
    R_("authress-key", "saas",
       r"(?i)" + L + r"(?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_\-][a-z0-9\-]{10,32}\.[a-z0-9+/_=\-]{30,120}",
       keywords=(".acc_", ".acc-")),
    R_("clickhouse-secret", "saas", L + r"4b1d[A-Za-z0-9]{38}" + R, keywords=("4b1d",), entropy=3.0, anchor="keyword"),
    R_("defined-networking-token", "saas", L + r"dnkey-[a-z0-9=_\-]{26}-[a-z0-9=_\-]{52}" + R, keywords=("dnkey-",), anchor="keyword"),
    R_("dropbox-token", "saas", L + r"sl\.[A-Za-z0-9\-=_]{135}" + R, scope="run"),
    R_("frameio-token", "saas", L + r"fio-u-[\w=\-]{64}" + R, keywords=("fio-u-",), anchor="keyword"),
    R_("harness-token", "saas", L + r"(?:pat|sat)\.[\w\-]{22}\.[\w\-]{24}\.[\w\-]{20}" + R, scope="run"),
    R_("intra42-secret", "saas", L + r"s-s4t2(?:ud|af)-[a-f0-9]{64}" + R, keywords=("s-s4t2",), anchor="keyword"),
    R_("mapbox-token", "saas", r"(?i)" + L + r"[ps]k\.[a-z0-9]{60}\.[a-z0-9]{22}" + R, scope="run"),
    R_("settlemint-token", "saas", L + r"sm_(?:aat|pat|sat)_[a-z0-9]{16}" + R, keywords=("sm_aat_", "sm_pat_", "sm_sat_"), anchor="keyword"),
    R_("sidekiq-secret", "saas", keyed("contribsys", r"[a-f0-9]{8}:[a-f0-9]{8}"), keywords=("contribsys",)),
    R_("cloudant-credential", "saas", keyed("cloudant", r"[0-9a-f]{64}|[a-z]{24}"), keywords=("cloudant",)),
    R_("jwt", "jwt",
       r"(?<![\w\-])eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]*){0,3}|"
       r"(?<![\w\-])ZXlK[A-Za-z0-9+/]{60,}={0,2}",
       keywords=("eyj", "zxlk"), anchor="keyword"),
    # --- credentials in URLs, headers, command lines, assignments --------------------
    R_("url-credentials", "url-credentials",
       r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://(?P<secret>[^\s:@/?#\"'<>]*:[^\s@/?#\"'<>]+)@[^\s/?#@\"'<>]",
       keywords=("://",), validator="url_credentials"),
    R_("auth-header", "url-credentials",
       r"(?i)(?<![\w\-])(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
       r"(?:(?:bearer|basic|token|api-?token|apikey|digest|negotiate|ntlm|sso-key|key)[ \t]+)?"
       r"(?P<secret>[A-Za-z0-9+/=._~\-:%]{8,})",
       keywords=("authorization",), validator="auth_header", anchor="keyword"),
    R_("cli-user-password", "url-credentials",
       r"(?:(?<=\s)-u|--user)(?:[ \t]+|=)(?P<secret>[^\s]+)",
       keywords=("-u", "--user"), validator="cli_user", anchor="keyword"),
    R_("netrc-password", "url-credentials",
       r"(?i)(?<![\w\-])(?:machine[ \t]+\S+|default)(?:\s+(?:login|account|port|macdef)[ \t]+\S+){0,4}\s+password[ \t]+(?P<secret>\S+)",
       keywords=("machine", "default"), validator="plausible", anchor="keyword"),
    R_("pgpass-line", "url-credentials",
       r"(?m)^(?:[A-Za-z0-9.\-_\[\]]+|\*):(?:\d{1,5}|\*):[^\s:]+:[^\s:]+:(?P<secret>(?:[^\s:\\]|\\.){1,200})[ \t]*\r?$",
       validator="plausible"),
    R_("mysql-password", "url-credentials",
       r"(?<![\w\-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mariadb|mariadb-dump)(?:[ \t]+[^\s|;&]+){0,12}?"
       r"[ \t]+-p(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"|;&]+)",
       keywords=("mysql", "mariadb"), validator="cli_password", anchor="keyword"),
    R_("sshpass-password", "url-credentials",
       r"(?<![\w\-])sshpass(?:[ \t]+-[a-oq-z]\S*)*[ \t]+-p[ \t]*(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"]+)",
       keywords=("sshpass",), validator="cli_password", anchor="keyword"),
    # Other tools that take a password on their command line, each by its own flag
    # (docker's "-p" is a port mapping except after "login"): runbooks, shell history.
    R_("cli-password", "url-credentials",
       r"(?<![\w\-])(?:redis-cli(?:[ \t]+[^\s|;&]+){0,12}?[ \t]+-a[ \t]+"
       r"|(?:docker|podman|nerdctl|buildah|skopeo)[ \t]+login(?:[ \t]+[^\s|;&]+){0,8}?[ \t]+(?:-p|--password)(?:[ \t]+|=)"
       r"|ldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-w[ \t]+"
       r"|(?:sqlcmd|osql|isql|bcp)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-P[ \t]*"
       r"|openssl(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+(?:-k[ \t]+|-pass(?:in|out)?[ \t]+pass:)"
       r"|(?:keytool|jarsigner)(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-(?:src|dest)?(?:store|key)pass[ \t]+"
       r"|--(?:[a-z0-9]+-){0,3}password[ \t]+(?=[^\s\-]))"
       r"(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"|;&]+)",
       keywords=("redis-cli", "docker", "podman", "nerdctl", "buildah", "skopeo", "ldap", "sqlcmd", "osql", "isql",
                 "bcp", "openssl", "keytool", "jarsigner", "--"),
       validator="flag_password", anchor="keyword"),
    # SQL that sets a password, in a CREATE, ALTER or GRANT statement: PostgreSQL's
    # [ENCRYPTED] PASSWORD '...', MySQL's and Oracle's IDENTIFIED BY (Oracle's unquoted).
    R_("sql-password", "url-credentials",
       r"(?i)(?<![\w\-])(?:CREATE|ALTER|GRANT)[ \t][^\n;]{0,300}?[ \t]"
       r"(?:IDENTIFIED[ \t]+BY[ \t]+(?:PASSWORD[ \t]+)?|PASSWORD[ \t]+(?=['\"]))"
       r"(?P<secret>'(?:[^'\n]|'')+'|\"[^\"\n]+\"|[^\s;'\"]+)",
       keywords=("password", "identified"), validator="cli_password"),
    R_("prose-password", "assignment",
       r"(?i)(?<![\w\-])(?:pass(?:word|phrase|code|wort)|pin(?:[ \-]?(?:code|number))?)"
       r"[ \t]+(?:is|was|will be|is now|is set to|ist|lautet)[ \t:]+[\"'\u201c\u2018]?(?P<secret>[^\s\"'\u201d\u2019]{4,64}?)[\"'\u201d\u2019]?"
       r"(?=[\s,;!?)]|[.:](?:\s|$)|$)",
       keywords=("password", "passphrase", "passcode", "passwort", "pin"),
       validator="prose_secret", anchor="keyword"),
    R_("password-hash", "password-hash",
       r"\$(?:1|apr1|md5)\$[./0-9A-Za-z]{1,8}\$[./0-9A-Za-z]{22}(?![./0-9A-Za-z])"
       r"|\$[56]\$(?:rounds=\d{1,9}\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{43,86}(?![./0-9A-Za-z])"
       r"|\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}(?![./0-9A-Za-z])"
       r"|\$(?:y|gy|7)\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{1,86}\$[./A-Za-z0-9]{43}(?![./0-9A-Za-z])"
       r"|\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
       r"|\$(?:pbkdf2(?:-sha\d+)?|sha1|scrypt)\$[\w=,.$/+\-]{20,}",
       keywords=("$1$", "$apr1$", "$md5$", "$5$", "$6$", "$2$", "$2a$", "$2b$", "$2x$", "$2y$", "$y$", "$gy$", "$7$",
                 "$argon2", "$pbkdf2", "$sha1$", "$scrypt$"),
       anchor="keyword"),
    R_("config-key-value", "assignment",
       r"(?i)<add\s+key=\"(?P<key>[^\"]{1,100})\"\s+value=(?P<value>\"[^\"]{1,1000}\")",
       keywords=("<add",), validator="assignment", anchor="keyword"),
    R_("secret-assignment", "assignment",
       r"(?i)(?<![\w.\-])(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd|auth|cred|key)[\w.\-]{0,80}?)"
       r"(?P<kq>[\"'`]?\]?)"
       r"(?:[ \t]*:?[ \t]*(?:string|str|String|const|final|char\s*\*|bytes)\b)?"
       r"(?:[ \t]*(?P<op>:{1,3}=|=>|[?.+]?=|==|:|,)[ \t]*|(?P<xop>>)\s*)"
       r"(?:!!\w+[ \t]+)?(?:(?:bearer|basic|token)[ \t]+)?"
       r"(?P<value>\\?\"(?:[^\"\\\n]|\\[^\"\n]){1,1000}\\?\"|'(?:[^'\\\n]|\\.){1,1000}'|`[^`\n]{1,1000}`"
       r"|(?:[^\s\"'`,;&<>(){}\[\]\\|]|\\(?![nrt\\\"']))+)",
       keywords=("secret", "token", "pass", "pwd", "auth", "cred", "key"), validator="assignment"),
    R_("secret-block", "assignment",
       r"(?im)^(?P<indent>[ \t]*)(?P<key>[\w.\-]{0,80}?(?:secret|token|pass|pwd)[\w.\-]{0,80}?)[ \t]*[:=][ \t]*(?:[|>][\-+]?)?[ \t]*\r?\n"
       r"(?:[ \t]*\r?\n){0,8}"  # YAML allows blank lines before the value
       r"(?P<block>(?:(?P=indent)[ \t]+\S[^\n]*(?:\n|$))+)",
       keywords=("secret", "token", "pass", "pwd"), validator="secret_block", anchor="line"),
    # The value of a credential-named key, whole, found by context.py (its pattern is not used:
    # the key vocabulary and a value scanner per syntax decide; see docs/sanitize.md).
    R_("credential-value", "assignment", r"(?!)", scope="context"),
    R_("high-entropy-string", "high-entropy",
       r"(?:(?<=[=:\"'`])|(?<=[=:] ))(?P<secret>[A-Za-z0-9+/_\-]{20,}={0,2})(?![A-Za-z0-9+/=_\-])",
       validator="high_entropy", scope="run"),
    # --- personal data ------------------------------------------------------------------
    R_("email", "email",
       # the local part in any script (RFC 6531: josé.garcía@...), "_" inside it (li_wei@), the domain in ASCII
       r"(?<![\w.%+\-])[^\W_](?:[\w.%+\-]{0,62}[\w%+\-])?@"
       r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w\-]|\.[A-Za-z0-9])",
       keywords=("@",), validator="email"),
    R_("phone", "phone",
       r"(?:"
       r"\+[1-9]\d{0,2}(?:[ .\-]?\(?\d{1,5}\)?){1,6}"  # E.164 / international
       r"|00[1-9]\d{0,2}(?:[ .\-]\(?\d{1,5}\)?){2,6}"  # 00 international prefix
       r"|(?:1[ .\-])?(?:\([2-9]\d{2}\)[ .\-]?[2-9]\d{2}[ .\-]|[2-9]\d{2}(?P<nsep>[ .\-])[2-9]\d{2}(?P=nsep))\d{4}"  # North America, one separator
       r"|0[1-9]\d{0,3}(?:[ .\-/]\d{2,8}){1,4}"  # national numbers with a trunk 0 (FR, UK, DE, NL, ...)
       r")(?![\w\-/]|\.\d)",
       validator="phone", scope="number"),
    R_("phone-labelled", "phone",
       r"(?i)\b(?:phone|tel|telephone|mobile|cell|fax|whatsapp|telefon|t[ée]l[ée]phone|handy)\b[^\n\d+(]{0,20}"
       r"(?P<secret>\+?\(?\d[\d ()./\-]{5,20}\d)(?![\w\-])",
       keywords=("phone", "tel", "mobile", "cell", "fax", "whatsapp", "handy", "t\u00e9l\u00e9phone"),
       validator="phone_labelled", anchor="keyword"),
    R_("card-number", "card",
       r"\d(?:\d{3}([ \-]?)\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{3}([ \-]?)\d{6}\2\d{5}|\d{12,18})"
       r"(?![\w\-]|\.\d)",
       validator="card", scope="number"),
    R_("iban", "iban", r"(?i:[A-Z][A-Z]\d\d(?: ?[A-Z0-9]){11,30})(?![A-Za-z0-9])", validator="iban"),
    R_("uk-national-insurance", "national-id",
       r"(?<![A-Za-z0-9])[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z](?P<sep>[ \-]?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)[A-D](?![A-Za-z0-9])",
       validator="uk_nino"),
    R_("de-tax-id", "national-id", r"(?<![\d.,\-/])[1-9]\d(?P<sep>[ ]?)\d{3}(?P=sep)\d{3}(?P=sep)\d{3}(?![\d\-/]|[.,]\d)",
       validator="de_tax_id", scope="number"),
    R_("us-ssn", "ssn", r"\d{3}([\- ])\d{2}\1\d{4}(?![\w\-])", validator="ssn", scope="number"),
    R_("us-ssn-labelled", "ssn",
       r"(?i:\b(?:ssn|social security(?: number| no\.?)?)\b[^\n\d]{0,20})(?P<secret>\d{9})(?!\d)",
       keywords=("ssn", "social security"), validator="ssn", anchor="keyword"),
    R_("ipv4", "ip",
       r"\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\w]|\.\d)",  # from the first dot; the check takes back the first number
       validator="public_ip"),
    R_("ipv6", "ip",
       r":[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:]*(?:\d{1,3}(?:\.\d{1,3}){3})?(?![\w:.])",
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
    R_(rule_id, category, _NEVER, scope="structure") for rule_id, category in (
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
