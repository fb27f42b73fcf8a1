"""`python -m grader review OUT`: a page on this machine that walks the class one student at a time.

For each student: the score by part, the decisions already taken, integrity flags and grading
notes, the deliverable pictures and texts the lesson declares, every test's verdict
with the failing tests' output and hints, and the student's code (grader/admin/codeview.py). A TA sets
points on any test, any part or the whole submission (added to the total), with a comment for the
student and a note only the staff read (two fields: who may read a text is decided when it is
written); each decision is one line appended to OUT/overrides.csv (grader/admin/overrides.py), which
`grade` and `merge` apply to every output. A comment on one line of the code goes to
OUT/comments.csv (grader/admin/linecomments.py), with the same two fields; a regrade request of
OUT/regrade_requests.csv (grader/admin/regrade_requests.py) is decided by an override on its test.

`/` is the class list (status, filters, counts of what is left). Left/right arrows (or j/k) move
between students, n opens the next student not reviewed, l the class list.

Built on the standard library's http.server: the page is a handful of server-rendered routes on
one user's machine, so a web framework would add a dependency (and its updates) to the grading
kit for nothing the page needs; the security rules below are a few lines each here.

Student files are hostile: text is escaped and shown as text, never rendered as Markdown or HTML;
SVG and other images are only ever loaded by <img> (which runs no script) and are served with their
own sandboxing Content-Security-Policy in case someone opens one directly; every page carries a
Content-Security-Policy that allows only this server's own script and style. The server listens on
127.0.0.1 only, answers only requests whose Host is 127.0.0.1 or localhost on its port (a web page
cannot reach it through a DNS name it controls), and accepts a write only with the token printed
at start-up and embedded in its own pages (another site cannot read it, so it cannot forge a form).
"""
from __future__ import annotations

import hmac
import secrets
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from grader.admin import codeview, linecomments, overrides, regrade_requests, similarity
from grader.judging import totals
from grader.release import stubs
from grader.results.document import (SERVED_POLICY, Break, Bullets, Cell, Code, Document, Field, Fold, Form, Group,
                                     Heading, Image, Link, Nav, Paragraph, Preformatted, Row, Section, Span, Strong,
                                     Table, number, to_served_html)
from grader.results.feedback import Words, by_component, clip, released, test_details, visibility_of
from grader.results.records import SubmissionResult
from grader.results.storage import load_records

MAX_TEXT = 100_000  # characters of a deliverable text shown
MAX_IMAGE = 20 << 20  # bytes of an image served
MAX_FORM = 64 << 10  # bytes of a posted form
PAGE_POLICY = SERVED_POLICY  # the pages' one policy (grader/results/document.py), with this server's script and forms
IMAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; sandbox"

_SCRIPT = """// Keyboard (not while typing in a form): left/right or k/j move between students, n opens the
// next student not yet reviewed, l the class list. A click on a line number puts that line in the
// line-comment form. The class list's filters apply as soon as one is chosen.
document.addEventListener('keydown', function (event) {
  var tag = (event.target && event.target.tagName) || '';
  if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || event.altKey || event.ctrlKey || event.metaKey) {
    return;
  }
  var rel = {ArrowRight: 'next', j: 'next', ArrowLeft: 'prev', k: 'prev', n: 'next-unreviewed', l: 'index'}[event.key];
  var link = rel && document.querySelector('a[rel="' + rel + '"]');
  if (link) { window.location.href = link.href; event.preventDefault(); }
});
document.addEventListener('click', function (event) {
  var number = event.target.closest && event.target.closest('a.ln');
  var form = document.getElementById('line-form');
  if (!number || !form) { return; }
  event.preventDefault();
  form.querySelector('#c-file').value = number.getAttribute('data-file');
  form.querySelector('#c-line').value = number.getAttribute('data-line');
  var shown = document.getElementById('c-where');
  if (shown) { shown.textContent = number.getAttribute('data-file') + ' line ' + number.getAttribute('data-line'); }
  form.querySelector('#c-comment').focus();
});
document.querySelectorAll('form.filters select').forEach(function (select) {
  select.addEventListener('change', function () { select.form.submit(); });
});
"""
_STYLE = """body{font-family:system-ui,sans-serif;margin:0 auto;max-width:80em;padding:0 1em 3em;color:#222}
nav{display:flex;flex-wrap:wrap;gap:.4em 1em;align-items:center;border-bottom:1px solid #ccc;padding:.5em 0}
h1{font-size:1.5em;margin:.4em 0}h2{font-size:1.15em;margin:.8em 0 .3em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th a{color:inherit}pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.5em;max-height:30em;overflow:auto}
img{max-width:100%;border:1px solid #ddd}.bad{color:#b00}.ok{color:#070}.muted{color:#666}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:1em}.top{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1.4fr);gap:1em;align-items:start}
form.decide{background:#f0f4ff;padding:.6em;border:1px solid #ccd}form.decide label{display:block;margin:.25em 0}
form.decide input[type=text],form.decide select{width:100%;box-sizing:border-box}.flag{background:#fff3cd}
.error{background:#fde8e8;border:1px solid #e0a0a0;padding:.4em .6em;color:#900}
details{margin:.4em 0}summary{cursor:pointer;font-weight:600}details.file{border:1px solid #ddd;padding:.3em .5em}
table.code{border:0;width:100%;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;line-height:1.5}
table.code td{border:0;padding:0 .5em}table.code td.src{white-space:pre-wrap;overflow-wrap:anywhere;width:100%}
td.ln{text-align:right;user-select:none;background:#f3f3f3}td.ln a{color:#888;text-decoration:none}
tr:target td{background:#fff6bf}.k{color:#a626a4}.d{color:#2958c8;font-weight:600}.s{color:#2a7e2a}.n{color:#b35900}
.c{color:#777;font-style:italic}.b{color:#0b7d8c}table.diff tr.add td.src{background:#e6ffec}
table.diff tr.del td.src{background:#ffebe9}table.diff tr.hunk td{background:#eef3fb;color:#555}
tr.note td.src{white-space:normal;font-family:system-ui,sans-serif;font-size:14px}
.failing{border-left:4px solid #c33;background:#fdf0f0;padding:.2em .5em;margin:.2em 0}
.failing pre{background:none;max-height:12em;margin:.2em 0}.said{border-left:4px solid #38a;background:#eef7fb;padding:.2em .5em;margin:.2em 0}
.staff{border-left:4px solid #a70;background:#fff6e5;padding:.2em .5em;margin:.2em 0}
form#line-form{position:sticky;bottom:0;background:#eef7fb;border:1px solid #9cc;padding:.4em;display:flex;flex-wrap:wrap;gap:.3em .8em;align-items:center}
.chips a{margin-right:.8em}.small{font-size:.85em}.chips .on{font-weight:700}.req{background:#eef0ff;border:1px solid #99c;padding:.3em .6em;margin:.3em 0}
table.list{width:100%}table.list td.num{text-align:right;white-space:nowrap}.staff-note{background:#fde8e8}.why{color:#555}
"""


