"""Stage "report": every file a grading run leaves under OUT.

Per submission (`write_submission`), in <out>/<submission>/:
    results.json   Gradescope's format (score, execution_time, output, tests[])
    feedback.md    what passed, what failed, expected vs got, hints, faults; by component
    feedback.html  the same as a page (the class report links to it)
    record.json    the whole SubmissionResult, so the class files and `merge` never re-grade
For the class (`write_class`), from every <out>/*/record.json:
    grades.csv, summary.md, report.html, and the PNGs they show under <out>/_plots/

Every file is written atomically (temp file in the same folder, then os.replace), and
record.json last: a folder with a record.json is complete, which is what resume relies on.
The same record always gives the same bytes (sorted keys, fixed rounding); only
`execution_time` may differ between two gradings of one submission.

Student-derived text (names, error messages, outputs) is untrusted: it is escaped in HTML,
fenced in Markdown, and never used as a path without checking it.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import html
import io
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from grader import overrides
from grader.lesson import load_lesson, read_rubric
from grader.records import COMPONENTS, SubmissionResult, TestResult

RECORD_VERSION = 1
GRADES_COLUMNS = ("submission", "total", "max_total", *COMPONENTS, "status", "source", "overrides", "late_days",
                  "penalty")
PLOTS = "_plots"  # intake never names a submission with a leading "_", so no student folder can clash
# Every file a run writes beside the row folders: intake never gives a row one of these names.
CLASS_FILES = ("grades.csv", "summary.md", "report.html", "similarity.csv", "similarity.html", "overrides.csv",
               PLOTS)
MAX_HEATMAPS = 8  # drawn per class report; a 200-student class must not spend its time plotting
MAX_MATRIX_SIDE = 64  # larger evidence is not a lesson-sized attention matrix: skipped
ATTENTION_COMPONENTS = load_lesson().attention_components  # parts whose evidence is drawn as heatmaps
DIGITS = 4  # rounding of every score and evidence value written
MAX_TEST_OUTPUT = 6000  # characters of one test's output kept: Gradescope pages stay readable
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")  # Gradescope's, least to most withheld
# --release: what a student may see at that moment; each shows the tests whose visibility is up to it.
RELEASES = {"now": "visible", "after_due_date": "after_due_date", "published": "after_published", "all": "hidden"}
DEFAULT_RELEASE = "after_due_date"


# ---------------------------------------------------------------- atomic files


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write `path` so that readers see the old file or the new one, never a part.

    The temp file lives in the same folder (os.replace is only atomic within one file
    system) and starts with a dot, so nothing that globs for outputs ever picks it up.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Covers KeyboardInterrupt too; only kill -9 can leave a dot-temp behind, and readers ignore those.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _dumps(obj) -> str:
    return json.dumps(_rounded(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _rounded(obj):
    """Fixed rounding everywhere, and NaN/inf (a student's weights can hold them) as strings."""
    if hasattr(obj, "tolist") and not isinstance(obj, (bool, int, float, str)):
        obj = obj.tolist()  # numpy scalars and arrays, should a grader hand them over
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return str(obj)
        value = round(obj, DIGITS)
        return 0.0 if value == 0 else value  # no "-0.0"
    if isinstance(obj, dict):
        return {str(k): _rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    return str(obj)


def _short(x: float) -> str:
    """A class mean: one decimal is enough to read."""
    return _number(round(float(x), 1))


def _points(x: float) -> str:
    """Points as a student reads them in feedback: at most two decimals (84.44, 12.5, 30)."""
    text = f"{round(float(x), 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _number(x: float) -> str:
    """A score as a person writes it: 30, 12.5, 0.3333."""
    text = f"{round(float(x), DIGITS):.{DIGITS}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------- records on disk


def _check_name(name: str) -> str:
    """A submission name becomes a folder under OUT: refuse anything that could escape it."""
    if (not isinstance(name, str) or not name or name.startswith((".", "_"))
            or "/" in name or "\\" in name or "\x00" in name or name.lower() in CLASS_FILES):
        raise ValueError(
            f"submission name {name!r} cannot be used as a folder under the output directory; "
            "the intake stage must give every submission a plain name that starts with a letter or digit "
            f"and is none of {', '.join(CLASS_FILES)}"
        )
    return name


def record_to_json(result: SubmissionResult) -> dict:
    data = dataclasses.asdict(result)
    data["record_version"] = RECORD_VERSION
    data["total"] = result.total
    data["max_total"] = result.max_total
    return data


def record_from_json(data: dict) -> SubmissionResult:
    """The inverse of record_to_json; unknown keys (from a newer kit) are ignored."""
    test_fields = {f.name for f in dataclasses.fields(TestResult)}
    result_fields = {f.name for f in dataclasses.fields(SubmissionResult)} - {"tests"}
    tests = [TestResult(**{k: v for k, v in t.items() if k in test_fields}) for t in data.get("tests", [])]
    return SubmissionResult(tests=tests, **{k: v for k, v in data.items() if k in result_fields})


def load_records(out_dir: Path) -> tuple[list[SubmissionResult], list[str]]:
    """Every complete record under out_dir, sorted by name, and the folders that could not be read."""
    records, problems = [], []
    for path in sorted(Path(out_dir).glob("*/record.json")):
        if path.parent.name.startswith((".", "_")) or path.is_symlink():
            continue
        try:
            records.append(record_from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError) as e:
            problems.append(f"{path.parent.name}: record.json unreadable ({type(e).__name__}: {e})")
    records.sort(key=lambda r: r.submission)
    return records, problems


# ---------------------------------------------------------------- one submission


def write_submission(out_dir: Path, result: SubmissionResult) -> None:
    """Write <out>/<submission>/results.json, feedback.md and record.json (last), atomically."""
    folder = Path(out_dir) / _check_name(result.submission)
    folder.mkdir(parents=True, exist_ok=True)
    hints = _hint_texts()
    write_atomic(folder / "results.json", _dumps(gradescope_json(result)))
    text = feedback_markdown(result, hints)
    write_atomic(folder / "feedback.md", text)
    write_atomic(folder / "feedback.html", feedback_html(text, result.submission))
    write_atomic(folder / "record.json", _dumps(record_to_json(result)))


def _summary_line(result: SubmissionResult) -> str:
    parts = " · ".join(f"{c} {_number(s)}/{_number(m)}" for c, (s, m) in _by_component(result).items())
    line = f"Score {_number(result.total)}/{_number(result.max_total)} ({parts})."
    if result.adjustment:
        line += f" Includes {result.adjustment:+g} from your instructor."
    if result.status != "ok":
        line += f" Status: {result.status}."
    return line


def gradescope_json(result: SubmissionResult) -> dict:
    """results.json as Gradescope reads it (gradescope-autograders.readthedocs.io, "Output format")."""
    output = _summary_line(result)
    if result.notes:
        output += "\n" + "\n".join(f"- {n}" for n in result.notes)
    tests = [
        {
            "name": f"{t.title} ({t.name})" if t.title else t.name,
            "score": t.score,
            "max_score": t.max_score,
            "status": "passed" if t.status == "passed" else "failed",
            "output": _clip(t.output),
            "visibility": visibility_of(t.name, t.component),
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
                            "output": _late_line(result), "visibility": "visible"}] if result.penalty else [])
        + ([{"name": "Instructor's adjustment", "score": result.adjustment, "max_score": 0,
                            "status": "passed", "output": "; ".join(o["comment"] for o in result.overrides
                                                                       if o["test"] == overrides.BONUS),
                            "visibility": "visible"}] if result.adjustment else []),
        "extra_data": {"status": result.status, "isolation": result.isolation,
                       **({"overrides": result.overrides} if result.overrides else {})},
    }


