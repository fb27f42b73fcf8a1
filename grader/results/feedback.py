"""What a student is told: each submission's results.json, feedback.md and feedback.html.

Per submission (`write_submission`), in <out>/<submission>/:
    results.json   Gradescope's format (score, execution_time, output, tests[])
    feedback.md    what passed, what failed, expected vs got, hints, faults; by component
    feedback.html  the same as a page (the class report links to it)
    record.json    last (grader/results/storage.py): the class files and `merge` never re-grade

How much of a failing test a student sees depends on the release policy: the rubric's
[visibility] table says when each test's details may be shown, `--release` says what moment it
is (`visibility_of`, `released`). Hints come from the rubric (`hint_texts`).

Student-derived text (names, error messages, outputs) is untrusted: it is fenced or escaped in
Markdown and escaped in HTML.
"""
from __future__ import annotations

import functools
import html
import re
from pathlib import Path

from grader.admin import overrides
from grader.results.document import STYLE, md_code, md_inline
from grader.lesson import load_lesson, read_rubric
from grader.results.records import SubmissionResult
from grader.results.storage import check_name, dumps, write_atomic, write_record

MAX_TEST_OUTPUT = 6000  # characters of one test's output kept: Gradescope pages stay readable
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")  # Gradescope's, least to most withheld
# --release: what a student may see at that moment; each shows the tests whose visibility is up to it.
RELEASES = {"now": "visible", "after_due_date": "after_due_date", "published": "after_published", "all": "hidden"}
DEFAULT_RELEASE = "after_due_date"
WITHHELD_UNTIL = {"after_due_date": "after the due date", "after_published": "when the grades are published",
                  "hidden": "only to the teaching staff"}


# ---------------------------------------------------------------- one submission


def write_submission(out_dir: Path, result: SubmissionResult) -> None:
    """Write <out>/<submission>/results.json, feedback.md, feedback.html and record.json (last), atomically."""
    folder = Path(out_dir) / check_name(result.submission)
    folder.mkdir(parents=True, exist_ok=True)
    hints = hint_texts()
    write_atomic(folder / "results.json", dumps(gradescope_json(result)))
    text = feedback_markdown(result, hints)
    write_atomic(folder / "feedback.md", text)
    write_atomic(folder / "feedback.html", feedback_html(text, result.submission))
    write_record(folder, result)


def rewrite_changed(folder: Path, result: SubmissionResult, hints: dict[str, str], release: str) -> None:
    """results.json and the feedback as the overrides and the release make them, written only where
    they differ from the files (the record stays the automated result)."""
    feedback = feedback_markdown(result, hints, release)
    for name, text in (("results.json", dumps(gradescope_json(result))), ("feedback.md", feedback),
                       ("feedback.html", feedback_html(feedback, result.submission))):
        try:
            same = (folder / name).read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            write_atomic(folder / name, text)


def _summary_line(result: SubmissionResult) -> str:
    parts = " · ".join(f"{c} {_points(s)}/{_points(m)}" for c, (s, m) in by_component(result).items())
    line = f"Score {_points(result.total)}/{_points(result.max_total)} ({parts})."
    if why := _why(result):
        line += f" How this score was reached: {why}."
    if result.adjustment:
        line += f" Includes {'+' if result.adjustment > 0 else '-'}{_points(abs(result.adjustment))} from your instructor."
    if result.status != "ok":
        line += f" Status: {result.status}."
    return line