class Review:
    """The data behind the pages: records, the decision files, the students' files."""

    def __init__(self, out: Path, submissions: Path | None, overrides_path: Path | None, release: str, by: str,
                 *, lesson):
        self.lesson = lesson
        self.out, self.submissions = Path(out), Path(submissions) if submissions else None
        self.overrides_path = Path(overrides_path) if overrides_path else overrides.default_path(self.out)
        self.comments_path = linecomments.default_path(self.out)
        self.requests_path = regrade_requests.default_path(self.out)
        self.release, self.by = release, by
        self.lock = threading.Lock()
        self._code: dict[tuple, list[codeview.CodeFile]] = {}
        self._stubs: dict[str, str] | None = None
        self._cells: list[str] | None = None
        self.words = Words.of(self.lesson.rubric())  # the rubric's words a failed test calls for
        # The lesson's deliverables (one declaration, which its checks read too): pictures and texts.
        files = self.lesson.deliverable_files()
        self.images = {what: tuple(n.lower() for n in d.names) for what, d in files.items() if d.kind == "image"}
        self.texts = {what: tuple(n.lower() for n in d.names) for what, d in files.items() if d.kind == "text"}

    def records(self) -> tuple[list[SubmissionResult], str]:
        """The class with the overrides applied, and the overrides file's problem if it has one."""
        records, _ = load_records(self.out)
        try:
            rows = overrides.read(self.overrides_path)
            overrides.check(rows, records, path=self.overrides_path)
        except overrides.OverrideError as error:
            return totals.finalise(self.out, records, {}, lesson=self.lesson), str(error)
        # The total every other output shows: decisions, the bonus cap and the late policy.
        return totals.finalise(self.out, records, overrides.effective(rows), lesson=self.lesson), ""

    def decisions(self) -> list[overrides.Override]:
        try:
            return overrides.read(self.overrides_path)
        except overrides.OverrideError:
            return []

    def comments(self) -> tuple[dict[str, list[linecomments.LineComment]], str]:
        try:
            return linecomments.by_submission(linecomments.read(self.comments_path)), ""
        except linecomments.CommentError as error:
            return {}, str(error)

    def requests(self, records: list[SubmissionResult]) -> tuple[dict[str, list], str]:
        """student -> the standing of each of their regrade requests, and the file's problem if any."""
        try:
            found = regrade_requests.of_folder(self.out, self.requests_path)
            regrade_requests.check(found, regrade_requests.askable(records), path=self.requests_path)
        except regrade_requests.RequestError as error:
            return {}, str(error)
        by_student: dict[str, list] = {}
        for standing in regrade_requests.standings(found, self.decisions(), load_records(self.out)[0]):
            by_student.setdefault(standing.request.student, []).append(standing)
        return by_student, ""

    def similar(self) -> dict[str, list[dict]]:
        """submission -> its flagged similarity rows, pairs and groups (one read of similarity.csv for the class)."""
        return similarity.flagged_by_submission(self.out)

    def _source(self, result: SubmissionResult) -> Path | None:
        if self.submissions is None or not result.source:
            return None
        path = self.submissions / result.source.rstrip("/")
        # The source is a name in the class folder, never a path out of it.
        if path.parent.resolve() != self.submissions.resolve() or path.is_symlink():
            return None
        return path

    def code_files(self, result: SubmissionResult) -> list[codeview.CodeFile]:
        """The files grading read, as the intake copies them (cached until the submission changes)."""
        source = self._source(result)
        sub = codeview.submission_of(result.submission, source) if source else None
        if sub is None:
            return []
        key = (result.submission, str(source), source.stat().st_mtime_ns)
        found = self._code.get(key)
        if found is None:
            # Read without holding the decisions' lock: the first notebook imports nbformat and builds
            # the released notebook (seconds), and a save must never wait for that.
            if self._stubs is None:  # generated from the reference's markers, as the release does
                self._stubs = stubs.stub_texts_of(self.lesson.solutions)
            found = self._code[key] = codeview.graded_files(sub, stubs=self._stubs, lesson=self.lesson,
                                                            released_cells=self._released_cells)
        return found

    def warm(self) -> None:
        """Read every student's code once, in class order, so pages open at once (a background thread
        of `main`; a page asked for first reads its own)."""
        try:
            for result in load_records(self.out)[0]:
                self.code_files(result)
        except Exception as error:  # noqa: BLE001 - a page asked for later shows the problem itself
            print(f"review: reading the code ahead stopped ({type(error).__name__}: {error})", file=sys.stderr)

    def _released_cells(self) -> list[str]:
        if self._cells is None:
            self._cells = similarity.released_notebook_code(lesson=self.lesson)
        return self._cells

    def student_file(self, result: SubmissionResult, names: tuple[str, ...], cap: int) -> tuple[str, bytes] | None:
        """(file name, at most `cap` bytes) of the first of `names` at the top of the submission."""
        source = self._source(result)
        if source is None:
            return None
        if source.is_dir():
            found = {p.name.lower(): p for p in source.iterdir() if p.is_file() and not p.is_symlink()}
            for name in names:
                if name in found:
                    with open(found[name], "rb") as handle:
                        return found[name].name, handle.read(cap)
        elif source.suffix.lower() == ".zip" and source.is_file():
            try:
                with zipfile.ZipFile(source) as archive:
                    entries = {}
                    for info in archive.infolist()[:5000]:
                        parts = [p for p in info.filename.split("/") if p]
                        if not info.is_dir() and 1 <= len(parts) <= 2:
                            entries.setdefault(parts[-1].lower(), info)
                    for name in names:
                        if name in entries:
                            with archive.open(entries[name]) as handle:
                                return entries[name].filename.rsplit("/", 1)[-1], handle.read(cap)
            except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError):
                return None
        return None

    def append(self, *rows: dict) -> None:
        with self.lock:
            for row in rows:
                overrides.append(self.overrides_path, row)

    def append_comment(self, row: dict) -> None:
        with self.lock:
            linecomments.append(self.comments_path, row)


