"""Stage "report", for the class: grades.csv, summary.md, report.html and the pictures under _plots/.

`write_class` reads every <out>/*/record.json (grader/results/storage.py), makes each final total
(grader/judging/totals.py: the overrides file, the bonus cap, the rubric's late policy), rewrites each submission's
results.json and feedback where those change them (grader/results/feedback.py), and writes the class files.

summary.md and report.html are one description, `class_document` (a grader/results/document.py Document),
rendered to Markdown and to HTML: what the text and the page both show, they show from the same
block, escaped by the renderer. Only what one medium cannot carry is marked for the other: the page's
table of links to each feedback page and the similarity section (a page of its own,
grader/admin/similarity.py); the text's pointer to grades.csv and the feedback files.
"""
from __future__ import annotations

import contextlib
import csv
import io
import os
import statistics
import sys
import threading
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from grader.admin import linecomments, overrides, regrade_requests
from grader.intake import roster
from grader.judging import totals
from grader.results import feedback
from grader.results.document import (Bullets, Cell, Code, Document, FileName, Figure, Figures, Image, Item, Link, Only,
                                     Paragraph, Section, Strong, Table, mean, number, to_html, to_markdown)
from grader.results.plots import evidence_candidates, write_plots
from grader.results.records import SubmissionResult
from grader.results.storage import DIGITS, check_name, load_records, sync_folder, write_atomic

NAME_FLAG = "row name "  # how intake's notes about a row's name begin (sanitised, collided, reserved)