def _clip(text: str) -> str:
    if len(text) <= MAX_TEST_OUTPUT:
        return text
    return text[:MAX_TEST_OUTPUT] + f"\n... ({len(text) - MAX_TEST_OUTPUT} more characters cut)"


def _by_component(result: SubmissionResult) -> dict[str, tuple[float, float]]:
    got = result.component_scores()
    possible = {c: 0.0 for c in COMPONENTS}
    for t in result.tests:
        possible[t.component] = possible.get(t.component, 0.0) + t.max_score
    return {c: (got.get(c, 0.0), possible[c]) for c in possible}


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside, so student text can't close it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text.rstrip()}\n{bar}"


def _md_inline(text: str) -> str:
    """One line of untrusted text, shown literally in Markdown.

    Escapes what could make markup of it (links, images, HTML, code, emphasis, table cells,
    headings); an intraword `_` is left alone, CommonMark never reads it as emphasis.
    """
    text = " ".join(str(text).split())
    for ch in "\\`*[]<|#":
        text = text.replace(ch, "\\" + ch)
    return text


def _md_code(text: str) -> str:
    """Untrusted text as an inline code span (a backtick inside would end it early)."""
    return "`" + " ".join(str(text).replace("`", "'").split()) + "`"


WITHHELD_UNTIL = {"after_due_date": "after the due date", "after_published": "when the grades are published",
                  "hidden": "only to the teaching staff"}