def gradescope_json(result: SubmissionResult) -> dict:
    """results.json as Gradescope reads it (gradescope-autograders.readthedocs.io, "Output format")."""
    output = _summary_line(result)
    rubric = rubric_path()
    if result.notes:
        output += "\n" + "\n".join(f"- {n}" for n in result.notes)
    if result.line_comments:  # Gradescope shows this text, not feedback.md: the same words, plain
        output += "\n\nComments on your code:\n" + "\n".join(
            f"- {c['file']} line {c['line']}: {c['comment']}" for c in result.line_comments)
    if result.requests:
        output += "\n\nYour regrade requests:\n" + "\n".join(
            f"- {r['test']} (asked {r['time']}): {r['state']}" + (f": {r['answer']}" if r.get("answer") else "")
            for r in result.requests)
    tests = [
        {
            "name": f"{t.title} ({t.name})" if t.title else t.name,
            "score": t.score,
            "max_score": t.max_score,
            "status": "passed" if t.status == "passed" else "failed",
            "output": clip(t.output),
            "visibility": visibility_of(t.name, t.component, rubric),
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


def by_component(result: SubmissionResult) -> dict[str, tuple[float, float]]:
    """Part -> (points got, points possible), every part of the lesson's rubric first, in its order."""
    got = result.component_scores()
    possible = {c: 0.0 for c in load_lesson().components}
    for t in result.tests:
        possible[t.component] = possible.get(t.component, 0.0) + t.max_score
    return {c: (got.get(c, 0.0), possible[c]) for c in possible}


# ---------------------------------------------------------------- feedback.md

def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside, so student text can't close it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text.rstrip()}\n{bar}"


def feedback_markdown(result: SubmissionResult, hints: dict[str, str] | None = None,
                      release: str = DEFAULT_RELEASE) -> str:
    """The student's feedback; a failing test's details (expected, got, hint) appear only when the
    release policy lets a student see that test at `release` (see RELEASES)."""
    hints = hints or {}
    lesson, rubric = load_lesson(), rubric_path()
    parts = by_component(result)
    out = [f"# {md_inline(lesson.heading)}: feedback for {md_inline(result.submission)}", ""]
    status = "" if result.status == "ok" else f" · status: {md_inline(result.status)}"
    out += [f"**Score: {_points(result.total)} / {_points(result.max_total)}**{status}", ""]
    if why := _why(result):
        out += [md_inline(f"How this score was reached: {why}."), ""]
    if result.late:
        out += [md_inline(late_line(result)), ""]
    out += ["| part | points | tests passed |", "| --- | ---: | ---: |"]
    for component, (score, possible) in parts.items():
        tests = [t for t in result.tests if t.component == component]
        passed = sum(t.status == "passed" for t in tests)
        out.append(f"| {component} | {_points(score)} / {_points(possible)} | {passed} / {len(tests)} |")
    out.append("")
    if reviewed := overrides.for_student(result):
        out += ["## Reviewed by your instructor", ""]
        for o in reviewed:
            who = f" ({md_inline(o['by'])})" if o.get("by") else ""
            change = override_change(o, _points, " points on the total", " points")
            comment = f": {md_inline(o['comment'])}" if o.get("comment") else ""
            out.append(f"- {md_code(o['test'])} {change}{who}{comment}")
        out.append("")
    if result.line_comments:
        out += ["## Comments on your code", ""]
        for c in result.line_comments:
            who = f" ({md_inline(c['by'])})" if c.get("by") else ""
            quoted = f": {md_code(c['code'].strip())}" if c.get("code", "").strip() else ""
            out.append(f"- {md_code(c['file'])} line {c['line']}{quoted}{who}: {md_inline(c['comment'])}")
        out.append("")
    if result.requests:
        out += ["## Your regrade requests", ""]
        for r in result.requests:
            answer = f": {md_inline(r['answer'])}" if r.get("answer") else ""
            out.append(f"- {md_code(r['test'])} (asked {md_inline(r['time'])}): **{r['state']}**{answer}")
        out.append("")
    if result.notes and result.status == "ok":
        # A graded notebook, a skipped symlink: how the submission was read, not a problem.
        out += ["## Notes on grading", ""]
        out += [f"- {md_inline(n)}" for n in result.notes]
        out.append("")
    elif result.notes:
        out += ["## What went wrong while grading", ""]
        out += [f"- {md_inline(n)}" for n in result.notes]
        out += ["", "Parts that did not need the failing code were graded as usual.", ""]
    # Integrity flags are the staff's (the class report, the review page): a student reads what failed
    # and why in each test's own output, in neutral words.
    if not result.tests:
        out += ["No tests could be run on this submission.", ""]
    for component in lesson.components:
        tests = [t for t in result.tests if t.component == component]
        if not tests:
            continue
        score, possible = parts[component]
        out += [f"## {component}: {_points(score)} / {_points(possible)}", ""]
        for t in tests:
            mark = "✓" if t.status == "passed" else "✗"
            title = md_inline(t.title or t.name)
            out.append(f"- {mark} **{title}** ({md_code(t.name)}): {_points(t.score)} / {_points(t.max_score)}")
        # Tests that failed with the same text (one crash met by several tests) are shown once,
        # under the list of the tests it cost. A test not released yet shows its points only.
        same: dict[tuple, list] = {}
        withheld: dict[str, int] = {}
        for t in tests:
            if t.status == "passed":
                continue
            visibility = visibility_of(t.name, t.component, rubric)
            if not released(visibility, release):
                withheld[visibility] = withheld.get(visibility, 0) + 1
                continue
            same.setdefault((t.output.strip(), t.hint_id), []).append(t)
        for group in same.values():
            t = group[0]
            titles = ", ".join(md_inline(u.title or u.name) for u in group)
            cost = f" (the same message for {len(group)} tests)" if len(group) > 1 else ""
            out += ([] if out[-1] == "" else [""]) + [f"### ✗ {titles}{cost}", ""]
            if t.output.strip():
                out += [_fence(clip(t.output)), ""]
            hint = hints.get(t.hint_id or "")
            if hint and hint not in t.output:
                out += [f"**Hint:** {md_inline(hint)}", ""]
            elif t.hint_id and not hint:  # a mistake the rubric no longer words: its id, as data
                out += [f"Likely misconception: {md_code(t.hint_id)}", ""]
        for visibility, count in withheld.items():
            out += ([] if out[-1] == "" else [""]) + [
                f"The details of {count} failing test{'s' if count > 1 else ''} here are shown "
                f"{WITHHELD_UNTIL[visibility]}.", ""]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


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
    if not days:
        return f"Handed in on time (deadline {result.late.get('deadline', '?')})."
    return (f"Handed in {days} day{'s' if days > 1 else ''} late (deadline {result.late.get('deadline', '?')}, "
            f"measured from the {result.late.get('measured_from') or 'commit time'}): -{_points(result.penalty)} "
            f"points ({result.late.get('policy', '')}).")


def _points(x: float) -> str:
    """Points as a student reads them in feedback: at most two decimals (84.44, 12.5, 30)."""
    text = f"{round(float(x), 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------- feedback as a page


def feedback_html(markdown: str, name: str) -> str:
    """feedback.md as a web page, for the class report's links (a browser shows .md as plain text).

    Renders only the Markdown that feedback_markdown writes (headings, lists, tables, fences, bold,
    code spans, backslash escapes); everything is escaped first, so student text stays text."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
           f"<title>Feedback: {e(name)}</title>", f"<style>{STYLE}</style></head><body>"]
    lines = markdown.splitlines()
    i, in_list = 0, False
    while i < len(lines):
        line = lines[i]
        fence = len(line) - len(line.lstrip("`"))
        if fence >= 3:
            body, i = [], i + 1
            while i < len(lines) and lines[i] != "`" * fence:
                body.append(lines[i])
                i += 1
            out.append(f"<pre>{e(chr(10).join(body))}</pre>")
            i += 1
            continue
        if in_list and not line.lstrip().startswith("- "):
            out.append("</ul>")
            in_list = False
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            out.append(f"<h{level}>{_inline_html(line[level:].strip())}</h{level}>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            cells = [_table_cells(r) for r in rows if not set(r) <= set("|-: ")]
            out.append("<table>" + "".join(
                "<tr>" + "".join(f"<{'th' if k == 0 else 'td'}>{_inline_html(c)}</{'th' if k == 0 else 'td'}>"
                                 for c in row) + "</tr>" for k, row in enumerate(cells)) + "</table>")
            continue
        elif line.lstrip().startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline_html(line.lstrip()[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{_inline_html(line)}</p>")
        i += 1
    if in_list:
        out.append("</ul>")
    return "\n".join(out + ["</body></html>"]) + "\n"


def _table_cells(row: str) -> list[str]:
    cells, current, escaped = [], "", False
    for ch in row.strip()[1:]:
        if escaped:
            current += "\\" + ch
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "|":
            cells.append(current.strip())
            current = ""
        else:
            current += ch
    return cells


def _inline_html(text: str) -> str:
    """Code spans, **bold** and backslash escapes of one line; every character escaped for HTML.

    The text between two marks (a backslash, a backtick, an asterisk) is escaped as one run: a
    class's feedback pages hold hundreds of thousands of characters, and a character at a time was
    most of the time spent writing a page."""
    out, i, strong, n = [], 0, False, len(text)
    while i < n:
        mark = _INLINE_MARK.search(text, i)
        j = mark.start() if mark else n
        if j > i:
            out.append(html.escape(text[i:j]))
        if mark is None:
            break
        ch = text[j]
        if ch == "\\" and j + 1 < n and not text[j + 1].isalnum():
            out.append(html.escape(text[j + 1]))
            i = j + 2
        elif ch == "`":
            end = text.find("`", j + 1)
            if end < 0:
                out.append("`")
                i = j + 1
            else:
                out.append(f"<code>{html.escape(text[j + 1:end])}</code>")
                i = end + 1
        elif text.startswith("**", j):
            out.append("</strong>" if strong else "<strong>")
            strong = not strong
            i = j + 2
        else:  # a lone backslash or asterisk is text
            out.append(ch)
            i = j + 1
    if strong:
        out.append("</strong>")
    return "".join(out)


_INLINE_MARK = re.compile(r"[\\`*]")


# ---------------------------------------------------------------- release policy


def rubric_path() -> Path:
    """The rubric whose visibility table, hints and late policy the outputs follow: the lesson's."""
    return load_lesson().rubric_path


def visibility_of(test_name: str, component: str, rubric: Path | None = None) -> str:
    """The test's visibility from the rubric's [visibility] table: the test id, else its part, else
    `default`, else visible."""
    path = rubric or rubric_path()
    table = _parse_visibility(str(path), _mtime(path))
    found = table.get(test_name) or table.get(component) or table.get("default") or "visible"
    return found if found in VISIBILITIES else "visible"


def released(visibility: str, release: str) -> bool:
    """May a student see the details of a test with this visibility under `--release release`?"""
    return VISIBILITIES.index(visibility) <= VISIBILITIES.index(RELEASES[release])


def _mtime(path: Path) -> int:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=4)
def _parse_visibility(file: str, mtime_ns: int) -> dict[str, str]:
    try:
        table = read_rubric(file).get("visibility", {})
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in table.items() if isinstance(v, str)} if isinstance(table, dict) else {}