def write_class(out_dir: Path, overrides_path: Path | None = None,
                release: str = feedback.DEFAULT_RELEASE, *, lesson, elsewhere: frozenset = frozenset()) -> None:
    """grades.csv, summary.md, report.html and _plots/ from every <out>/*/record.json, with the
    overrides file (OUT/overrides.csv unless given) applied; each submission's results.json and
    feedback are rewritten where the overrides change them. OverrideError for a row naming an
    unknown submission or test: nothing is written then. `elsewhere`: the class's submissions another
    shard grades, which a class-wide decisions, requests or comments file may name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records, problems = load_records(out_dir)
    path = Path(overrides_path) if overrides_path else overrides.default_path(out_dir)
    rows = overrides.read(path)
    overrides.check(rows, records, path=path, submissions=elsewhere)
    automated, records = records, totals.finalise(out_dir, records, overrides.effective(rows), lesson=lesson)
    standings = _apply_comments_and_requests(out_dir, records, rows, automated,
                                             regrade_requests.askable((), elsewhere, lesson=lesson))
    hints = lesson.hints
    words = feedback.Words.of(lesson.rubric())

    def students_files():
        for r in records:
            feedback.rewrite_changed(out_dir / check_name(r.submission), r, words, release, lesson=lesson)

    # The students' files (~3.5 ms each) are written by a forked child while this process draws the plots
    # and the report (~1 s), on the core the class stage otherwise leaves idle.
    beside = _beside(students_files) if len(records) >= BESIDE_AT else None
    if beside is None:
        students_files()
    try:
        people = roster.in_out(out_dir)
    except roster.RosterError as error:  # stops `grade` and `merge` as a bad overrides.csv does
        raise overrides.OverrideError(str(error)) from None
    if people is None:
        write_atomic(out_dir / "grades.csv", grades_csv(records, lesson=lesson))
    else:
        graded = {r.submission.casefold() for r in records}
        missing = [s for s in people.students if s.submission.casefold() not in graded]
        write_atomic(out_dir / "grades.csv", grades_csv_by_student(
            totals.per_student(out_dir, records, people, lesson=lesson), lesson=lesson, missing=missing))
    stats = class_stats(records, hints, lesson=lesson)
    if people is not None:  # who shares a submission, and partners who each handed in the pair's work
        stats["groups"] = sorted({(s.group or s.submission, ", ".join(f"{m.name or m.identity} ({m.submission})"
                                                                      for m in people.students
                                                                      if (m.group or m.submission) == (s.group or s.submission)))
                                  for s in people.students if s.group or len(people.members(s.submission)) > 1})
    plots = write_plots(out_dir, records, stats, lesson=lesson)
    from grader.admin import similarity  # its section reads OUT/similarity.csv, written by `grade` or `similarity`

    document = class_document(stats, plots, problems, [r for r in records if r.overrides],
                              similarity.report_section(out_dir), standings, lesson=lesson)
    write_atomic(out_dir / "summary.md", to_markdown(document))
    write_atomic(out_dir / "report.html", to_html(document))
    if beside is not None and not _finished(beside):
        students_files()  # the child could not write them all: here, each file still written only where it differs
    # Last, so the disk writes the students' files back while the plots and the report are drawn.
    sync_folder(out_dir)


# A class this big has its students' files written by a child of its own (write_class): below it, the fork costs
# more than it saves.
BESIDE_AT = 40


def _beside(work) -> int | None:
    """Run `work` in a forked child; its pid, or None when no child could be started (the caller does it).
    Only from a process with one thread: a lock another thread held at the fork (an import's, a stream's)
    would never be released in the child."""
    if threading.active_count() != 1:
        return None
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:  # the child: only the work, then out without running the parent's exit handlers
        code = 1
        try:
            work()
            code = 0
        except BaseException as exc:  # said on stderr; the parent does the work again
            with contextlib.suppress(BaseException):
                print(f"report: writing the students' files beside the report failed ({type(exc).__name__}: "
                      f"{exc}); writing them again", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    return pid


def _finished(pid: int) -> bool:
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    except ChildProcessError:
        return False


def _apply_comments_and_requests(out_dir: Path, records: list[SubmissionResult],
                                 rows: list[overrides.Override], automated: list[SubmissionResult],
                                 elsewhere: dict | None = None) -> list:
    """Give each record the line comments its student may read (OUT/comments.csv) and where its
    regrade requests stand (OUT/regrade_requests.csv, decided by overrides.csv's rows, with the points
    before each decision from the `automated` records); return every request's standing, for the report.
    A row naming an unknown student or test stops the run."""
    comments = linecomments.read(linecomments.default_path(out_dir))
    elsewhere = elsewhere or {}
    linecomments.check(comments, {r.submission for r in records} | set(elsewhere), path=linecomments.default_path(out_dir))
    requests = regrade_requests.of_folder(out_dir)
    regrade_requests.check(requests, {**elsewhere, **regrade_requests.askable(records)},
                           path=regrade_requests.default_path(out_dir))
    graded = {r.submission for r in records}
    standings = regrade_requests.standings([q for q in requests if q.student in graded], rows, automated)
    said = linecomments.by_submission(comments)
    for r in records:
        r.line_comments = [shown for c in said.get(r.submission, []) if (shown := c.for_student())]
        r.requests = [s.for_student() for s in standings if s.request.student == r.submission]
    return standings


# ---------------------------------------------------------------- grades.csv


def grades_columns(components) -> tuple[str, ...]:
    """grades.csv's header: one column per part of the lesson's rubric (`lesson.components`), in its order."""
    components = tuple(components)
    return ("submission", "total", "max_total", *components, "status", "source", "overrides", "late_days", "penalty")


def grades_csv(records: list[SubmissionResult], *, lesson) -> str:
    components = lesson.components
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(grades_columns(components))
    for r in sorted(records, key=lambda r: r.submission):
        parts = _part_scores(r, components)
        writer.writerow([_cell(r.submission), _figure(r.total), _figure(r.max_total),
                         *(_figure(parts.get(c, 0.0)) for c in components), _cell(r.status), _cell(r.source),
                         _cell(overrides.summary(r)), str(r.late["late_days"]) if r.late else "",
                         _figure(r.penalty) if r.late else ""])
    return buffer.getvalue()


NOT_HANDED_IN = "no submission"  # the status of a roster student's row when nothing of theirs was graded


def grades_csv_by_student(rows: list, *, lesson, missing=()) -> str:
    """grades.csv when OUT holds a roster: a row per student (a group's submission gives each member
    one, with the group's points and the member's own lateness), keyed by the roster's identity; the roster's
    students with nothing graded (`missing`) last, at 0, so every student of the roster has a row."""
    components = lesson.components
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = grades_columns(components)
    writer.writerow([columns[0], "student", "name", "group", *columns[1:]])
    for student, r in sorted(rows, key=lambda row: (row[1].submission, row[0].identity if row[0] else "")):
        parts = _part_scores(r, components)
        writer.writerow([_cell(r.submission), _cell(student.identity if student else ""),
                         _cell(student.name if student else ""), _cell(student.group if student else ""),
                         _figure(r.total), _figure(r.max_total),
                         *(_figure(parts.get(c, 0.0)) for c in components), _cell(r.status), _cell(r.source),
                         _cell(overrides.summary(r)), str(r.late["late_days"]) if r.late else "",
                         _figure(r.penalty) if r.late else ""])
    top = sum(lesson.points.values())
    for student in sorted(missing, key=lambda s: s.identity):
        writer.writerow([_cell(student.submission), _cell(student.identity), _cell(student.name), _cell(student.group),
                         _figure(0.0), _figure(top), *(_figure(0.0) for _ in components), NOT_HANDED_IN, "", "", "",
                         ""])
    return buffer.getvalue()


def _part_scores(r: SubmissionResult, components) -> dict[str, float]:
    scores = {c: 0.0 for c in components}
    for t in r.tests:
        scores[t.component] = round(scores.get(t.component, 0.0) + t.score, 4)
    return scores


def _figure(x: float) -> str:
    """A number of grades.csv: the precision records keep (storage.DIGITS), for the spreadsheets and
    scripts that read it; every page and text a person reads shows at most two decimals."""
    return number(x, DIGITS)


def _cell(text: str) -> str:
    """A spreadsheet runs a cell starting with = + - @ as a formula: a file or folder name must not."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


