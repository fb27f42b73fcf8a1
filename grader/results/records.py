"""Typed result records shared by every stage: run -> score -> report.

Everything here is plain data (str, int, float, bool, lists, dicts) so that a record
serialises to deterministic JSON. Nothing that crosses from a student's process
is ever one of these objects: the grader builds them from validated arrays.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


# The id prefix of a fact about the student's own version of another part, which the failed test's part is graded
# over the grader's stand-in of (grader/judging/score.py, `_lent_facts`): said apart from what its numbers show.
LENT_FACT = "over_standin."


@dataclass
class TestResult:
    """One rubric test for one submission (maps 1:1 to a Gradescope `tests[]` entry)."""

    name: str  # rubric id, "<component>.<test>"
    component: str  # one of the lesson's components
    score: float
    max_score: float
    status: str  # "passed" | "failed"
    output: str = ""  # what the test said (expected vs got, the error); shown to the student
    hint_id: str | None = None  # bug-catalogue id when a misconception was recognised
    visibility: str = "visible"  # Gradescope visibility
    title: str = ""  # human title from the rubric
    # What the numbers showed when no catalogued mistake matched (grader/judging/diagnose.py facts: id and numbers).
    facts: list = field(default_factory=list)
    # What follows the output, as data: "numbers" (the rubric's sentence of each fact, then the test's hint
    # when one of the facts its `when` names was found, else the handout section), "hint" (the test's hint:
    # a failed deliverable), "unfinished", "import" or "raised" (the part is a stub, its file does not
    # import, its code raised: what to fix first), or "" (nothing). grader/results/feedback.py words it when
    # the files are written, so a rubric's new words need no regrade and no text is edited.
    advice: str = ""
    forbidden: list = field(default_factory=list)  # library APIs the part reached: the rubric's forbidden_message
    # A person's words to the student on this test ({"by", "comment"}, from overrides.csv), set on the copy
    # the files are written from (grader/admin/overrides.py `apply`); empty in record.json.
    review: dict = field(default_factory=dict)
    called: list = field(default_factory=list)  # the graded names a failed test called, in order (the review page)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class SubmissionResult:
    """Everything the grader concluded about one submission."""

    submission: str  # row name: folder name, zip name without .zip, notebook stem
    tests: list[TestResult] = field(default_factory=list)
    status: str = "ok"  # "ok", or a short reason: "timeout", "crashed", "import-error: multihead.py", ...
    source: str = ""  # the folder, .zip or .ipynb the row came from, as named in the class folder
    notes: list[str] = field(default_factory=list)  # faults stated in words (timeouts, crashes, symlinks)
    isolation: dict = field(default_factory=dict)  # which sandbox layers were active, e.g. {"netns": True}
    execution_time: float = 0.0  # seconds, excluded from determinism checks
    evidence: dict = field(default_factory=dict)  # small arrays for the report's heatmaps (lists of floats)
    digests: dict = field(default_factory=dict)  # submission / inputs / rubric digests (grader/admin/regrade.py)
    # A person's decisions (grader/admin/overrides.py), applied when the files are written; empty in record.json.
    overrides: list = field(default_factory=list)
    # Also applied when the files are written and never stored: the comments on lines of the code
    # the student may read (grader/admin/linecomments.py) and where their regrade requests stand
    # (grader/admin/regrade_requests.py).
    line_comments: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    adjustment: float = 0.0  # points a `*` override adds to the total
    late: dict = field(default_factory=dict)  # late_days, deadline, measured_from (grader/judging/late.py), when late
    penalty: float = 0.0  # points the late policy takes from the total
    # For the staff only (grader/judging/integrity.py, grader/judging/source_scan.py): what the code tried or reached for; no points.
    flags: list[str] = field(default_factory=list)
    # The total before a person's decisions and the late policy (grader/judging/totals.py); None in record.json.
    automated: float | None = None

    @property
    def total(self) -> float:
        return round(sum(t.score for t in self.tests) + self.adjustment - self.penalty, 4)

    @property
    def max_total(self) -> float:
        return round(sum(t.max_score for t in self.tests), 4)

    def component_scores(self, parts) -> dict[str, float]:
        """Points per part: each of `parts` (the lesson's components, in rubric order; a part without a
        test here scores 0), then any other part a test names."""
        scores = {c: 0.0 for c in parts}
        for t in self.tests:
            scores[t.component] = round(scores.get(t.component, 0.0) + t.score, 4)
        return scores
