"""What a student is told: each submission's results.json, feedback.md and feedback.html.

Per submission, in <out>/<submission>/:
    record.json    the graded result (grader/results/storage.py), written as each submission is graded
                   (`keep_record`): the class files and `merge` never re-grade
    results.json   Gradescope's format (score, execution_time, output, tests[])
    feedback.md    what passed, what failed, expected vs got, hints, faults; by component
    feedback.html  the same as a page (the class report links to it)
The last three are the student's files, written once per run by the class stage (`rewrite_changed`,
only where they change), when overrides, lateness, comments and the release are known.

feedback.md and feedback.html render one description (`feedback_document`, a
grader/results/document.py Document); results.json's texts are plain. A failed test's record holds
what the test said (`output`) and, as data, the mistake its numbers showed (`hint_id`), the facts they
showed (`facts`), which of the rubric's words apply (`advice`) and the libraries it reached (`forbidden`):
the words are chosen from the lesson's rubric when the files are written (`Words`, `advice`).

How much of a failing test a student sees depends on the release policy: the rubric's
[visibility] table says when each test's details may be shown, `--release` says what moment it
is (`visibility_of`, `released`). Every word a record calls for by id comes from the rubric (`Words`).

Student-derived text (names, error messages, outputs) is untrusted: the document's renderers
escape it for each medium.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.admin import overrides, regrade_requests
from grader.results.document import (Bullets, Code, Document, Paragraph, Preformatted, Section, Strong, Table,
                                     number, to_html, to_markdown)
from grader.lesson import RUBRIC_SETTINGS, read_rubric, rubric_hints, rubric_visibility
from grader.results.records import LENT_FACT, SubmissionResult, TestResult
from grader.results.storage import check_name, dumps, write_atomic, write_record

MAX_TEST_OUTPUT = 6000  # characters of one test's output kept: Gradescope pages stay readable
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")  # Gradescope's, least to most withheld
# --release: what a student may see at that moment; each shows the tests whose visibility is up to it.
RELEASES = {"now": "visible", "after_due_date": "after_due_date", "published": "after_published", "all": "hidden"}
DEFAULT_RELEASE = "after_due_date"
WITHHELD_UNTIL = {"after_due_date": "after the due date", "after_published": "when the grades are published",
                  "hidden": "only to the teaching staff"}


# ---------------------------------------------------------------- one submission


def student_files(result: SubmissionResult, *, lesson, words: Words | None = None,
                  release: str = DEFAULT_RELEASE) -> dict[str, str]:
    """What a student receives, file name -> text: results.json, feedback.md and feedback.html."""
    words = Words.of(lesson.rubric()) if words is None else words
    document = feedback_document(result, words, release, lesson=lesson)
    return {"results.json": dumps(gradescope_json(result, lesson=lesson, words=words)),
            "feedback.md": to_markdown(document), "feedback.html": to_html(document)}


def keep_record(out_dir: Path, result: SubmissionResult) -> None:
    """Write <out>/<submission>/record.json only: what a grading run's worker does for each submission.
    The student's files are written once, by the class stage (grader/results/classreport.py), when the
    overrides, the late policy, the comments and the release that shape them are all known."""
    folder = Path(out_dir) / check_name(result.submission)
    folder.mkdir(parents=True, exist_ok=True)
    write_record(folder, result)


def write_submission(out_dir: Path, result: SubmissionResult, *, lesson) -> None:
    """Write <out>/<submission>/results.json, feedback.md, feedback.html and record.json (last), atomically:
    everything of one submission at once, for a caller without a class stage after it (a rescore, a test)."""
    folder = Path(out_dir) / check_name(result.submission)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in student_files(result, lesson=lesson).items():
        write_atomic(folder / name, text)
    write_record(folder, result)


def rewrite_changed(folder: Path, result: SubmissionResult, words: Words, release: str, *,
                    lesson) -> None:
    """results.json and the feedback as the overrides and the release make them, written only where
    they differ from the files (the record stays the automated result). Not made durable one by one
    (three fsyncs a submission were most of the class stage's file writing): the caller syncs the
    folder once after the class's files. No stage reads these files back, and a file a power cut
    left empty differs from what the next run computes from the record, so that run writes it again."""
    for name, text in student_files(result, lesson=lesson, words=words, release=release).items():
        try:
            same = (folder / name).read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            write_atomic(folder / name, text, durable=False)


def _summary_line(result: SubmissionResult, *, lesson) -> str:
    parts = " · ".join(f"{c} {number(s)}/{number(m)}" for c, (s, m) in by_component(result, lesson=lesson).items())
    line = f"Score {number(result.total)}/{number(result.max_total)} ({parts})."
    if why := _why(result):
        line += f" How this score was reached: {why}."
    if result.adjustment:
        line += f" Includes {'+' if result.adjustment > 0 else '-'}{number(abs(result.adjustment))} from your instructor."
    if result.status != "ok":
        line += f" Status: {result.status}."
    return line


def gradescope_json(result: SubmissionResult, *, lesson, words: Words | None = None) -> dict:
    """results.json as Gradescope reads it (gradescope-autograders.readthedocs.io, "Output format")."""
    words = Words.of(lesson.rubric()) if words is None else words
    output = _summary_line(result, lesson=lesson)
    if result.notes:
        output += "\n" + "\n".join(f"- {n}" for n in result.notes)
    if result.line_comments:  # Gradescope shows this text, not feedback.md: the same words, plain
        output += "\n\nComments on your code:\n" + "\n".join(
            f"- {c['file']} line {c['line']}: {c['comment']}" for c in result.line_comments)
    if result.requests:
        output += "\n\nYour regrade requests:\n" + "\n".join(
            f"- {r['test']} (asked {r['time']}): {r['state']}{regrade_requests.points_words(r)}"
            + (f": {r['answer']}" if r.get("answer") else "")
            for r in result.requests)
    tests = [
        {
            "name": f"{t.title} ({t.name})" if t.title else t.name,
            "score": t.score,
            "max_score": t.max_score,
            "status": "passed" if t.status == "passed" else "failed",
            "output": student_output(t, words),
            "visibility": visibility_of(t.name, t.component, lesson.visibility),
            "tags": [t.component],
        }
        for t in result.tests
    ]
    return {
        "score": result.total,
        "execution_time": round(float(result.execution_time), 2),
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests + ([{"name": "Late penalty", "score": -result.penalty, "max_score": 0, "status": "failed",
                            "output": late_line(result), "visibility": "visible"}] if result.penalty else [])
        + ([{"name": "Instructor's adjustment", "score": result.adjustment, "max_score": 0,
                            "status": "passed", "output": "; ".join(o["comment"] for o in overrides.for_student(result)
                                                                       if o["test"] == overrides.BONUS and o["comment"]),
                            "visibility": "visible"}] if result.adjustment else []),
        "extra_data": {"status": result.status, "isolation": result.isolation,
                       **({"overrides": shown} if (shown := overrides.for_student(result)) else {})},
    }


def _why(result: SubmissionResult) -> str:
    return overrides.explain(result)


def clip(text: str) -> str:
    if len(text) <= MAX_TEST_OUTPUT:
        return text
    return text[:MAX_TEST_OUTPUT] + f"\n... ({len(text) - MAX_TEST_OUTPUT} more characters cut)"


def by_component(result: SubmissionResult, *, lesson) -> dict[str, tuple[float, float]]:
    """Part -> (points got, points possible), every part of the lesson's rubric first, in its order."""
    got = {}
    for t in result.tests:
        got[t.component] = round(got.get(t.component, 0.0) + t.score, 4)
    possible = {c: 0.0 for c in lesson.components}
    for t in result.tests:
        possible[t.component] = possible.get(t.component, 0.0) + t.max_score
    return {c: (got.get(c, 0.0), possible[c]) for c in possible}


# ---------------------------------------------------------------- feedback, described once

MISCONCEPTION = "Likely misconception"  # how a recognised mistake's words are introduced, in every medium
# What to fix first when the code did not get as far as an answer (a test's `advice`): the engine's words.
FIRST = {"unfinished": "This part is not written yet: replace the `raise NotImplementedError` with your code.",
         "import": "This file could not be imported, so none of these tests could run: fix this first.",
         "raised": "Your code raised this error, so these tests could not check its answers: fix it first."}


@dataclass(frozen=True)
class Words:
    """What the lesson's rubric says to a student beyond a test's own output, by id: a failed test's
    record names which words apply (`hint_id`, `advice`, `facts`, `forbidden`), and these are chosen
    from the rubric when the files are written, so a record never holds them and a rubric's new words
    reach the files without touching a record's text."""

    hints: dict = field(default_factory=dict)  # hint id (a catalogue mistake's) -> its words
    facts: dict = field(default_factory=dict)  # fact id -> its sentence ([facts.<id>] text)
    tests: dict = field(default_factory=dict)  # test name -> its rubric entry (hint, section, when)
    forbidden: str = "{names}"  # [meta] forbidden_message: {names} is where the APIs reached go

    @classmethod
    def of(cls, rubric: dict) -> Words:
        tests = {f"{part}.{test}": entry for part, table in rubric.items()
                 if part not in RUBRIC_SETTINGS and isinstance(table, dict)
                 for test, entry in table.items() if isinstance(entry, dict)}
        facts = {k: v.get("text", "") for k, v in rubric.get("facts", {}).items() if isinstance(v, dict)}
        message = rubric.get("meta", {}).get("forbidden_message")
        return cls(hints=rubric_hints(rubric), facts=facts, tests=tests,
                   forbidden=message if isinstance(message, str) and "{names}" in message else "{names}")


@dataclass(frozen=True)
class Advice:
    """The rubric's words for one failed test, in the order a student reads them."""

    forbidden: str = ""  # the forbidden-library message, with the APIs the part reached
    first: str = ""  # what to fix first (FIRST)
    lent: tuple = ()  # what the student's own version of a part this one is graded over the stand-in of was shown to do
    numbers: tuple = ()  # what the numbers show: one sentence per fact
    hint: tuple = ()  # (label, words): the test's own hint, "Hint (§3)" or "Hint"
    section: str = ""  # where the handout has the formula, when no hint is given
    mistake: str = ""  # a recognised mistake's words
    mistake_id: str = ""  # a recognised mistake the rubric no longer words: its id
    reviewed: str = ""  # "Reviewed by <who>": a person's comment on the test follows (overrides.csv)
    comment: str = ""


def advice(test: TestResult, words: Words) -> Advice:
    """Which of the rubric's words a failed test's record calls for, and a person's comment on the test
    (a passed test has only the comment). No fact, no cause named: the test's hint only when one of the
    facts its `when` names was found."""
    said: dict = {}
    if test.review.get("comment"):  # a person's word, on a passed test too
        said.update(reviewed="Reviewed" + (f" by {test.review['by']}" if test.review.get("by") else ""),
                    comment=test.review["comment"])
    if test.status == "passed":
        return Advice(**said)
    from grader.judging import diagnose  # numpy: only when words are chosen

    entry = words.tests.get(test.name, {})
    hint, section, numbers = entry.get("hint"), entry.get("section", ""), ()
    if test.forbidden:
        from grader.running.forbidden import KIT_FILES, KIT_FILES_SENTENCE

        libraries = [name for name in test.forbidden if name != KIT_FILES]
        said["forbidden"] = " ".join([*([words.forbidden.format(names=", ".join(libraries))] if libraries else []),
                                      *([KIT_FILES_SENTENCE] if KIT_FILES in test.forbidden else [])])
    if test.advice in FIRST:
        said["first"] = FIRST[test.advice]
    own = [f for f in test.facts if not str(f.get("id", "")).startswith(LENT_FACT)]
    if lent := tuple(diagnose.words([f for f in test.facts if f not in own], words.facts)):
        said["lent"] = lent  # the same for every test of the part: said even where an error groups them
    if test.advice in ("numbers", "raised"):  # raised: in which of its cases the code ran and was right
        numbers = tuple(diagnose.words(own, words.facts))
    if test.advice == "numbers":
        if hint and diagnose.matched(test.facts, entry.get("when", ())):
            said["hint"] = (f"Hint ({section})" if section else "Hint", hint)
        elif section:
            said["section"] = section
    elif test.advice == "hint" and hint:
        said["hint"] = ("Hint", hint)
    if test.hint_id:
        said["mistake" if words.hints.get(test.hint_id) else "mistake_id"] = words.hints.get(test.hint_id) or test.hint_id
    return Advice(numbers=numbers, **said)


def hint_words(test: TestResult, words: Words) -> str:
    """The words for the mistake a failed test's numbers showed (the record's `hint_id`), from the
    lesson's rubric: chosen by id when the files are written, never kept in or read from the output."""
    return advice(test, words).mistake


def student_output(test: TestResult, words: Words, cut: bool = True) -> str:
    """A failed test's output as plain text (Gradescope's test output, nbgrader's cell): the forbidden
    libraries it reached, what the test said (`cut` to MAX_TEST_OUTPUT characters), then the rubric's
    words its record calls for."""
    said = advice(test, words)
    text = "\n\n".join(filter(None, [said.forbidden, clip(test.output) if cut else test.output, said.first,
                                     *said.lent]))
    if said.numbers:
        text += "\n\nWhat your numbers show:\n" + "\n".join(f"- {s}" for s in said.numbers)
    if said.hint:
        text += f"\n\n{said.hint[0]}: {said.hint[1]}"
    elif said.section:
        text += f"\n\nWhat this test checks is in the handout, {said.section}."
    if said.comment:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + f"{said.reviewed}: {said.comment}"
    if said.mistake:
        text = f"{text}\n\n{MISCONCEPTION}: {said.mistake}" if text.strip() else f"{MISCONCEPTION}: {said.mistake}"
    return text


def feedback_document(result: SubmissionResult, words: Words | None = None,
                      release: str = DEFAULT_RELEASE, *, lesson) -> Document:
    """The student's feedback, as one Document (feedback.md and feedback.html render it); a failing
    test's details (output, the recognised mistake) appear only when the release policy lets a
    student see that test at `release` (see RELEASES)."""
    words = Words.of(lesson.rubric()) if words is None else words
    parts = by_component(result, lesson=lesson)
    status = "" if result.status == "ok" else f" · status: {result.status}"
    blocks: list = [Paragraph([Strong(f"Score: {number(result.total)} / {number(result.max_total)}"), status])]
    if why := _why(result):
        blocks.append(Paragraph(f"How this score was reached: {why}."))
    if result.late:
        blocks.append(Paragraph(late_line(result)))
    rows = []
    for component, (score, possible) in parts.items():
        tests = [t for t in result.tests if t.component == component]
        rows.append([component, f"{number(score)} / {number(possible)}",
                     f"{sum(t.status == 'passed' for t in tests)} / {len(tests)}"])
    blocks.append(Table(("part", "points", "tests passed"), rows, numeric=frozenset({1, 2})))
    if reviewed := overrides.for_student(result):
        blocks.append(Section("Reviewed by your instructor", [Bullets([
            [Code(o["test"]), " " + override_change(o, number, " points on the total", " points")
             + (f" ({o['by']})" if o.get("by") else "") + (f": {o['comment']}" if o.get("comment") else "")]
            for o in reviewed])]))
    if result.line_comments:
        blocks.append(Section("Comments on your code", [Bullets([
            [Code(c["file"]), f" line {c['line']}",
             *([": ", Code(c["code"].strip())] if c.get("code", "").strip() else []),
             (f" ({c['by']})" if c.get("by") else "") + f": {c['comment']}"]
            for c in result.line_comments])]))
    if result.requests:
        blocks.append(Section("Your regrade requests", [Bullets([
            [Code(r["test"]), f" (asked {r['time']}): ", Strong(r["state"]), regrade_requests.points_words(r),
             f": {r['answer']}" if r.get("answer") else ""]
            for r in result.requests])]))
    if result.notes and result.status == "ok":
        # A graded notebook, a skipped symlink: how the submission was read, not a problem.
        blocks.append(Section("Notes on grading", [Bullets(list(result.notes))]))
    elif result.notes:
        failed = set(result.status.removeprefix("import-error: ").split(", ")) if result.status.startswith("import-error") else set()
        some = not failed >= {f"{module}.py" for module in lesson.modules}  # when none imports, no part was spared
        blocks.append(Section("What went wrong while grading", [Bullets(list(result.notes))]
                              + ([Paragraph("Parts that did not need the failing code were graded as usual.")] if some else [])))
    # Integrity flags are the staff's (the class report, the review page): a student reads what failed
    # and why in each test's own output, in neutral words.
    if not result.tests:
        blocks.append(Paragraph("No tests could be run on this submission."))
    for component in lesson.components:
        tests = [t for t in result.tests if t.component == component]
        if tests:
            score, possible = parts[component]
            blocks.append(Section(f"{component}: {number(score)} / {number(possible)}",
                                  _component_blocks(tests, words, release, lesson.visibility)))
    return Document(title=f"{lesson.heading}: feedback for {result.submission}",
                    page_title=f"Feedback: {result.submission}", blocks=blocks)


def _component_blocks(tests: list[TestResult], words: Words, release: str, visibility: dict) -> list:
    """One part's tests: each with its points, then the failing ones' details. Tests that failed with
    the same words (one crash met by several tests) are shown once, under the list of the tests it
    cost. A test not released yet shows its points only."""
    blocks: list = [Bullets([
        ["✓ " if t.status == "passed" else "✗ ", Strong(t.title or t.name), " (", Code(t.name),
         f"): {number(t.score)} / {number(t.max_score)}"] for t in tests])]
    same: dict[tuple, list] = {}
    withheld: dict[str, int] = {}
    for t in tests:
        if t.status == "passed":
            continue
        shown = visibility_of(t.name, t.component, visibility)
        if not released(shown, release):
            withheld[shown] = withheld.get(shown, 0) + 1
            continue
        said = advice(t, words)
        # One error is told once for every test it stopped, whichever of their cases it met.
        same.setdefault((t.output.strip(), replace(said, numbers=()) if t.advice == "raised" else said), []).append(t)
    for group in same.values():
        t = group[0]
        cost = f" (the same message for {len(group)} tests)" if len(group) > 1 else ""
        blocks.append(Section("✗ " + ", ".join(u.title or u.name for u in group) + cost,
                              test_details(t, words, cases=len(group) == 1)))
    for visibility, count in withheld.items():
        blocks.append(Paragraph(f"The details of {count} failing test{'s' if count > 1 else ''} here are shown "
                                f"{WITHHELD_UNTIL[visibility]}."))
    return blocks


def test_details(test: TestResult, words: Words, cases: bool = True) -> list:
    """What a failed test says, as document blocks (the feedback and the review page show the same):
    the forbidden libraries it reached, its output, preformatted, then the rubric's words its record
    calls for (what the numbers show, the hint or the handout section, the recognised mistake). `cases=False`:
    an error told once for several tests, without the cases of one of them it met."""
    said = advice(test, words)
    if not cases and test.advice == "raised":
        # What the error's own message shows holds for every test it stopped; which of one test's cases ran does not.
        from grader.judging import diagnose
        from grader.judging.assertions import ERROR_FACTS

        said = replace(said, numbers=tuple(diagnose.words([f for f in test.facts if f.get("id") in ERROR_FACTS],
                                                          words.facts)))
    details: list = [Paragraph(said.forbidden)] if said.forbidden else []
    if test.output.strip():
        details.append(Preformatted(clip(test.output)))
    if said.first:
        details.append(Paragraph(said.first))
    details += [Paragraph(line) for line in said.lent]
    if said.numbers:
        details += [Paragraph("What your numbers show:"), Bullets(list(said.numbers))]
    if said.hint:
        details.append(Paragraph([Strong(f"{said.hint[0]}:"), " ", said.hint[1]]))
    elif said.section:
        details.append(Paragraph(f"What this test checks is in the handout, {said.section}."))
    if said.comment:
        details.append(Paragraph([Strong(f"{said.reviewed}:"), " ", said.comment]))
    if said.mistake:
        details.append(Paragraph([Strong(f"{MISCONCEPTION}:"), " ", said.mistake]))
    elif said.mistake_id:  # a mistake the rubric no longer words: its id, as data
        details.append(Paragraph([f"{MISCONCEPTION}: ", Code(said.mistake_id)]))
    return details


def feedback_markdown(result: SubmissionResult, words: Words | None = None,
                      release: str = DEFAULT_RELEASE, *, lesson) -> str:
    """feedback.md: the student's feedback as text."""
    return to_markdown(feedback_document(result, words, release, lesson=lesson))


def override_change(o: dict, fmt, bonus_unit: str = "", unit: str = "") -> str:
    """What one override did, in words: reviewed, a bonus on the total, or old -> new points (each
    written by `fmt`)."""
    if o["points"] is None:
        return "reviewed"
    if o["test"] == overrides.BONUS:
        capped = o.get("capped")
        return f"{o['points']:+g}{bonus_unit}" + ("" if capped is None else
                                                  f" (capped to {capped:+g}: the total stops at the maximum)")
    return f"{fmt(o['automated'])} → {fmt(o['points'])}{unit}"


def late_line(result: SubmissionResult) -> str:
    days = result.late.get("late_days", 0)
    # A group whose members' deadlines differ shares this file: it names no deadline, as one member's extension
    # (an accommodation, perhaps) is not the others' to read.
    shared = result.late.get("deadlines_differ")
    group = (" Your group's members have different deadlines: this is measured against the latest of them, and "
             "each member's own grade in the gradebook applies their own deadline.") if shared else ""
    deadline = "" if shared else f"deadline {result.late.get('deadline', '?')}"
    if not days:
        return f"Handed in on time{f' ({deadline})' if deadline else ''}.{group}"
    return (f"Handed in {days} day{'s' if days > 1 else ''} late ({deadline + ', ' if deadline else ''}"
            f"measured from the {result.late.get('measured_from') or 'commit time'}): -{number(result.penalty)} "
            f"points ({result.late.get('policy', '')}).{group}")


# ---------------------------------------------------------------- release policy


def visibility_of(test_name: str, component: str, visibility: dict | Path) -> str:
    """The test's visibility from the rubric's [visibility] table (`lesson.visibility`, or read from a
    rubric's path): the test id, else its part, else `default`, else visible."""
    if not isinstance(visibility, dict):
        visibility = _read(visibility, rubric_visibility)
    found = visibility.get(test_name) or visibility.get(component) or visibility.get("default") or "visible"
    return found if found in VISIBILITIES else "visible"


def released(visibility: str, release: str) -> bool:
    """May a student see the details of a test with this visibility under `--release release`?"""
    return VISIBILITIES.index(visibility) <= VISIBILITIES.index(RELEASES[release])


def lesson_words(lesson) -> Words:
    """The rubric's words of the lesson passed in."""
    return Words.of(lesson.rubric())


def hint_texts(rubric: Path) -> dict[str, str]:
    """hint id -> hint text of the rubric at `rubric` ({} when it cannot be read); a lesson's own are
    `lesson.hints`."""
    return _read(rubric, rubric_hints)


def _read(rubric: Path, table) -> dict[str, str]:
    try:
        return table(read_rubric(rubric))
    except (OSError, ValueError):
        return {}