# ---------------------------------------------------------------- what the report shows


def class_stats(records: list[SubmissionResult], hints: dict[str, str], *, lesson) -> dict:
    """Everything the summary and the HTML report show, as plain data."""
    scores = [r.total for r in records]
    tests: dict[str, dict] = {}  # rubric order: first seen, over records sorted by name
    misconceptions: dict[str, dict] = {}
    for r in records:
        for t in r.tests:
            row = tests.setdefault(t.name, {"name": t.name, "title": t.title, "component": t.component,
                                            "passed": 0, "graded": 0})
            row["graded"] += 1
            row["passed"] += t.status == "passed"
            if t.status != "passed" and t.hint_id:
                m = misconceptions.setdefault(t.hint_id, {"hint_id": t.hint_id, "submissions": [], "text": ""})
                if r.submission not in m["submissions"]:  # one student failing three tests counts once
                    m["submissions"].append(r.submission)
                m["text"] = m["text"] or hints.get(t.hint_id, "")  # words by id, never read back out of an output
    ranked = sorted(misconceptions.values(), key=lambda m: (-len(m["submissions"]), m["hint_id"]))
    parts = [feedback.by_component(r, lesson=lesson) for r in records]
    component_means = {}
    for c in lesson.components:
        possible = max((p[c][1] for p in parts), default=0.0)
        average = statistics.fmean(p[c][0] for p in parts) if records else 0.0
        component_means[c] = (average, possible)
    return {
        "n": len(records),
        "max_total": max((r.max_total for r in records), default=0.0),
        "totals": scores,
        "mean": statistics.fmean(scores) if scores else 0.0,
        "median": statistics.median(scores) if scores else 0.0,
        "min": min(scores, default=0.0),
        "max": max(scores, default=0.0),
        "component_means": component_means,
        "status": Counter(r.status for r in records),
        "tests": list(tests.values()),
        "misconceptions": ranked,
        "faults": [(r.submission, r.status, list(r.notes)) for r in records if r.status != "ok" or r.notes],
        "flags": [(r.submission, list(r.flags)) for r in records if r.flags],
        "isolation": isolation_warnings(records),
        "evidence": evidence_candidates(records, lesson.evidence_components),
        "rows": [(r.submission, r.total, r.max_total, r.status, totals.explain(r)) for r in records],
        "renamed": [(r.submission, r.source, next((n for n in r.notes if n.startswith(NAME_FLAG)), ""))
                    for r in records if r.source and _stem(r.source) != r.submission
                    or any(n.startswith(NAME_FLAG) for n in r.notes)],
    }


# The layers that keep one student's code from the machine, the network and the other students.
# A run without any of them still grades right, but a person must know before trusting it.
SANDBOX_LAYERS = ("pidns", "netns", "ipcns", "uid", "rlimits", "landlock", "seccomp")
REQUIRED_LAYERS = ("pidns", "netns")