# ---------------------------------------------------------------- rubric hints


def hint_texts(rubric: Path | None = None) -> dict[str, str]:
    """hint id -> hint text, read from the lesson's rubric.toml when it is there.

    The rubric keeps catalogue hints as [hints."<id>"] text = "..." and each test's default
    hint as [<component>.<test>] hint = "..."; both are filed here (the latter under the
    dotted test name, and under an `id` field if a table has one).
    """
    path = Path(rubric or rubric_path())
    try:
        return dict(_parse_hints(str(path), path.stat().st_mtime_ns))
    except OSError:
        return {}


@functools.lru_cache(maxsize=4)
def _parse_hints(file: str, mtime_ns: int) -> dict[str, str]:
    """Cached per file version: a batch writes hundreds of feedback files from one rubric."""
    try:
        data = read_rubric(file)
    except (OSError, ValueError):
        return {}
    found: dict[str, str] = {}

    def walk(path: str, node) -> None:
        if isinstance(node, dict):
            text = node.get("hint")
            if isinstance(text, str) and text.strip():
                for key in (path, node.get("id")):
                    if isinstance(key, str) and key:
                        found.setdefault(key, text.strip())
            for k, v in node.items():
                if k == "hints" and isinstance(v, dict):
                    for hint_id, entry in v.items():
                        text = entry.get("text") or entry.get("hint") if isinstance(entry, dict) else entry
                        if isinstance(text, str) and text.strip():
                            found.setdefault(hint_id, text.strip())
                    continue
                walk(f"{path}.{k}" if path else k, v)
        elif isinstance(node, list):
            for item in node:
                walk(path, item)

    walk("", data)
    return found
