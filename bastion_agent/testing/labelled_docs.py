"""Documents of two departments and one every caller shares, with the access groups their folders give them.

The access tests of search and of serve ask the same question of the same
documents: does a caller of one group ever learn of the other's?
"""

from __future__ import annotations

from bastion_agent import embed
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import SanitizedStoreCase, clean_env, label_documents

HR_DOCS = {
    "The salary review of Dana Quill raised her pay band after the annual appraisal.": ["hr/quill-review.txt"],
    "Severance terms for the restructuring: notice periods and salary continuation.": ["hr/severance.txt"],
    "Payroll calendar: salaries are paid on the last working day of the month.": ["hr/payroll.txt"],
}
ENG_DOCS = {
    "The parser turns tokens into a syntax tree before the compiler checks types.": ["eng/parser.txt"],
    "Our build pipeline caches compiled objects and runs the unit tests in parallel.": ["eng/build.txt"],
    "The review of the cache design found a race when two workers evict the same key.": ["eng/cache-review.txt"],
    "Release notes: the compiler now reports the line of every type error it finds.": ["eng/release.txt"],
}
SHARED = {"Office hours and holidays for everyone: the office closes on public holidays.": ["all/holidays.txt"]}
GROUPS = {**{p: ["hr"] for paths in HR_DOCS.values() for p in paths},
          **{p: ["eng"] for paths in ENG_DOCS.values() for p in paths},
          "all/holidays.txt": ["eng", "hr"]}


# The [access] rules of the hostile access tests and bench: hr/** for hr, public/** for public.
HR_PUBLIC_ACCESS = """
[[access.rules]]
paths = ["hr/**"]
groups = ["hr"]

[[access.rules]]
paths = ["public/**"]
groups = ["public"]
"""


# Two departments' windows of the central index's reader tests (publishing/test_readers, test_remote_dates).
CENTRAL_HR = ["Salary review for the design team: each raise is approved by the board after the annual performance review.",
              "The parental leave policy grants sixteen weeks; requests go to the people office before the review period.",
              "Disciplinary hearing notes are kept by the people office and reviewed by the works council each quarter."]
CENTRAL_ENG = ["Rotate the backup encryption keys every month with the vault tool and record the rotation in the log.",
               "Code review happens before every deploy; the release manager signs off after the tests pass.",
               "The build server caches compiled artefacts for a week; clear the cache when the compiler changes."]


class LabelledStore(SanitizedStoreCase):
    """HR's, engineering's and a shared document, chunked, labelled and embedded through the stub."""

    size, overlap = 8, 2
    docs = {**HR_DOCS, **ENG_DOCS, **SHARED}

    def setUp(self):
        super().setUp()
        label_documents(self.layout, GROUPS)
        self.stub = StubServer().start()
        self.addCleanup(self.stub.stop)
        self.chunk()
        self.embed_with(self.stub)

    def answer(self, query: str, groups, mode: str, k: int = 3, exact: bool = False):
        with clean_env(EMBED_URL=self.stub.url):
            return embed.answer(self.manifest(), self.layout, query, k, mode=mode, exact=exact, groups=groups)

    @staticmethod
    def docs_of(hits) -> set[str]:
        """The departments (top folders) of the paths the hits show."""
        return {path.split("/")[0] for hit in hits for path in hit.paths}