def isolation_warnings(records: list[SubmissionResult]) -> list[str]:
    """What a person must know about the sandbox of this class: rows graded without network or PID
    isolation, and rows graded with fewer layers than others (shards from different machines)."""
    def layers(r: SubmissionResult) -> frozenset:
        return frozenset(k for k in SANDBOX_LAYERS if r.isolation.get(k))
    sandboxed = [r for r in records if r.isolation]  # records from before layers were kept say nothing
    if not sandboxed:
        return []
    warnings = []
    for layer in REQUIRED_LAYERS:
        missing = sorted(r.submission for r in sandboxed if layer not in layers(r))
        if missing:
            warnings.append(f"{len(missing)} of {len(sandboxed)} submissions were graded without the `{layer}` layer "
                            f"({_some(missing)}): grade as root (sudo) on a machine that allows namespaces, "
                            "then regrade them with --force.")
    most = max(len(layers(r)) for r in sandboxed)
    fewer = sorted((r for r in sandboxed if len(layers(r)) < most), key=lambda r: r.submission)
    if fewer:
        full = next(layers(r) for r in sandboxed if len(layers(r)) == most)
        gaps = sorted({", ".join(sorted(full - layers(r))) for r in fewer})
        warnings.append(f"{len(fewer)} submissions were graded with fewer sandbox layers than the others "
                        f"(missing: {'; '.join(gaps)}; {_some([r.submission for r in fewer])}): "
                        "shards graded on different machines or as different users.")
    return warnings