def feedback_markdown(result: SubmissionResult, hints: dict[str, str] | None = None,
                      release: str = DEFAULT_RELEASE) -> str:
    """The student's feedback; a failing test's details (expected, got, hint) appear only when the
    release policy lets a student see that test at `release` (see RELEASES)."""
    hints = hints or {}
    out = [f"# Day 13 · Attention & Transformers: feedback for {_md_inline(result.submission)}", ""]
    status = "" if result.status == "ok" else f" · status: {_md_inline(result.status)}"
    out += [f"**Score: {_points(result.total)} / {_points(result.max_total)}**{status}", ""]
    if result.late:
        out += [_md_inline(_late_line(result)), ""]
    out += ["| part | points | tests passed |", "| --- | ---: | ---: |"]
    for component, (score, possible) in _by_component(result).items():
        tests = [t for t in result.tests if t.component == component]
        passed = sum(t.status == "passed" for t in tests)
        out.append(f"| {component} | {_points(score)} / {_points(possible)} | {passed} / {len(tests)} |")
    out.append("")
    if result.overrides:
        out += ["## Reviewed by your instructor", ""]
        for o in result.overrides:
            who = f" ({_md_inline(o['by'])})" if o.get("by") else ""
            change = _override_change(o, _points, " points on the total", " points")
            comment = f": {_md_inline(o['comment'])}" if o.get("comment") else ""
            out.append(f"- {_md_code(o['test'])} {change}{who}{comment}")
        out.append("")
    if result.notes and result.status == "ok":
        # A graded notebook, a skipped symlink: how the submission was read, not a problem.
        out += ["## Notes on grading", ""]
        out += [f"- {_md_inline(n)}" for n in result.notes]
        out.append("")
    elif result.notes:
        out += ["## What went wrong while grading", ""]
        out += [f"- {_md_inline(n)}" for n in result.notes]
        out += ["", "Parts that did not need the failing code were graded as usual.", ""]
    if result.flags:
        out += ["## Integrity flags (for your instructor; no points)", ""]
        out += ["Constructs this assignment never needs. They cost nothing by themselves:", ""]
        out += [f"- {_md_inline(f)}" for f in result.flags] + [""]
    if not result.tests:
        out += ["No tests could be run on this submission.", ""]
    for component in COMPONENTS:
        tests = [t for t in result.tests if t.component == component]
        if not tests:
            continue
        score, possible = _by_component(result)[component]
        out += [f"## {component}: {_points(score)} / {_points(possible)}", ""]
        for t in tests:
            mark = "✓" if t.status == "passed" else "✗"
            title = _md_inline(t.title or t.name)
            out.append(f"- {mark} **{title}** ({_md_code(t.name)}): {_points(t.score)} / {_points(t.max_score)}")
        # Tests that failed with the same text (one crash met by several tests) are shown once,
        # under the list of the tests it cost. A test not released yet shows its points only.
        same: dict[tuple, list] = {}
        withheld: dict[str, int] = {}
        for t in tests:
            if t.status == "passed":
                continue
            visibility = visibility_of(t.name, t.component)
            if not released(visibility, release):
                withheld[visibility] = withheld.get(visibility, 0) + 1
                continue
            same.setdefault((t.output.strip(), t.hint_id), []).append(t)
        for group in same.values():
            t = group[0]
            titles = ", ".join(_md_inline(u.title or u.name) for u in group)
            cost = f" (the same message for {len(group)} tests)" if len(group) > 1 else ""
            out += ([] if out[-1] == "" else [""]) + [f"### ✗ {titles}{cost}", ""]
            if t.output.strip():
                out += [_fence(_clip(t.output)), ""]
            hint = hints.get(t.hint_id or "")
            if hint and hint not in t.output:
                out += [f"**Hint:** {_md_inline(hint)}", ""]
            elif t.hint_id and not hint and not _hint_from_output(t.output):
                out += [f"Likely misconception: {_md_code(t.hint_id)}", ""]
        for visibility, count in withheld.items():
            out += ([] if out[-1] == "" else [""]) + [
                f"The details of {count} failing test{'s' if count > 1 else ''} here are shown "
                f"{WITHHELD_UNTIL[visibility]}.", ""]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- feedback as a page


