"""The BPE demo class (demo/bpe/), graded for real by `make grade LESSON=bpe`: sandbox, hidden tests,
feedback, gradebook, report. Each submission shows one thing (demo/bpe/README.md)."""
import csv
import os
import subprocess

import pytest

from .helpers import ROOT

DEMO = ROOT / "demo" / "bpe"
HINTS = {  # a phrase of the catalogue hint each student's failed tests must name
    "carla_tie_smallest": ["you merge the smallest"],
    "dmitri_decode_per_token": ["You decode each token on its own, so a character"],
    "goran_no_pretokens": ["Your merges cross word boundaries", "You encode each piece of text as a whole"],
    "ines_zip": ["adds the special tokens into the very dict it was given"],
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """`make grade LESSON=bpe`, which grades the lesson's demo class (lesson.toml [docs] demo_class) with the
    roster beside it (demo/bpe/roster.csv), neither named here."""
    out = tmp_path_factory.mktemp("bpe-demo")
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_LESSON", "MAKEFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "--no-print-directory", "grade", "LESSON=bpe", f"OUT={out}"],
                          cwd=ROOT, env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=900)
    assert f"grade {DEMO.relative_to(ROOT) / 'class'}" in done.stdout, done.stdout[-2000:]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return out, {row["submission"]: row for row in csv.DictReader(f)}


def test_each_submission_gets_the_parts_its_readme_row_says(graded):
    _, rows = graded
    parts = {name: (float(row["training"]), float(row["tokenizer"])) for name, row in rows.items()}
    assert parts["amara_complete"] == parts["bruno_lists"] == parts["hana_notebook"] == (50, 50), \
        "a correct solution lost points"
    assert parts["elif_partial"] == (50, 0)
    assert parts["carla_tie_smallest"][0] < 50 and parts["carla_tie_smallest"][1] == 50
    assert parts["dmitri_decode_per_token"][0] == 50 and parts["dmitri_decode_per_token"][1] < 50
    assert parts["goran_no_pretokens"][0] < 50 and parts["goran_no_pretokens"][1] < 50
    # Ines hands in a zip from macOS (one top folder, __MACOSX and .DS_Store): her code is graded as handed in,
    # and her one mistake (special tokens added into the caller's vocab) costs tokenizer.vocab_unchanged only.
    assert parts["ines_zip"] == (50, 48) and rows["ines_zip"]["source"] == "ines_zip.zip"
    assert {row["name"] for row in rows.values()} >= {"Amara Nwosu", "Goran Petrović", "Hana Sato", "Ines Kaya"}
    assert len(rows) == 8


def test_feedback_names_each_students_misconception(graded):
    out, _ = graded
    for name, phrases in HINTS.items():
        feedback = (out / name / "feedback.md").read_text(encoding="utf-8")
        for phrase in phrases:
            assert phrase in feedback, f"{name}: the feedback does not name {phrase!r}"
    assert "not implemented yet" in (out / "elif_partial" / "feedback.md").read_text(encoding="utf-8")


def test_the_class_report_and_similarity_are_written(graded):
    out, _ = graded
    assert (out / "report.html").stat().st_size > 0
    with open(out / "similarity.csv", newline="", encoding="utf-8") as f:
        flagged = [(row["a"], row["b"], row["kind"]) for row in csv.DictReader(f) if row["flagged"] != "no"]
    assert not flagged, f"two demo students were made too alike: {flagged}"