def _image_type(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    head = data[:4096].lstrip().lower()
    if head.startswith((b"<?xml", b"<svg", b"<!--", b"<!doctype svg")) and b"<svg" in data[:65536].lower():
        return "image/svg+xml"
    return None


def _targets(result: SubmissionResult, similar: list[dict] = (), *, components) -> list[tuple[str, str, float | None]]:
    """(value, label, maximum) for the form's choice of what to set: the whole submission, parts,
    tests, and (points left empty) a flagged similarity pair or the integrity flags as reviewed."""
    found = [(overrides.BONUS, "whole submission: add or take points (+/-)", None)]
    for component in components:
        tests = [t for t in result.tests if t.component == component]
        if tests:
            found.append((component, f"part {component} (0..{number(sum(t.max_score for t in tests))})",
                          sum(t.max_score for t in tests)))
            found += [(t.name, f"  {t.name} (0..{number(t.max_score)})", t.max_score) for t in tests]
    if result.flags:
        found.append(("integrity", "integrity flags: reviewed (leave points empty)", None))
    found += [(f"similarity:{p['other']}", f"similar to {p['other']}: reviewed, for both (leave points empty)", None)
              for p in similar]
    return found


# ---------------------------------------------------------------- where each student stands


def statuses(review: Review, records: list[SubmissionResult]) -> list[dict]:
    """One row per student for the class list: reviewed or not, flags, parts failed, late, similar
    pairs (and which of them are reviewed), regrade requests.

    A student is reviewed once a decision on their work (a test, a part, the total, their flags) or
    a line comment names them. A similarity pair marked reviewed counts for the pair only: it is
    written for both students, and the classmate's own work is still to be looked at."""
    rows = review.decisions()
    decided = {row.submission for row in rows if not row.test.startswith("similarity:")}
    pairs_done: dict[str, set[str]] = {}
    for row in rows:
        if row.test.startswith("similarity:"):
            pairs_done.setdefault(row.submission, set()).add(row.test.split(":", 1)[1])
    comments, _ = review.comments()
    requests, _ = review.requests(records)
    similar = review.similar()
    found = []
    for r in records:
        parts = by_component(r, lesson=review.lesson)
        lateness = r.late or {}  # as finalise states it: the roster's extension, the policy (grades.csv's too)
        found.append({
            "name": r.submission, "total": r.total, "max": r.max_total, "status": r.status,
            "reviewed": r.submission in decided or r.submission in comments,
            "flags": len(r.flags), "failed": [c for c, (got, top) in parts.items() if top and got < top],
            "late": int(lateness.get("late_days") or 0),
            "similar": sorted({p["other"] for p in similar.get(r.submission, [])}),
            "pairs_done": pairs_done.get(r.submission, set()),
            "open": sum(s.state == "open" for s in requests.get(r.submission, [])),
        })
    return found


FILTERS = {"all": ("everyone", lambda s: True),
           "not-reviewed": ("not reviewed", lambda s: not s["reviewed"]),
           "flagged": ("integrity flags", lambda s: s["flags"] > 0),
           "failing": ("failed a part", lambda s: bool(s["failed"])),
           "late": ("late", lambda s: s["late"] > 0),
           "similar": ("similar pair to look at", lambda s: bool(set(s["similar"]) - s["pairs_done"])),
           "requests": ("open regrade request", lambda s: s["open"] > 0)}
SORTS = {"name": lambda s: s["name"], "total": lambda s: (s["total"], s["name"]),
         "total-desc": lambda s: (-s["total"], s["name"]), "flags": lambda s: (-s["flags"], s["name"]),
         "similar": lambda s: (-len(s["similar"]), s["name"]), "failed": lambda s: (-len(s["failed"]), s["name"])}


def next_unreviewed(states: list[dict], after: str | None) -> str | None:
    """The first student not yet reviewed after `after` in class order (wrapping round), or None."""
    names = [s["name"] for s in states]
    start = names.index(after) + 1 if after in names else 0
    for s in states[start:] + states[:start]:
        if not s["reviewed"] and s["name"] != after:
            return s["name"]
    return None


def _page(title: str, blocks: list) -> str:
    """A page of the server: document blocks rendered as every page of the kit is (one escaping rule),
    with the server's own style and script (PAGE_POLICY allows nothing else)."""
    return to_served_html(Document(title=None, page_title=title, blocks=blocks), stylesheet="/app.css",
                          script="/app.js")


def _student_link(name: str, text=None, rel: str = "") -> Link:
    return Link(name if text is None else text, f"/s/{quote(name, safe='')}", rel=rel)


def render_class(review: Review, records: list[SubmissionResult], query: dict[str, str], problem: str = "") -> str:
    """The class list: counts of what is left, filters with their counts, a sortable table."""
    states = statuses(review, records)
    show = query.get("show") if query.get("show") in FILTERS else "all"
    part = query.get("part", "")
    sort = query.get("sort") if query.get("sort") in SORTS else "name"
    keep = FILTERS[show][1]
    shown = [s for s in states if keep(s) and (not part or part in s["failed"])]
    shown.sort(key=SORTS[sort])
    left = [s for s in states if not s["reviewed"]]
    first = next_unreviewed(states, None)
    out: list = [Nav([Strong("Review: class list"),
                      _student_link(first, "first not reviewed →", "next-unreviewed") if first
                      else Span("everyone reviewed", ""), Span("keys: n next not reviewed", "small")])]
    troubles = [problem and f"The overrides file has a problem; totals below are without it: {problem}",
                review.comments()[1], review.requests(records)[1]]
    out += [Paragraph(t, cls="error") for t in troubles if t]
    out.append(Heading(f"{len(states) - len(left)} of {len(states)} reviewed · {len(left)} left"))
    out.append(Paragraph("Left to review: " + ", ".join(f"{sum(FILTERS[k][1](s) for s in left)} {FILTERS[k][0]}"
                                                          for k in ("flagged", "failing", "late", "similar", "requests"))
                         + ".", cls="muted"))

    def link(**change) -> str:
        values = {"show": show, "part": part, "sort": sort, **change}
        return "/?" + urlencode({k: v for k, v in values.items() if v and not (k, v) in (("show", "all"), ("sort", "name"))})

    out.append(Paragraph([Link(Span(f"{label} ({sum(test(s) for s in states)})", "on" if key == show else ""),
                               link(show=key)) for key, (label, test) in FILTERS.items()], cls="chips"))
    out.append(Form("/", [
        Field("show", "hidden", value=show),
        Field("part", "select", "failed part", part, id="part",
              options=(("", "any"), *((c, c) for c in review.lesson.components))), " ",
        Field("sort", "select", "sort by", sort, id="sort", options=tuple((k, k.replace("-", " ")) for k in SORTS)), " ",
        Field("", "submit", "apply")], method="get", cls="filters"))
    out.append(Paragraph(f"{len(shown)} shown."))
    head = [("student", "name"), ("total", "total-desc"), ("reviewed", None), ("flags", "flags"),
            ("parts failed", "failed"), ("late", None), ("similar to", "similar"), ("regrade", None)]
    rows = []
    for s in shown:
        status = [" ", Span(s["status"], "bad")] if s["status"] != "ok" else []
        rows.append(Row([
            [_student_link(s["name"]), *status],
            Cell(f"{number(s['total'])} / {number(s['max'])}", cls="num"),
            Cell("yes" if s["reviewed"] else "no", cls="ok" if s["reviewed"] else "bad"),
            Cell(str(s["flags"] or ""), cls="flag" if s["flags"] else ""),
            ", ".join(s["failed"]), f"{s['late']} d" if s["late"] else "",
            _some([n + (" ✓" if n in s["pairs_done"] else "") for n in s["similar"]]),
            f"{s['open']} open" if s["open"] else ""], attrs=(("data-name", s["name"]),)))
    out.append(Table(tuple(Link(label, link(sort=key)) if key else label for label, key in head), rows,
                     cls="list", id="students"))
    return _page("Review: class list", out)


# ---------------------------------------------------------------- one student


def render_student(review: Review, records: list[SubmissionResult], index: int, token: str, problem: str,
                   message: str = "", form: dict | None = None, line_form: dict | None = None) -> str:
    """A student's page. `message` is why the last form was refused; `form` and `line_form` are
    what was typed in it, shown again so nothing typed is lost."""
    result = records[index]
    name = result.submission
    states = statuses(review, records)
    state = states[index]
    left = sum(not s["reviewed"] for s in states)
    following = next_unreviewed(states, name)
    similar = review.similar().get(name, [])
    comments, comment_problem = review.comments()
    mine = comments.get(name, [])
    requests, request_problem = review.requests(records)
    standings = requests.get(name, [])
    out: list = [Nav([
        Link("class list", "/", rel="index"),
        _student_link(records[index - 1].submission, "← previous", "prev") if index > 0 else Span("← previous", ""),
        Strong(name), Span(f"{index + 1} / {len(records)}", ""),
        _student_link(records[index + 1].submission, "next →", "next") if index + 1 < len(records)
        else Span("next →", ""),
        _student_link(following, f"next not reviewed ({left} left)", "next-unreviewed") if following
        else Span("no other student left to review" if left else "everyone reviewed", ""),
        Span("keys: ← → move, n next not reviewed, l list", "small")])]
    for trouble in (problem and f"The overrides file has a problem; scores below are without it: {problem}",
                    comment_problem, request_problem):
        if trouble:
            out.append(Paragraph(trouble, cls="error"))
    if message:
        out.append(Paragraph(message, cls="error", id="message", alert=True))
    status = [" ", Span(f"status: {result.status}", "bad")] if result.status != "ok" else []
    reviewed = Span("reviewed", "small ok") if state["reviewed"] else Span("not reviewed", "small bad")
    out.append(Heading([f"{name}: {number(result.total)} / {number(result.max_total)}", *status, " ", reviewed]))
    if why := totals.explain(result):
        out.append(Paragraph(why, cls="why"))
    left_column: list = [
        Paragraph(["from ", Code(result.source or "?"),
                   *([" · ", Span(f"{state['late']} day(s) late", "bad")] if state["late"] else [])]),
        *_group_line(review.out, name),
        Table(("part", "points"), [
            [component, Cell(f"{number(score)} / {number(possible)}", bool(possible and score < possible))]
            for component, (score, possible) in by_component(result, lesson=review.lesson).items()])]
    if result.overrides:
        left_column.append(_folded("Decisions in effect", [_decision_item(o) for o in result.overrides], open_under=4))
    out.append(Group([Group(left_column),
                      Group([_form(result, token, review.by, similar, form, components=review.lesson.components)])],
                     cls="top"))
    if standings:
        out.append(Section("Regrade requests", [_request_block(result, s, i, token, review.by)
                                                 for i, s in enumerate(standings)]))
    flags = list(getattr(result, "flags", []) or [])
    if flags or result.notes:
        out.append(_folded(f"Integrity flags ({len(flags)}) and grading notes ({len(result.notes)})",
                           [[Strong("flag"), f": {f}"] for f in flags] + [str(n) for n in result.notes],
                           cls="flag", open_under=4))
    if similar:  # evidence for the reviewer to weigh, never points
        out.append(_folded(f"Similar: {len(similar)} flagged pair(s) with {_some(sorted({p['other'] for p in similar}))} "
                           "(similarity.html)",
                           [[f"{p['other']}: {p['kind']} {p['score']:.2f}, {p['detail']}",
                             *([" ", Span(Strong("pair reviewed ✓"), "ok")] if p["other"] in state["pairs_done"] else [])]
                            for p in similar[:20]], cls="flag", open_under=0))
    out += _code_section(review, result, mine, token, line_form)
    pictures = []
    for kind, names in review.images.items():
        found = review.student_file(result, names, MAX_IMAGE)
        if found and _image_type(found[1]):
            shown = [Image(f"/f/{quote(name, safe='')}/{quote(kind, safe='')}", f"{kind} of {name}"),
                     Paragraph(Span(found[0], "small"))]
        elif found:  # a format no <img> shows (a PDF): named, to be opened from the class folder
            shown = [Paragraph([Span(found[0], "small"), ": not a picture this page shows; open it from the "
                                "class folder."])]
        else:
            why = " (files not available: pass --submissions)" if review.submissions is None else ""
            shown = [Paragraph(f"No {kind} image{why}.")]
        pictures.append(Group([Section(kind, shown)], cls="picture"))
    out.append(Group(pictures, cls="grid"))
    for kind, names in review.texts.items():
        found = review.student_file(result, names, MAX_TEXT)
        if found:
            text = found[1].decode("utf-8", "replace")
            lines = text.count("\n") + 1
            out.append(Fold([kind, " ", Span(f"({found[0]}, {lines} lines)", "small")], [Preformatted(text)],
                            open=lines <= 20))
        else:
            out.append(Section(kind, [Paragraph(f"No {kind}.")]))
    asked = {s.request.test: s for s in standings}
    verdicts = []
    for t in result.tests:
        details = _details(t, review.release, review.lesson.visibility, review.words)
        request = asked.get(t.name) or asked.get(t.component)
        if request:
            details = [Paragraph(f"regrade request ({request.state}): {request.request.reason}", cls="req"), *details]
        verdicts.append(Row([[Code(t.name), Break(), Span(t.title, "small")],
                             Cell(t.status, cls="ok" if t.status == "passed" else "bad"),
                             f"{number(t.score)} / {number(t.max_score)}", Cell("", blocks=tuple(details))],
                            id=f"t-{t.name}"))
    out.append(Section("Automated verdicts", [Table(("test", "verdict", "points", "details"), verdicts)]))
    return _page(f"Review: {name}", out)


def _some(names: list[str], shown: int = 4) -> str:
    """A few names and how many more: a row of the list stays one or two lines high."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _decision_item(o: dict) -> list:
    """One decision in effect: what the student reads of it and what only the staff do."""
    points = "reviewed" if o["points"] is None else f"{o['points']:g}"
    said = [] if o.get("staff_only") or not o.get("comment") else \
        [" — ", Span(f"to the student: {o['comment']}", "to-student")]
    staff = "; ".join(t for t in (o.get("comment", "") if o.get("staff_only") else "", o.get("staff_note", "")) if t)
    noted = [" — ", Span(f"staff only: {staff}", "staff-note")] if staff else []
    earlier = [" — ", Span(f"{overrides.earlier_words(o.get('set_aside'))}: look again, then set it again or delete "
                           "its row", "staff-note")] if o.get("earlier_version") else []
    return [Code(o["test"]), f": {points}", *said, *noted, *earlier, " ",
            Span(f"({o.get('by', '')} {o.get('at', '')})", "small")]


def _group_line(out_dir: Path, name: str) -> list:
    """Who this submission belongs to when OUT/roster.csv names a group (grader/intake/roster.py)."""
    from grader.intake import roster

    try:
        people = roster.in_out(out_dir)
    except roster.RosterError as error:
        return [Paragraph(f"roster.csv: {error}", cls="error")]
    if people is None:
        return []
    members = people.members(name)
    group = people.group_of(name)
    if len(members) < 2 and not group:
        return []
    partners = [s for s in people.students if group and s.group == group and s.submission != name]
    said = ", ".join(m.name or m.identity for m in members)
    if partners:
        said += " · partners' own submissions: " + ", ".join(f"{p.name or p.identity} ({p.submission})"
                                                             for p in partners)
    return [Paragraph(f"group {group or name}: {said}", cls="group")]


def _folded(title: str, items: list, *, cls: str = "", open_under: int = 4) -> Fold:
    """A list that folds: open when it holds at most `open_under` items, so long ones never push
    the form and the code below the first screen."""
    return Fold(title, [Bullets(items, cls=cls)], open=len(items) <= open_under)


def _details(t, release: str, visibility: dict, words: Words) -> list:
    if t.status == "passed":
        return []
    if not released(visibility_of(t.name, t.component, visibility), release):
        return [Paragraph(f"details withheld (--release {release})")]
    return test_details(t, words)  # the blocks the student's feedback shows


def _code_section(review: Review, result: SubmissionResult, comments: list, token: str,
                  line_form: dict | None) -> list:
    """Each graded file, coloured and numbered, with its diff from the stub (folded), the failing
    tests at the definition they test and the line comments under their lines."""
    files = review.code_files(result)
    if not files:
        why = " (files not available: pass --submissions)" if review.submissions is None else ""
        return [Section("Code", [Paragraph(f"No code to show{why}.")])]
    lesson = review.lesson
    failing = [t for t in result.tests if t.status != "passed" and t.component in lesson.graded_names]
    out: list = [Paragraph("Click a line number to comment on that line.", cls="muted")]
    placed: set[str] = set()
    for index, f in enumerate(files):
        names = [n for c in lesson.graded_names for n in lesson.graded_names[c]]
        defined = codeview.definition_lines(f.text, names)
        at_line: dict[int, list] = {}
        for t in failing:
            if t.name in placed:
                continue
            owner = f.name == f"{t.component}.py" or f.name.lower().endswith(".ipynb")
            name = codeview.tested_name(t, lesson.graded_names.get(t.component, ()))
            line = defined.get(name) if name else None
            if line is None and owner:
                line = min((defined[n] for n in lesson.graded_names.get(t.component, ()) if n in defined), default=1)
            if line is not None and (owner or name in defined):
                at_line.setdefault(line, []).append(t)
                placed.add(t.name)
        notes: dict[int, list] = {}
        for c in comments:
            if c.file == f.name:
                notes.setdefault(c.line, []).append(c)
        as_released = f.stub is not None and f.stub.rstrip() == f.text.rstrip()
        counts = codeview.diff_counts(f.stub, f.text) if f.stub is not None and not as_released else None
        summary = [f"{len(f.lines)} lines"]
        summary.append("as released (the stub)" if as_released else
                       f"+{counts[0]} −{counts[1]} from the stub" if counts else "no released stub")
        if at_line:
            summary.append(f"{sum(map(len, at_line.values()))} failing test(s)")
        if notes:
            summary.append(f"{sum(map(len, notes.values()))} comment(s)")
        shown: list = [Fold("diff from the released stub", [_diff_table(f)], cls="diff")] if counts else []
        shown.append(_code_table(index, f, at_line, notes))
        if f.cut:
            shown.append(Paragraph(f"… cut at {codeview.MAX_FILE_CHARS} characters.", cls="muted"))
        out.append(Fold([f.name, " ", Span(f"({', '.join(summary)})", "small")], shown,
                        open=not (as_released and not notes), cls="file", id=f"file-{index}"))
    out.append(_line_form(result, files, token, review.by, line_form))
    return [Section("Code", out)]


def _code_table(index: int, f, at_line: dict, notes: dict) -> Table:
    rows: list = []
    for number_, painted in enumerate(codeview.highlight(f.text), 1):
        anchor = f"f{index}-L{number_}"
        rows.append(Row([Cell(Link(str(number_), f"#{anchor}", attrs=(("class", "ln"), ("data-file", f.name),
                                                                        ("data-line", number_))), cls="ln"),
                         Cell(painted, cls="src")], id=anchor))
        boxes = []
        for t in at_line.get(number_, []):
            boxes.append(Group([Paragraph([Strong(f"✗ {t.name}"), f" ({number(t.score)} / {number(t.max_score)}): ",
                                           t.title]),
                                Fold("the calls and what they gave", [Preformatted(clip(t.output))])], cls="failing"))
        for c in notes.get(number_, []):
            if c.comment:
                boxes.append(Group([Paragraph([f"to the student: {c.comment} ", Span(f"({c.by} {c.at})", "small")])],
                                   cls="said"))
            if c.staff_note:
                boxes.append(Group([Paragraph([f"staff only: {c.staff_note} ", Span(f"({c.by} {c.at})", "small")])],
                                   cls="staff"))
        if boxes:
            rows.append(Row([Cell("", cls="ln"), Cell("", cls="src", blocks=tuple(boxes))], cls="note"))
    return Table((), rows, cls="code")


def _diff_table(f) -> Table:
    rows = [Row([Cell(str(line or ""), cls="ln"), Cell(f"{kind if kind != '@' else ''}{text}", cls="src")],
                cls={"+": "add", "-": "del", "@": "hunk", " ": "same"}[kind])
            for kind, line, text in codeview.diff_rows(f.stub, f.text)]
    return Table((), rows, cls="code diff")


def _line_form(result: SubmissionResult, files, token: str, by: str, typed: dict | None) -> Form:
    typed = typed or {}
    return Form(f"/s/{quote(result.submission, safe='')}/comment", [
        Field("token", "hidden", value=token), Strong("Comment on"),
        Field("file", "select", value=typed.get("file", files[0].name), id="c-file",
              options=tuple((f.name, f.name) for f in files)),
        Field("line", label="line", value=typed.get("line", ""), id="c-line", attrs=(("size", 4),)),
        Span("", "muted", id="c-where"),  # the line a click chose, in words (the script fills it)
        Field("comment", label="to the student", value=typed.get("comment", ""), id="c-comment", attrs=(("size", 34),)),
        Field("staff_note", label="staff-only note", value=typed.get("staff_note", ""), id="c-note",
              attrs=(("size", 24),)),
        Field("by", "hidden", value=typed.get("by", by)),
        Field("", "submit", "add comment", id="c-save")], id="line-form")


def _request_block(result: SubmissionResult, standing, index: int, token: str, by: str) -> Group:
    r = standing.request
    head = Paragraph([Strong(r.test), f" · asked {r.time} · ", Strong(standing.state), Break(), f"“{r.reason}”"])
    if standing.decision is not None:
        d = standing.decision
        change = "no change of points" if d.points is None else f"{d.points:g} points"
        if standing.lowered:
            change += f" (lowered from {standing.before:g})"
        if standing.set_aside:
            change += f" ({overrides.earlier_words(True)})"
        return Group([head, Paragraph([f"decision: {change} — {d.comment} ", Span(f"({d.by} {d.at})", "small")])],
                     cls="req", id=f"request-{index}")
    return Group([head, Form(f"/s/{quote(result.submission, safe='')}/regrade", [
        Field("token", "hidden", value=token), Field("request", "hidden", value=str(index)),
        Field("by", "hidden", value=by),
        Field("points", label="points (to accept)", id=f"r-points-{index}", attrs=(("size", 5),)), " ",
        Field("comment", label="reason, for the student", id=f"r-comment-{index}", attrs=(("size", 36),)), " ",
        Field("staff_note", label="staff-only note", id=f"r-note-{index}", attrs=(("size", 20),)), " ",
        Field("lower", "checkbox", "lower the points", value="yes", id=f"r-lower-{index}"), " ",
        Field("decision", "submit", "accept", value="accept", id=f"r-accept-{index}"), " ",
        Field("decision", "submit", "decline", value="decline", id=f"r-decline-{index}")])],
        cls="req", id=f"request-{index}")


def _form(result: SubmissionResult, token: str, by: str, similar: list[dict] = (), typed: dict | None = None, *,
          components) -> Form:
    typed = typed or {}
    return Form(f"/s/{quote(result.submission, safe='')}/override", [
        Field("token", "hidden", value=token), Strong("Decide"),
        Field("test", "select", "set", typed.get("test", overrides.BONUS), id="test",
              options=tuple((value, label) for value, label, _ in _targets(result, similar, components=components))),
        Field("points", label="points", value=typed.get("points", ""), id="points",
              attrs=(("inputmode", "decimal"), ("placeholder", "empty: mark reviewed"))),
        Field("comment", label="comment to the student", value=typed.get("comment", ""), id="comment"),
        Field("staff_note", label="staff-only note", value=typed.get("staff_note", ""), id="staff_note"),
        Field("by", label="by", value=typed.get("by", by), id="by", attrs=(("size", 8),)),
        Field("", "submit", "save", id="save")], cls="decide")


def check_points(result: SubmissionResult, test: str, raw: str, similar: list[dict] = (), *,
                 components) -> float | None:
    """The points typed for `test`, or ValueError saying in words what is allowed."""
    targets = {value: (label, top) for value, label, top in _targets(result, similar, components=components)}
    if test not in targets:
        raise ValueError(f"Choose what to set from the list: {test!r} is not a test, a part or a pair of "
                         f"{result.submission}.")
    label, top = targets[test]
    if not raw:
        if test == overrides.BONUS:
            return None  # a comment on the whole submission; checked for the comment below
        return None
    try:
        points = float(raw.replace(",", "."))
    except ValueError:
        raise ValueError(f"Points must be a number such as 1.5, or left empty to mark it reviewed without "
                         f"changing points; “{raw}” is not a number.") from None
    if points != points or points in (float("inf"), float("-inf")):
        raise ValueError(f"Points must be a finite number; “{raw}” is not.")
    if test.split(":", 1)[0] in overrides.REVIEW_PREFIXES:
        raise ValueError("A similarity pair or the integrity flags can only be marked reviewed: leave points empty "
                         "(to change points, choose a test or a part).")
    if top is not None and not 0 <= points <= top:
        what = "part" if test in components else "test"
        raise ValueError(f"Points for the {what} {test} must be between 0 and {number(top)} (its maximum); "
                         f"you typed {raw}.")
    return points


class Handler(BaseHTTPRequestHandler):
    server: "ReviewServer"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # quiet: the page is the interface

    def _send(self, code: int, body: bytes, content_type: str, policy: str = PAGE_POLICY,
              extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", policy)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")  # "no-referrer" makes a form's Origin "null"
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, code: int, why: str) -> None:
        self._send(code, why.encode() + b"\n", "text/plain; charset=utf-8")

    def _redirect(self, location: str) -> None:
        self._send(303, b"", "text/plain", extra={"Location": location})

    def _host_ok(self) -> bool:
        port = self.server.server_address[1]
        return self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _records(self):
        records, problem = self.server.review.records()
        return records, problem, {r.submission: i for i, r in enumerate(records)}

    def do_GET(self):  # noqa: N802 - http.server's name
        if not self._host_ok():
            return self._refuse(403, "wrong Host: open the address the review command printed")
        split = urlsplit(self.path)
        path = split.path
        if path == "/app.js":
            return self._send(200, _SCRIPT.encode(), "text/javascript; charset=utf-8")
        if path == "/app.css":
            return self._send(200, _STYLE.encode(), "text/css; charset=utf-8")
        records, problem, index = self._records()
        if path == "/":
            if not records:
                return self._send(200, _page("Review", [Paragraph("No graded submissions in this folder.")]).encode(),
                                  "text/html; charset=utf-8")
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            page = render_class(self.server.review, records, query, problem)
            return self._send(200, page.encode(), "text/html; charset=utf-8")
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "s" and unquote(parts[2]) in index:
            page = render_student(self.server.review, records, index[unquote(parts[2])], self.server.token, problem)
            return self._send(200, page.encode(), "text/html; charset=utf-8")
        images = self.server.review.images
        if len(parts) == 4 and parts[1] == "f" and unquote(parts[2]) in index and unquote(parts[3]) in images:
            found = self.server.review.student_file(records[index[unquote(parts[2])]], images[unquote(parts[3])],
                                                    MAX_IMAGE)
            kind = _image_type(found[1]) if found else None
            if kind:
                return self._send(200, found[1], kind, policy=IMAGE_POLICY)
        return self._refuse(404, "not found")

    do_HEAD = do_GET

    def do_POST(self):  # noqa: N802
        if not self._host_ok():
            return self._refuse(403, "wrong Host: open the address the review command printed")
        port = self.server.server_address[1]
        origin = self.headers.get("Origin")
        if origin is not None and origin not in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            return self._refuse(403, "a form from another site")
        parts = urlsplit(self.path).path.split("/")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_FORM:
            return self._refuse(413, "form too large")
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"), keep_blank_values=True)
        field = {k: v[-1] for k, v in form.items()}
        if not hmac.compare_digest(field.get("token", "").encode(), self.server.token.encode()):
            return self._refuse(403, "missing or wrong token: reload the page from the address the review command printed")
        records, _, index = self._records()
        if not (len(parts) == 4 and parts[1] == "s" and unquote(parts[2]) in index
                and parts[3] in ("override", "comment", "regrade")):
            return self._refuse(404, "no such submission")
        name = unquote(parts[2])
        action = {"override": self._decide, "comment": self._comment, "regrade": self._regrade}[parts[3]]
        return action(records, index, name, field)

    def _refused(self, records, index, name, message, **typed) -> None:
        page = render_student(self.server.review, records, index[name], self.server.token, "", message, **typed)
        self._send(400, page.encode(), "text/html; charset=utf-8")

    def _decide(self, records, index, name, field) -> None:
        """A decision from the form: points and a comment on a test, a part, the total, or a flag or
        similarity pair marked reviewed (the pair for both students)."""
        review = self.server.review
        typed = {k: field.get(k, "") for k in ("test", "points", "comment", "staff_note", "by")}
        test, raw, comment = typed["test"].strip(), typed["points"].strip(), typed["comment"].strip()
        note = typed["staff_note"].strip()
        result = records[index[name]]
        similar = review.similar().get(name, [])
        try:
            points = check_points(result, test, raw, similar, components=review.lesson.components)
            if points is None and test == overrides.BONUS and not comment and not note:
                raise ValueError("To mark the whole submission reviewed without points, write a comment or a "
                                 "staff-only note; or type points to add (+) or take (-) from the total.")
        except ValueError as error:
            return self._refused(records, index, name, str(error), form=typed)
        row = {"submission": name, "test": test, "points": points, "comment": comment, "staff_note": note,
               "by": typed["by"], "version": overrides.version_of(result)}
        rows = [row]
        other = test.split(":", 1)[1] if test.startswith("similarity:") else None
        if other in index:  # one look at a pair is a look for both of its students
            rows.append({**row, "submission": other, "test": f"similarity:{name}",
                         "version": overrides.version_of(records[index[other]])})
        review.append(*rows)
        self._redirect(f"/s/{quote(name, safe='')}")

    def _comment(self, records, index, name, field) -> None:
        """A comment on one line of one file: for the student, a note for the staff, or both."""
        review = self.server.review
        typed = {k: field.get(k, "") for k in ("file", "line", "comment", "staff_note", "by")}
        files = {f.name: f for f in review.code_files(records[index[name]])}
        raw = typed["line"].strip()
        chosen = files.get(typed["file"])
        if chosen is None:
            message = "Choose the file from the list."
        elif not raw.isdigit() or not 1 <= int(raw) <= len(chosen.lines):
            message = (f"The line must be a line number of {chosen.name}, from 1 to {len(chosen.lines)} "
                       "(or click a line number); " + (f"“{raw}” is not." if raw else "it was empty."))
        elif not typed["comment"].strip() and not typed["staff_note"].strip():
            message = "Write a comment for the student, a staff-only note, or both."
        else:
            review.append_comment({"submission": name, "file": chosen.name, "line": int(raw),
                                   "code": chosen.lines[int(raw) - 1], "comment": typed["comment"],
                                   "staff_note": typed["staff_note"], "by": typed["by"]})
            return self._redirect(f"/s/{quote(name, safe='')}")
        return self._refused(records, index, name, message, line_form=typed)

    def _regrade(self, records, index, name, field) -> None:
        """The decision on a regrade request: an override on its test, the reason for the student."""
        review = self.server.review
        standings = review.requests(records)[0].get(name, [])
        chosen = field.get("request", "")
        if not chosen.isdigit() or int(chosen) >= len(standings):
            return self._refused(records, index, name, "That regrade request is no longer in the file: reload.")
        request = standings[int(chosen)].request
        decision, comment, raw = field.get("decision", ""), field.get("comment", "").strip(), field.get("points", "").strip()
        note = field.get("staff_note", "").strip()
        try:
            if decision not in ("accept", "decline"):
                raise ValueError("Choose accept or decline.")
            if not comment:
                raise ValueError("Write the reason for the decision: the student reads it.")
            if decision == "accept" and not raw:
                raise ValueError(f"To accept, type the points {request.test} should get.")
            points = check_points(records[index[name]], request.test, raw,
                                  components=review.lesson.components) if decision == "accept" else None
            now = overrides.points_of(records[index[name]], request.test)
            if points is not None and points < now and field.get("lower") != "yes":
                raise ValueError(f"Accepting with {points:g} points lowers {name}'s {request.test} from {now:g} to "
                                 f"{points:g}. To lower it, tick “lower the points” and accept again; to keep "
                                 "the points, decline with your reason.")
        except ValueError as error:
            return self._refused(records, index, name, str(error))
        review.append({"submission": name, "test": request.test, "points": points, "comment": comment,
                       "staff_note": note, "by": field.get("by", ""),
                       "version": overrides.version_of(records[index[name]])})
        self._redirect(f"/s/{quote(name, safe='')}")


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, review: Review, port: int = 0):
        super().__init__(("127.0.0.1", port), Handler)
        self.review = review
        self.token = secrets.token_urlsafe(24)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


def main(*, out: str, submissions: str | None = None, overrides_path: str | None = None, port: int = 8765,
         release: str = "all", by: str = "", lesson) -> int:
    out_dir = Path(out)
    if not out_dir.is_dir() or not load_records(out_dir)[0]:
        if out_dir.is_dir() and submissions is None:
            # Held-out s61: the class's own folder given by mistake was told to be graded into itself.
            print(f"review: {out} holds no graded submissions. Give the folder `grade` wrote its gradebook to, then the "
                  f"submissions: python -m grader review OUT {out} (if {out} is the class, grade it first: python -m "
                  f"grader grade {out} --out OUT)", file=sys.stderr)
            return 2
        print(f"review: {out} holds no graded submissions; run `python -m grader grade SUBMISSIONS --out {out}` first",
              file=sys.stderr)
        return 2
    review = Review(out_dir, Path(submissions) if submissions else None, Path(overrides_path) if overrides_path
                    else None, release, by, lesson=lesson)
    try:
        server = ReviewServer(review, port)
    except OSError as error:
        print(f"review: cannot listen on 127.0.0.1:{port} ({error}); pass --port with a free port", file=sys.stderr)
        return 2
    threading.Thread(target=review.warm, daemon=True).start()
    print(f"review: {server.url} (this machine only; Ctrl-C to stop). Decisions go to {review.overrides_path};"
          f" run grade again to write them into grades.csv and feedback.md.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