def feedback_html(markdown: str, name: str) -> str:
    """feedback.md as a web page, for the class report's links (a browser shows .md as plain text).

    Renders only the Markdown that feedback_markdown writes (headings, lists, tables, fences, bold,
    code spans, backslash escapes); everything is escaped first, so student text stays text."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
           f"<title>Feedback: {e(name)}</title>", f"<style>{_CSS}</style></head><body>"]
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
    """Code spans, **bold** and backslash escapes of one line; every character escaped for HTML."""
    out, i, strong = [], 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and not text[i + 1].isalnum():
            out.append(html.escape(text[i + 1]))
            i += 2
        elif ch == "`":
            end = text.find("`", i + 1)
            if end < 0:
                out.append("`")
                i += 1
            else:
                out.append(f"<code>{html.escape(text[i + 1:end])}</code>")
                i = end + 1
        elif text.startswith("**", i):
            out.append("</strong>" if strong else "<strong>")
            strong = not strong
            i += 2
        else:
            out.append(html.escape(ch))
            i += 1
    if strong:
        out.append("</strong>")
    return "".join(out)


# ---------------------------------------------------------------- release policy



def visibility_of(test_name: str, component: str, rubric_path: Path | None = None) -> str:
    """The test's visibility from the rubric's [visibility] table: the test id, else its part, else
    `default`, else visible."""
    table = _parse_visibility(str(rubric_path or _RUBRIC), _mtime(rubric_path or _RUBRIC))
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


_RUBRIC = load_lesson().rubric_path


# ---------------------------------------------------------------- rubric hints


def _hint_texts(rubric_path: Path | None = None) -> dict[str, str]:
    """hint id -> hint text, read from the lesson's rubric.toml when it is there.

    The rubric keeps catalogue hints as [hints."<id>"] text = "..." and each test's default
    hint as [<component>.<test>] hint = "..."; both are filed here (the latter under the
    dotted test name, and under an `id` field if a table has one).
    """
    path = Path(rubric_path or _RUBRIC)
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


def _hint_from_output(output: str) -> str:
    for line in output.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith(("hint", "likely misconception")) and ":" in stripped:
            return stripped.split(":", 1)[1].strip()
    return ""


# ---------------------------------------------------------------- the class


def write_class(out_dir: Path, overrides_path: Path | None = None, release: str = DEFAULT_RELEASE) -> None:
    """grades.csv, summary.md, report.html and _plots/ from every <out>/*/record.json, with the
    overrides file (OUT/overrides.csv unless given) applied; each submission's results.json and
    feedback.md are rewritten where the overrides change them. OverrideError for a row naming an
    unknown submission or test: nothing is written then."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records, problems = load_records(out_dir)
    path = Path(overrides_path) if overrides_path else overrides.default_path(out_dir)
    rows = overrides.read(path)
    overrides.check(rows, records, path=path)
    decided = overrides.effective(rows)
    records = [overrides.apply(r, decided.get(r.submission, {})) for r in records]
    _apply_late(out_dir, records)
    _write_reviewed(out_dir, records, release)
    write_atomic(out_dir / "grades.csv", grades_csv(records))
    stats = class_stats(records, _hint_texts())
    plots = _write_plots(out_dir, records, stats)
    reviewed = [r for r in records if r.overrides]
    write_atomic(out_dir / "summary.md", summary_markdown(stats, plots, problems) + _overrides_markdown(reviewed))
    from grader import similarity  # its section reads OUT/similarity.csv, written by `grade` or `similarity`

    write_atomic(out_dir / "report.html", report_html(stats, plots, problems, [similarity.report_section(out_dir),
                                                                              _overrides_html(reviewed)]))


def _override_change(o: dict, number, bonus_unit: str = "", unit: str = "") -> str:
    """What one override did, in words: reviewed, a bonus on the total, or old -> new points."""
    if o["points"] is None:
        return "reviewed"
    if o["test"] == overrides.BONUS:
        return f"{o['points']:+g}{bonus_unit}"
    return f"{number(o['automated'])} → {number(o['points'])}{unit}"


def _overrides_rows(reviewed: list[SubmissionResult]):
    for r in reviewed:
        for o in r.overrides:
            change = _override_change(o, _number)
            yield r.submission, o["test"], change, o.get("comment", ""), o.get("by", "")


def _overrides_markdown(reviewed: list[SubmissionResult]) -> str:
    if not reviewed:
        return ""
    out = ["", "## Reviewed by hand (overrides.csv)", "", "| submission | test | points | comment | by |",
           "| --- | --- | --- | --- | --- |"]
    out += [" | ".join(["", *(_md_inline(x) for x in row), ""]).strip() for row in _overrides_rows(reviewed)]
    return "\n".join(out) + "\n"


def _overrides_html(reviewed: list[SubmissionResult]) -> str:
    e = html.escape
    out = ["<h2>Reviewed by hand (overrides.csv)</h2>"]
    if not reviewed:
        return "\n".join(out + ["<p>No overrides.</p>"])
    out.append("<table><tr><th>submission</th><th>test</th><th>points</th><th>comment</th><th>by</th></tr>")
    out += ["<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in row) + "</tr>" for row in _overrides_rows(reviewed)]
    return "\n".join(out + ["</table>"])


def _apply_late(out_dir: Path, records: list[SubmissionResult]) -> None:
    """The rubric's late policy on each row's lateness (OUT/<name>/late.json); nothing without a policy."""
    from grader import late

    policy = late.load_policy(_RUBRIC)
    if policy is None:
        return
    for r in records:
        found = late.read_lateness(out_dir / r.submission)
        if found is not None:
            r.late = found
            r.penalty = late.penalty(found["late_days"], r.max_total, policy)
            r.late["policy"] = (f"{policy.penalty_per_day:g}% of the total per started day after "
                                f"{policy.grace_minutes:g} minutes' grace, at most {policy.max_days} days")


def _late_line(result: SubmissionResult) -> str:
    days = result.late.get("late_days", 0)
    if not days:
        return f"Handed in on time (deadline {result.late.get('deadline', '?')})."
    return (f"Handed in {days} day{'s' if days > 1 else ''} late (deadline {result.late.get('deadline', '?')}, "
            f"measured from the {result.late.get('measured_from') or 'commit time'}): -{_number(result.penalty)} "
            f"points ({result.late.get('policy', '')}).")


def _write_reviewed(out_dir: Path, records: list[SubmissionResult], release: str) -> None:
    """results.json and feedback.md as the overrides and the release make them, where they differ
    from the files."""
    hints = _hint_texts()
    for r in records:
        folder = out_dir / _check_name(r.submission)
        feedback = feedback_markdown(r, hints, release)
        for name, text in (("results.json", _dumps(gradescope_json(r))), ("feedback.md", feedback),
                           ("feedback.html", feedback_html(feedback, r.submission))):
            try:
                same = (folder / name).read_text(encoding="utf-8") == text
            except (OSError, UnicodeDecodeError):
                same = False
            if not same:
                write_atomic(folder / name, text)


def grades_csv(records: list[SubmissionResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(GRADES_COLUMNS)
    for r in sorted(records, key=lambda r: r.submission):
        parts = r.component_scores()
        writer.writerow([_cell(r.submission), _number(r.total), _number(r.max_total),
                         *(_number(parts.get(c, 0.0)) for c in COMPONENTS), _cell(r.status), _cell(r.source),
                         _cell(overrides.summary(r)), str(r.late["late_days"]) if r.late else "",
                         _number(r.penalty) if r.late else ""])
    return buffer.getvalue()


def _cell(text: str) -> str:
    """A spreadsheet runs a cell starting with = + - @ as a formula: a file or folder name must not."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def class_stats(records: list[SubmissionResult], hints: dict[str, str]) -> dict:
    """Everything the summary and the HTML report show, as plain data."""
    totals = [r.total for r in records]
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
                m["text"] = m["text"] or hints.get(t.hint_id) or _hint_from_output(t.output)
    ranked = sorted(misconceptions.values(), key=lambda m: (-len(m["submissions"]), m["hint_id"]))
    component_means = {}
    for c in COMPONENTS:
        possible = max((_by_component(r)[c][1] for r in records), default=0.0)
        mean = statistics.fmean(r.component_scores().get(c, 0.0) for r in records) if records else 0.0
        component_means[c] = (mean, possible)
    return {
        "n": len(records),
        "max_total": max((r.max_total for r in records), default=0.0),
        "totals": totals,
        "mean": statistics.fmean(totals) if totals else 0.0,
        "median": statistics.median(totals) if totals else 0.0,
        "min": min(totals, default=0.0),
        "max": max(totals, default=0.0),
        "component_means": component_means,
        "status": Counter(r.status for r in records),
        "tests": list(tests.values()),
        "misconceptions": ranked,
        "faults": [(r.submission, r.status, list(r.notes)) for r in records if r.status != "ok" or r.notes],
        "flags": [(r.submission, list(r.flags)) for r in records if r.flags],
        "heatmaps": _heatmap_candidates(records),
        "rows": [(r.submission, r.total, r.max_total, r.status) for r in records],
        "renamed": [(r.submission, r.source, next((n for n in r.notes if n.startswith(NAME_FLAG)), ""))
                    for r in records if r.source and _stem(r.source) != r.submission
                    or any(n.startswith(NAME_FLAG) for n in r.notes)],
    }


NAME_FLAG = "row name "  # how intake's notes about a row's name begin (sanitised, collided, reserved)


def _stem(source: str) -> str:
    """The name a row would have if its source's name were used as it is."""
    for end in ("/", ".zip", ".ipynb"):
        if source.lower().endswith(end):
            return source[: -len(end)]
    return source


# ---------------------------------------------------------------- evidence -> heatmaps


def _matrix(value) -> list[list[float]] | None:
    """A 2-D list of finite-or-not numbers, from whatever nesting the evidence uses; else None."""
    while isinstance(value, list) and value and isinstance(value[0], list) and value[0] \
            and isinstance(value[0][0], list):
        value = value[0]  # leading batch / head dims: show the first slice
    if not (isinstance(value, list) and value and all(isinstance(row, list) for row in value)):
        return None
    width = len(value[0])
    if not (0 < width <= MAX_MATRIX_SIDE and len(value) <= MAX_MATRIX_SIDE):
        return None
    rows = []
    for row in value:
        if len(row) != width:
            return None
        try:
            rows.append([float(x) for x in row])
        except (TypeError, ValueError):
            return None
    return rows


def _evidence_items(evidence) -> list[dict]:
    """Every {"expected", "got"} pair in a record's evidence, whatever its nesting (one level deep)."""
    items = []
    if isinstance(evidence, dict) and "expected" in evidence and "got" in evidence:
        items.append(evidence)
    elif isinstance(evidence, dict):
        for key in sorted(evidence, key=str):
            value = evidence[key]
            if isinstance(value, dict) and "expected" in value and "got" in value:
                items.append({"test": key, **value})
    elif isinstance(evidence, list):
        items += [v for v in evidence if isinstance(v, dict) and "expected" in v and "got" in v]
    return items


def _heatmap_candidates(records: list[SubmissionResult]) -> dict:
    """Pick the pairs to draw: failing attention tests only; one per misconception first."""
    chosen, rest = [], []
    seen_hints = set()
    for r in records:
        status = {t.name: t for t in r.tests}
        for item in _evidence_items(r.evidence):
            expected, got = _matrix(item.get("expected")), _matrix(item.get("got"))
            if expected is None or got is None or len(expected) != len(got) or len(expected[0]) != len(got[0]):
                continue
            test = str(item.get("test", ""))
            t = status.get(test)
            if t is not None and (t.status == "passed" or t.component not in ATTENTION_COMPONENTS):
                continue
            entry = {"submission": r.submission, "test": test, "expected": expected, "got": got,
                     "hint_id": t.hint_id if t else None, "title": (t.title if t else "") or test}
            new_hint = entry["hint_id"] not in seen_hints
            seen_hints.add(entry["hint_id"])
            (chosen if new_hint else rest).append(entry)
            break  # one picture per student is enough for a class report
    picked = (chosen + rest)[:MAX_HEATMAPS]
    picked.sort(key=lambda e: e["submission"])
    return {"picked": picked, "available": len(chosen) + len(rest)}


# ---------------------------------------------------------------- plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9})
    return plt


def _save(fig, path: Path) -> None:
    buffer = io.BytesIO()
    # No Software/date chunks: the same data gives the same bytes.
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    write_atomic(path, buffer.getvalue())


def _safe_file(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:60] or "submission"
    return f"{keep}-{hash_text(name):08x}"


def hash_text(text: str) -> int:
    """A stable hash (Python's hash() is salted per process)."""
    value = 2166136261
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * 16777619) % 2**32
    return value


def _write_plots(out_dir: Path, records: list[SubmissionResult], stats: dict) -> dict:
    """Histogram, pass rates and heatmaps; returns {name: relative path}. Old plots are replaced."""
    folder = out_dir / PLOTS
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    folder.mkdir()
    plots = {"heatmaps": []}
    if not records:
        return plots
    plt = _pyplot()

    top = stats["max_total"] or max(stats["totals"], default=1.0) or 1.0
    fig, ax = plt.subplots(figsize=(6, 3))
    bins = [top * i / 10 for i in range(11)]
    ax.hist([min(max(t, 0.0), top) for t in stats["totals"]], bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"total score (out of {_number(top)})")
    ax.set_ylabel("submissions")
    ax.set_title(f"Score distribution ({stats['n']} submissions)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.88, bottom=0.17)
    _save(fig, folder / "histogram.png")
    plt.close(fig)
    plots["histogram"] = f"{PLOTS}/histogram.png"

    if stats["tests"]:
        names = [t["name"] for t in stats["tests"]][::-1]
        counts = [f"{t['passed']}/{t['graded']}" for t in stats["tests"]][::-1]
        rates = [100 * t["passed"] / t["graded"] for t in stats["tests"]][::-1]
        height = 1.0 + 0.22 * len(names)
        fig, ax = plt.subplots(figsize=(7, height))
        fig.subplots_adjust(left=0.36, right=0.97, top=1 - 0.35 / height, bottom=0.45 / height)
        ax.barh(range(len(names)), rates, color=["#55a868" if r >= 50 else "#c44e52" for r in rates])
        for y, (rate, count) in enumerate(zip(rates, counts)):
            inside = rate > 85  # no room to the right of a long bar: write on it
            ax.text(rate - 1 if inside else rate + 1, y, count, va="center", fontsize=7,
                    ha="right" if inside else "left", color="white" if inside else "black")
        ax.set_yticks(range(len(names)), names, fontsize=7, parse_math=False)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of submissions passing")
        ax.set_title("Pass rate per test")
        _save(fig, folder / "pass_rates.png")
        plt.close(fig)
        plots["pass_rates"] = f"{PLOTS}/pass_rates.png"

    for entry in stats["heatmaps"]["picked"]:
        name = f"heatmap-{_safe_file(entry['submission'])}.png"
        _heatmap(plt, entry, folder / name)
        plots["heatmaps"].append((entry, f"{PLOTS}/{name}"))
    return plots


def _heatmap(plt, entry: dict, path: Path) -> None:
    import numpy as np

    expected = np.array(entry["expected"], dtype=float)
    got = np.nan_to_num(np.array(entry["got"], dtype=float), nan=0.0, posinf=1.0, neginf=0.0)
    low, high = min(0.0, float(got.min())), max(1.0, float(got.max()), float(expected.max()))
    rows, cols = expected.shape
    # Fixed axes positions: a layout engine costs more than the drawing at this size.
    fig = plt.figure(figsize=(7, 3.8))
    axes = [fig.add_axes((0.07, 0.16, 0.36, 0.68)), fig.add_axes((0.50, 0.16, 0.36, 0.68))]
    for ax, matrix, label in ((axes[0], expected, "expected"), (axes[1], got, "student")):
        image = ax.imshow(matrix, cmap="viridis", vmin=low, vmax=high)
        ax.set_title(label)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query")
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        if rows * cols <= 64:  # small enough to print the numbers a student can check by hand
            for (i, j), value in np.ndenumerate(matrix):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value < (low + high) / 2 else "black")
    fig.colorbar(image, cax=fig.add_axes((0.89, 0.16, 0.02, 0.68)), label="attention weight")
    # Untrusted text: parse_math=False so "$...$" in a name is never fed to mathtext.
    title = f"{entry['submission']}: {entry['test'] or entry['title']}"
    fig.suptitle(title if len(title) <= 80 else title[:79] + "…", fontsize=10, parse_math=False)
    _save(fig, path)
    plt.close(fig)


# ---------------------------------------------------------------- summary.md and report.html


def summary_markdown(stats: dict, plots: dict, problems: list[str]) -> str:
    top = stats["max_total"]
    out = ["# Day 13 · Attention & Transformers: class summary", ""]
    out.append(f"{stats['n']} submissions graded. Mean {_short(stats['mean'])} / {_number(top)}, "
               f"median {_number(stats['median'])}, lowest {_number(stats['min'])}, highest {_number(stats['max'])}.")
    out.append("")
    if problems:
        out += ["**Records that could not be read (these rows are missing from grades.csv):**", ""]
        out += [f"- {_md_inline(p)}" for p in problems] + [""]
    if "histogram" in plots:
        out += [f"![score histogram]({plots['histogram']})", ""]
    out += ["## Mean per component", "", "| component | mean | out of |", "| --- | ---: | ---: |"]
    for c, (mean, possible) in stats["component_means"].items():
        out.append(f"| {c} | {_short(mean)} | {_number(possible)} |")
    out += ["", "## Pass rate per test", ""]
    if "pass_rates" in plots:
        out += [f"![pass rates]({plots['pass_rates']})", ""]
    out += ["| test | component | passed | rate |", "| --- | --- | ---: | ---: |"]
    for t in stats["tests"]:
        out.append(f"| {_md_code(t['name'])} | {t['component']} | {t['passed']} / {t['graded']} | "
                   f"{100 * t['passed'] / t['graded']:.0f}% |")
    out += ["", "## Most frequent misconceptions", ""]
    if stats["misconceptions"]:
        out += ["| misconception | students | hint |", "| --- | ---: | --- |"]
        for m in stats["misconceptions"]:
            out.append(f"| {_md_code(m['hint_id'])} | {len(m['submissions'])} | {_md_inline(m['text'])} |")
    else:
        out.append("No recognised misconception in this class.")
    out += ["", "## Attention weights of failing attention tests", ""]
    if plots["heatmaps"]:
        for entry, rel in plots["heatmaps"]:
            out += [f"- {_md_inline(entry['submission'])}, {_md_code(entry['test'])}", "",
                    f"  ![{_md_inline(entry['submission'])}]({rel})", ""]
        missing = stats["heatmaps"]["available"] - len(plots["heatmaps"])
        if missing > 0:
            out += [f"({missing} more not drawn; each student's feedback.md has the numbers.)", ""]
    else:
        out += ["No failing attention test left weights to show.", ""]
    if stats.get("renamed"):
        out += ["## Row names to check", "",
                "Names changed to be filesystem-safe, or that would have collided; `source` in grades.csv has every row's.",
                "", "| row | submitted as | why |", "| --- | --- | --- |"]
        out += [f"| {_md_inline(name)} | {_md_inline(source)} | {_md_inline(why)} |"
                for name, source, why in stats["renamed"]] + [""]
    out += ["## Faults and notes", ""]
    if stats["faults"]:
        for name, status, notes in stats["faults"]:
            out.append(f"- **{_md_inline(name)}**: {_md_inline(status)}")
            out += [f"  - {_md_inline(n)}" for n in notes]
    else:
        out.append("None.")
    out += ["", "## Integrity flags", ""]
    if stats["flags"]:
        out.append("Reflective constructs the static scan saw (no points by themselves; worth a look):")
        for name, flags in stats["flags"]:
            out.append(f"- **{_md_inline(name)}**")
            out += [f"  - {_md_inline(f)}" for f in flags]
    else:
        out.append("None.")
    out += ["", "## Status counts", ""]
    out += [f"- {_md_inline(s)}: {n}" for s, n in sorted(stats["status"].items())]
    out += ["", "Per-student scores are in grades.csv; each student's feedback is in <name>/feedback.md."]
    return "\n".join(out).rstrip() + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
td.n{text-align:right}img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}
.bad{color:#b00}figure{display:inline-block;margin:.5em}figcaption{font-size:.85em}"""


def report_html(stats: dict, plots: dict, problems: list[str], sections: list[str] = ()) -> str:
    """The class report; `sections` are ready-made HTML sections appended at the end."""
    e = html.escape  # every student-derived string goes through this
    top = stats["max_total"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Day 13 class report</title>", f"<style>{_CSS}</style></head><body>",
           "<h1>Day 13 · Attention &amp; Transformers: class report</h1>",
           f"<p>{stats['n']} submissions. Mean {_short(stats['mean'])} / {_number(top)}, median "
           f"{_number(stats['median'])}, lowest {_number(stats['min'])}, highest {_number(stats['max'])}.</p>"]
    if problems:
        out.append('<p class="bad">Records that could not be read (missing from grades.csv):</p><ul>')
        out += [f"<li>{e(p)}</li>" for p in problems] + ["</ul>"]
    if "histogram" in plots:
        out.append(f'<img src="{e(plots["histogram"])}" alt="score histogram">')
    out += ["<h2>Scores</h2>", "<table><tr><th>submission</th><th>total</th><th>status</th></tr>"]
    for name, total, max_total, status in stats["rows"]:
        cls = "" if status == "ok" else ' class="bad"'
        out.append(f"<tr><td><a href=\"{e(quote(name))}/feedback.html\">{e(name)}</a></td>"
                   f"<td class=\"n\">{_number(total)} / {_number(max_total)}</td><td{cls}>{e(status)}</td></tr>")
    out += ["</table>", "<h2>Mean per component</h2>",
            "<table><tr><th>component</th><th>mean</th><th>out of</th></tr>"]
    for c, (mean, possible) in stats["component_means"].items():
        out.append(f'<tr><td>{c}</td><td class="n">{_short(mean)}</td><td class="n">{_number(possible)}</td></tr>')
    out += ["</table>", "<h2>Pass rate per test</h2>"]
    if "pass_rates" in plots:
        out.append(f'<img src="{e(plots["pass_rates"])}" alt="pass rate per test">')
    out.append("<table><tr><th>test</th><th>component</th><th>passed</th><th>rate</th></tr>")
    for t in stats["tests"]:
        out.append(f"<tr><td><code>{e(t['name'])}</code></td><td>{e(t['component'])}</td>"
                   f"<td class=\"n\">{t['passed']} / {t['graded']}</td>"
                   f"<td class=\"n\">{100 * t['passed'] / t['graded']:.0f}%</td></tr>")
    out += ["</table>", "<h2>Most frequent misconceptions</h2>"]
    if stats["misconceptions"]:
        out.append("<table><tr><th>misconception</th><th>students</th><th>hint</th><th>who</th></tr>")
        for m in stats["misconceptions"]:
            out.append(f"<tr><td><code>{e(m['hint_id'])}</code></td><td class=\"n\">{len(m['submissions'])}</td>"
                       f"<td>{e(m['text'])}</td><td>{e(', '.join(m['submissions']))}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>No recognised misconception in this class.</p>")
    out.append("<h2>Attention weights of failing attention tests: expected beside the student's</h2>")
    if plots["heatmaps"]:
        for entry, rel in plots["heatmaps"]:
            out.append(f'<figure><img src="{e(rel)}" alt="expected and student attention weights">'
                       f"<figcaption>{e(entry['submission'])}: <code>{e(entry['test'])}</code></figcaption></figure>")
        missing = stats["heatmaps"]["available"] - len(plots["heatmaps"])
        if missing > 0:
            out.append(f"<p>{missing} more not drawn; each student's feedback.md has the numbers.</p>")
    else:
        out.append("<p>No failing attention test left weights to show.</p>")
    if stats.get("renamed"):
        out += ["<h2>Row names to check</h2>",
                "<p>Names changed to be filesystem-safe, or that would have collided; <code>source</code> in "
                "grades.csv has every row's.</p>", "<table><tr><th>row</th><th>submitted as</th><th>why</th></tr>"]
        out += [f"<tr><td>{e(name)}</td><td><code>{e(source)}</code></td><td>{e(why)}</td></tr>"
                for name, source, why in stats["renamed"]]
        out.append("</table>")
    out.append("<h2>Faults and notes</h2>")
    if stats["faults"]:
        out.append("<ul>")
        for name, status, notes in stats["faults"]:
            inner = "".join(f"<li>{e(n)}</li>" for n in notes)
            out.append(f"<li><b>{e(name)}</b>: {e(status)}" + (f"<ul>{inner}</ul>" if inner else "") + "</li>")
        out.append("</ul>")
    else:
        out.append("<p>None.</p>")
    out.append("<h2>Integrity flags</h2>")
    if stats["flags"]:
        out.append("<p>Reflective constructs the static scan saw (no points by themselves; worth a look):</p><ul>")
        for name, flags in stats["flags"]:
            out.append(f"<li><b>{e(name)}</b><ul>" + "".join(f"<li>{e(f)}</li>" for f in flags) + "</ul></li>")
        out.append("</ul>")
    else:
        out.append("<p>None.</p>")
    out += sections
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- merge


def merge(*, shards: list[str], out: str, overrides_path: str | None = None, release: str = DEFAULT_RELEASE) -> int:
    """Join the --out folders of several shards into `out`, then rewrite the class files with the
    merged folder's overrides file (or `overrides_path`) applied.

    A submission graded in two shards is a mistake in the sharding: if both records agree
    (timing apart) one copy is kept and the duplicate is reported; if they disagree nothing
    is merged. Folders without a record.json (a shard that was killed) are reported, and the
    exit code is 1 so that CI notices: re-run that shard, it resumes where it stopped.
    """
    out_dir = Path(out)
    sources: dict[str, Path] = {}
    duplicates, conflicts, incomplete = [], [], []
    for shard in shards:
        shard_dir = Path(shard)
        if not shard_dir.is_dir():
            print(f"merge: shard folder {shard} does not exist; pass the --out folders of the "
                  "`grade --shard K/N` runs", file=sys.stderr)
            return 2
        for folder in sorted(p for p in shard_dir.iterdir() if p.is_dir() and not p.is_symlink()):
            if folder.name.startswith((".", "_")):
                continue  # temp folders and the shard's own plots
            record = folder / "record.json"
            if not record.is_file():
                incomplete.append(f"{shard}/{folder.name}")
                continue
            name = folder.name
            if name in sources:
                if _same_record(sources[name] / "record.json", record):
                    duplicates.append(f"{name} (in {sources[name].parent} and {shard}, identical)")
                else:
                    conflicts.append(f"{name} (in {sources[name].parent} and {shard}, different results)")
                continue
            sources[name] = folder
    if conflicts:
        print("merge: refused, the same submission was graded differently in two shards:\n  "
              + "\n  ".join(conflicts) + "\nRegrade it (grade --force) in one shard and drop it from the other.",
              file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, folder in sorted(sources.items()):
        target = out_dir / name
        if folder.resolve() == target.resolve():
            continue  # merging into one of the shards
        staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".{name}."))
        try:
            for path in sorted(folder.iterdir()):
                if path.is_file() and not path.is_symlink() and not path.name.startswith("."):
                    shutil.copyfile(path, staging / path.name)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    try:
        write_class(out_dir, overrides_path, release)
    except overrides.OverrideError as error:
        print(f"merge: {error}", file=sys.stderr)
        return 2
    print(f"merge: {len(sources)} submissions from {len(shards)} shards -> {out_dir}/grades.csv, "
          f"{out_dir}/report.html")
    for d in duplicates:
        print(f"merge: duplicate kept once: {d}", file=sys.stderr)
    if incomplete:
        print("merge: not graded yet (no record.json), missing from the gradebook:\n  " + "\n  ".join(incomplete)
              + "\nRe-run those shards; grading resumes where it stopped.", file=sys.stderr)
        return 1
    return 0


def _same_record(a: Path, b: Path) -> bool:
    try:
        left, right = json.loads(a.read_text("utf-8")), json.loads(b.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    for data in (left, right):
        data.pop("execution_time", None)
    return left == right