def _some(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _stem(source: str) -> str:
    """The name a row would have if its source's name were used as it is."""
    for end in ("/", ".zip", ".ipynb"):
        if source.lower().endswith(end):
            return source[: -len(end)]
    return source


# ---------------------------------------------------------------- the report, described once


def class_document(stats: dict, plots: dict, problems: list[str], reviewed: list[SubmissionResult],
                   similarity_section: list = (), requests: list = (), *, lesson) -> Document:
    """summary.md and report.html as one Document; `similarity_section` is the page's similarity
    blocks (grader/admin/similarity.py's `report_section`)."""
    blocks = [Paragraph(f"{stats['n']} submissions graded. Mean {mean(stats['mean'])} / {number(stats['max_total'])}, "
                        f"median {number(stats['median'])}, lowest {number(stats['min'])}, "
                        f"highest {number(stats['max'])}.")]
    if stats.get("isolation"):
        blocks += [Paragraph("Sandbox layers missing in this run:", warning=True), Bullets(list(stats["isolation"]))]
    if problems:
        blocks += [Paragraph("Records that could not be read (these rows are missing from grades.csv):", warning=True),
                   Bullets(list(problems))]
    if "histogram" in plots:
        blocks.append(Image(plots["histogram"], "score histogram"))
    # Each row links to its feedback page; the final total, and why it is not the automated one.
    blocks.append(Section("Scores", [Table(
        ("submission", "total", "status", "why it differs from the automated total"),
        [[Link(name, f"{quote(name)}/feedback.html"), f"{number(total)} / {number(top)}", Cell(status, status != "ok"),
          why] for name, total, top, status, why in stats["rows"]],
        numeric=frozenset({1}))]))
    blocks.append(Section("Mean per component", [Table(
        ("component", "mean", "out of"),
        [[c, mean(average), number(possible)] for c, (average, possible) in stats["component_means"].items()],
        numeric=frozenset({1, 2}))]))
    blocks.append(Section("Pass rate per test", [
        *([Image(plots["pass_rates"], "pass rate per test")] if "pass_rates" in plots else []),
        Table(("test", "component", "passed", "rate"),
              [[Code(t["name"]), t["component"], f"{t['passed']} / {t['graded']}",
                f"{100 * t['passed'] / t['graded']:.0f}%"] for t in stats["tests"]],
              numeric=frozenset({2, 3}))]))
    blocks.append(Section("Most frequent misconceptions", [Table(
        ("misconception", "students", "hint", "who"),
        [[Code(m["hint_id"]), str(len(m["submissions"])), m["text"], ", ".join(m["submissions"])]
         for m in stats["misconceptions"]],
        numeric=frozenset({1}))] if stats["misconceptions"] else [
        Paragraph("No recognised misconception in this class.")]))
    if lesson.evidence_components:  # the lesson's words for the evidence its hidden tests keep
        blocks.append(Section(lesson.evidence.title, _evidence_blocks(stats, plots, lesson.evidence)))
    if stats.get("renamed"):
        blocks.append(Section("Row names to check", [
            Paragraph(["Names changed to be filesystem-safe, or that would have collided; ", Code("source"),
                       " in grades.csv has every row's."]),
            Table(("row", "submitted as", "why"),
                  [[name, FileName(source), why] for name, source, why in stats["renamed"]])]))
    if stats.get("groups"):
        blocks.append(Section("Groups (roster.csv)", [Table(("group", "members (submission)"),
                                                           [[g, members] for g, members in stats["groups"]])]))
    blocks.append(Section("Faults and notes", [Bullets(
        [Item([Strong(name), ": ", status], tuple(notes)) for name, status, notes in stats["faults"]])]
        if stats["faults"] else [Paragraph("None.")]))
    blocks.append(Section("Integrity flags", [
        Paragraph("What the grader saw, for the staff only: attempts to fake a result (each neutralised: a "
                  "planted or printed result is never read) and constructs the assignment never needs. No "
                  "points by themselves; worth a look:"),
        Bullets([Item(Strong(name), tuple(flags)) for name, flags in stats["flags"]])]
        if stats["flags"] else [Paragraph("None.")]))
    blocks.append(Section("Status counts", [Bullets([f"{s}: {n}" for s, n in sorted(stats["status"].items())])]))
    blocks.append(Only("markdown", Paragraph(
        "Per-student scores are in grades.csv; each student's feedback is in <name>/feedback.md.")))
    blocks += [Only("html", block) for block in similarity_section]
    blocks.append(Section("Reviewed by hand (overrides.csv)", [Table(
        ("submission", "test", "points", "comment to the student", "staff note (never shown to the student)", "by"),
        [[r.submission, o["test"], feedback.override_change(o, number) + (f" ({overrides.EARLIER})" if
                                                                           o.get("earlier_version") else ""),
          *_audiences(o), o.get("by", "")]
         for r in reviewed for o in r.overrides])] if reviewed else [Paragraph("No overrides.")]))
    if requests:
        counts = Counter(s.state for s in requests)
        blocks.append(Section("Regrade requests (regrade_requests.csv)", [
            Paragraph(", ".join(f"{counts[state]} {state}" for state in regrade_requests.STATES) + "."),
            Table(("student", "test", "asked", "reason", "state", "decision"),
                  [[s.request.student, Code(s.request.test), s.request.time, s.request.reason,
                    Cell(s.state, s.state == "open"), _decision_words(s)] for s in requests])]))
    return Document(title=f"{lesson.heading}: class report", page_title=f"{lesson.label or lesson.title} class report",
                    blocks=blocks)


def _audiences(o: dict) -> tuple[str, str]:
    """(what the student reads, what only the staff read) of one decision: a staff-only row's comment
    is the staff's too."""
    if o.get("staff_only"):
        return "(staff-only decision)", "; ".join(t for t in (o.get("comment", ""), o.get("staff_note", "")) if t)
    return o.get("comment", ""), o.get("staff_note", "")


def _decision_words(standing) -> str:
    """A regrade decision for the report (staff-facing: the staff note too), with the points it changed."""
    decision = standing.decision
    if decision is None:
        return ""
    change = "no change of points" if decision.points is None else f"{decision.points:g} points"
    if standing.before is not None and decision.points is not None:
        change += f" (was {standing.before:g}{': lowered' if standing.lowered else ''})"
    if standing.set_aside:
        change += f" ({overrides.earlier_words(True)})"
    note = f"; staff: {decision.staff_note}" if decision.staff_note else ""
    return f"{change}: {decision.comment}{note}" + (f" ({decision.by})" if decision.by else "")


def _evidence_blocks(stats: dict, plots: dict, words) -> list:
    if not plots["evidence"]:
        return [Paragraph(words.none)]
    blocks = [Figures([Figure(rel, words.picture, [entry["submission"], ": ", Code(entry["test"])])
                       for entry, rel in plots["evidence"]])]
    missing = stats["evidence"]["available"] - len(plots["evidence"])
    if missing > 0:
        blocks.append(Paragraph(f"{missing} more not drawn; each student's feedback.md has the numbers."))
    return blocks
