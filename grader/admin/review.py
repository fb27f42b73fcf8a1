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
import html
import secrets
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from grader.admin import codeview, linecomments, overrides, regrade_requests, similarity
from grader.judging import late, totals
from grader.release import stubs
from grader.results.document import SERVED_POLICY, Cell, Preformatted, Table, html_blocks, number
from grader.results.feedback import Words, _lesson, by_component, clip, released, test_details, visibility_of
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
.chips a,.chips span{margin-right:.8em}.chips .on{font-weight:700}.req{background:#eef0ff;border:1px solid #99c;padding:.3em .6em;margin:.3em 0}
table.list{width:100%}table.list td.num{text-align:right;white-space:nowrap}.staff-note{background:#fde8e8}.why{color:#555}
"""


class Review:
    """The data behind the pages: records, the decision files, the students' files."""

    def __init__(self, out: Path, submissions: Path | None, overrides_path: Path | None, release: str, by: str,
                 *, lesson=None):
        self.lesson = _lesson(lesson)
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
            return totals.finalise(self.out, records, {}), str(error)
        # The total every other output shows: decisions, the bonus cap and the late policy.
        return totals.finalise(self.out, records, overrides.effective(rows)), ""

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
            found = regrade_requests.read(self.requests_path)
            regrade_requests.check(found, {r.submission: {t.name for t in r.tests} | {t.component for t in r.tests}
                                           for r in records}, path=self.requests_path)
        except regrade_requests.RequestError as error:
            return {}, str(error)
        by_student: dict[str, list] = {}
        for standing in regrade_requests.standings(found, self.decisions()):
            by_student.setdefault(standing.request.student, []).append(standing)
        return by_student, ""

    def similar(self) -> dict[str, list[dict]]:
        """submission -> its flagged similarity pairs (one read of similarity.csv for the class)."""
        found: dict[str, list[dict]] = {}
        for row in similarity.flagged_rows(self.out):
            for me, other in ((row["a"], row["b"]), (row["b"], row["a"])):
                found.setdefault(me, []).append({**row, "other": other})
        return {name: sorted(pairs, key=lambda p: (-p["score"], p["other"], p["kind"])) for name, pairs in found.items()}

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
        lateness = late.read_lateness(review.out / r.submission) or {}
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


def _page(title: str, body: list[str]) -> str:
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<title>{html.escape(title)}</title>", '<link rel="stylesheet" href="/app.css">',
                      '<script src="/app.js" defer></script></head><body>', *body, "</body></html>"]) + "\n"


def render_class(review: Review, records: list[SubmissionResult], query: dict[str, str], problem: str = "") -> str:
    """The class list: counts of what is left, filters with their counts, a sortable table."""
    e = html.escape
    states = statuses(review, records)
    show = query.get("show") if query.get("show") in FILTERS else "all"
    part = query.get("part", "")
    sort = query.get("sort") if query.get("sort") in SORTS else "name"
    keep = FILTERS[show][1]
    shown = [s for s in states if keep(s) and (not part or part in s["failed"])]
    shown.sort(key=SORTS[sort])
    left = [s for s in states if not s["reviewed"]]
    first = next_unreviewed(states, None)
    out = ["<nav><strong>Review: class list</strong>",
           f'<a rel="next-unreviewed" href="/s/{e(quote(first, safe=""))}">first not reviewed →</a>' if first
           else "<span>everyone reviewed</span>", "<small>keys: n next not reviewed</small></nav>"]
    troubles = [problem and f"The overrides file has a problem; totals below are without it: {problem}",
                review.comments()[1], review.requests(records)[1]]
    out += [f'<p class="error">{e(t)}</p>' for t in troubles if t]
    out.append(f"<h1>{len(states) - len(left)} of {len(states)} reviewed · {len(left)} left</h1>")
    out.append('<p class="muted">Left to review: '
               + ", ".join(f"{sum(FILTERS[k][1](s) for s in left)} {FILTERS[k][0]}"
                           for k in ("flagged", "failing", "late", "similar", "requests")) + ".</p>")

    def link(**change) -> str:
        values = {"show": show, "part": part, "sort": sort, **change}
        return "/?" + urlencode({k: v for k, v in values.items() if v and not (k, v) in (("show", "all"), ("sort", "name"))})

    out.append('<p class="chips">' + "".join(
        f'<a class="{"on" if key == show else ""}" href="{e(link(show=key))}">{e(label)} '
        f"({sum(test(s) for s in states)})</a>" for key, (label, test) in FILTERS.items()) + "</p>")
    parts = review.lesson.components
    out.append('<form class="filters" method="get" action="/">'
               f'<input type="hidden" name="show" value="{e(show)}">'
               '<label>failed part <select name="part" id="part"><option value="">any</option>'
               + "".join(f'<option value="{e(c)}"{" selected" if c == part else ""}>{e(c)}</option>' for c in parts)
               + '</select></label> <label>sort by <select name="sort" id="sort">'
               + "".join(f'<option value="{k}"{" selected" if k == sort else ""}>{k.replace("-", " ")}</option>'
                         for k in SORTS)
               + '</select></label> <button type="submit">apply</button></form>')
    out.append(f"<p>{len(shown)} shown.</p>")
    head = [("student", "name"), ("total", "total-desc"), ("reviewed", None), ("flags", "flags"),
            ("parts failed", "failed"), ("late", None), ("similar to", "similar"), ("regrade", None)]
    out.append('<table class="list" id="students"><tr>' + "".join(
        f'<th><a href="{e(link(sort=key))}">{e(label)}</a></th>' if key else f"<th>{e(label)}</th>"
        for label, key in head) + "</tr>")
    for s in shown:
        status = "" if s["status"] == "ok" else f' <span class="bad">{e(s["status"])}</span>'
        late_days = f"{s['late']} d" if s["late"] else ""
        requests_open = f"{s['open']} open" if s["open"] else ""
        out.append(
            f'<tr data-name="{e(s["name"])}"><td><a href="/s/{e(quote(s["name"], safe=""))}">{e(s["name"])}</a>{status}</td>'
            f'<td class="num">{number(s["total"])} / {number(s["max"])}</td>'
            f'<td class="{"ok" if s["reviewed"] else "bad"}">{"yes" if s["reviewed"] else "no"}</td>'
            f'<td class="{"flag" if s["flags"] else ""}">{s["flags"] or ""}</td>'
            f'<td>{e(", ".join(s["failed"]))}</td><td>{late_days}</td>'
            f'<td>{e(_some([n + (" ✓" if n in s["pairs_done"] else "") for n in s["similar"]]))}</td>'
            f'<td>{requests_open}</td></tr>')
    out.append("</table>")
    return _page("Review: class list", out)


# ---------------------------------------------------------------- one student


def render_student(review: Review, records: list[SubmissionResult], index: int, token: str, problem: str,
                   message: str = "", form: dict | None = None, line_form: dict | None = None) -> str:
    """A student's page. `message` is why the last form was refused; `form` and `line_form` are
    what was typed in it, shown again so nothing typed is lost."""
    e = html.escape
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
    prev_link = f'<a rel="prev" href="/s/{e(quote(records[index - 1].submission, safe=""))}">← previous</a>' \
        if index > 0 else "<span>← previous</span>"
    next_link = f'<a rel="next" href="/s/{e(quote(records[index + 1].submission, safe=""))}">next →</a>' \
        if index + 1 < len(records) else "<span>next →</span>"
    unreviewed = f'<a rel="next-unreviewed" href="/s/{e(quote(following, safe=""))}">next not reviewed ({left} left)</a>' \
        if following else f"<span>{'no other student left to review' if left else 'everyone reviewed'}</span>"
    out = [f'<nav><a rel="index" href="/">class list</a>{prev_link}<strong>{e(name)}</strong>'
           f"<span>{index + 1} / {len(records)}</span>{next_link}{unreviewed}"
           "<small>keys: ← → move, n next not reviewed, l list</small></nav>"]
    for trouble in (problem and f"The overrides file has a problem; scores below are without it: {problem}",
                    comment_problem, request_problem):
        if trouble:
            out.append(f'<p class="error">{e(trouble)}</p>')
    if message:
        out.append(f'<p class="error" id="message" role="alert">{e(message)}</p>')
    status = "" if result.status == "ok" else f' <span class="bad">status: {e(result.status)}</span>'
    reviewed = '<small class="ok">reviewed</small>' if state["reviewed"] else '<small class="bad">not reviewed</small>'
    out.append(f"<h1>{e(name)}: {number(result.total)} / {number(result.max_total)}{status} {reviewed}</h1>")
    if why := totals.explain(result):
        out.append(f'<p class="why">{e(why)}</p>')
    left_column = [f"<p>from <code>{e(result.source or '?')}</code>"
                   + (f' · <span class="bad">{state["late"]} day(s) late</span>' if state["late"] else "") + "</p>",
                   *_group_line(review.out, name),
                   html_blocks([Table(("part", "points"), [
                       [component, Cell(f"{number(score)} / {number(possible)}", bool(possible and score < possible))]
                       for component, (score, possible) in by_component(result, lesson=review.lesson).items()])])]
    if result.overrides:
        left_column.append(_folded("Decisions in effect", [_decision_item(o) for o in result.overrides],
                                   tag="ul", open_under=4))
    out.append('<div class="top"><div>' + "".join(left_column) + "</div><div>"
               + _form(result, token, review.by, similar, form, components=review.lesson.components) + "</div></div>")
    if standings:
        out.append("<h2>Regrade requests</h2>")
        out += [_request_block(result, s, i, token, review.by) for i, s in enumerate(standings)]
    flags = list(getattr(result, "flags", []) or [])
    if flags or result.notes:
        out.append(_folded(f"Integrity flags ({len(flags)}) and grading notes ({len(result.notes)})",
                           [f"<li><b>flag</b>: {e(str(f))}</li>" for f in flags]
                           + [f"<li>{e(str(n))}</li>" for n in result.notes], tag="ul", cls="flag", open_under=4))
    if similar:  # evidence for the reviewer to weigh, never points
        out.append(_folded(f"Similar: {len(similar)} flagged pair(s) with {_some(sorted({p['other'] for p in similar}))} "
                           "(similarity.html)",
                           [f"<li>{e(p['other'])}: {e(p['kind'])} {p['score']:.2f}, {e(p['detail'])}"
                            + (' <b class="ok">pair reviewed ✓</b>' if p["other"] in state["pairs_done"] else "")
                            + "</li>" for p in similar[:20]], tag="ul", cls="flag", open_under=0))
    out.append(_code_section(review, result, mine, token, line_form))
    out.append('<div class="grid">')
    for kind, names in review.images.items():
        found = review.student_file(result, names, MAX_IMAGE)
        out.append(f"<section><h2>{e(kind)}</h2>")
        if found and _image_type(found[1]):
            out.append(f'<img alt="{e(kind)} of {e(name)}" src="/f/{e(quote(name, safe=""))}/{e(quote(kind, safe=""))}">'
                       f"<p><small>{e(found[0])}</small></p>")
        elif found:  # a format no <img> shows (a PDF): named, to be opened from the class folder
            out.append(f"<p><small>{e(found[0])}</small>: not a picture this page shows; open it from the "
                       "class folder.</p>")
        else:
            out.append(f"<p>No {e(kind)} image{' (files not available: pass --submissions)' if review.submissions is None else ''}.</p>")
        out.append("</section>")
    out.append("</div>")
    for kind, names in review.texts.items():
        found = review.student_file(result, names, MAX_TEXT)
        if found:
            text = found[1].decode("utf-8", "replace")
            lines = text.count("\n") + 1
            out.append(f'<details{" open" if lines <= 20 else ""}><summary>{e(kind)} '
                       f"<small>({e(found[0])}, {lines} lines)</small></summary>{html_blocks([Preformatted(text)])}"
                       "</details>")
        else:
            out.append(f"<h2>{e(kind)}</h2><p>No {e(kind)}.</p>")
    out.append("<h2>Automated verdicts</h2><table><tr><th>test</th><th>verdict</th><th>points</th><th>details</th></tr>")
    asked = {s.request.test: s for s in standings}
    for t in result.tests:
        cls = "ok" if t.status == "passed" else "bad"
        details = _details(t, review.release, review.lesson.visibility, review.words)
        request = asked.get(t.name) or asked.get(t.component)
        if request:
            details = (f'<p class="req">regrade request ({e(request.state)}): {e(request.request.reason)}</p>'
                       + details)
        out.append(f'<tr id="t-{e(t.name)}"><td><code>{e(t.name)}</code><br><small>{e(t.title)}</small></td>'
                   f'<td class="{cls}">{e(t.status)}</td>'
                   f"<td>{number(t.score)} / {number(t.max_score)}</td><td>{details}</td></tr>")
    out.append("</table>")
    return _page(f"Review: {name}", out)


def _some(names: list[str], shown: int = 4) -> str:
    """A few names and how many more: a row of the list stays one or two lines high."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _decision_item(o: dict) -> str:
    """One decision in effect: what the student reads of it and what only the staff do."""
    e = html.escape
    points = "reviewed" if o["points"] is None else f"{o['points']:g}"
    said = "" if o.get("staff_only") or not o.get("comment") else \
        f' — <span class="to-student">to the student: {e(o["comment"])}</span>'
    staff = "; ".join(t for t in (o.get("comment", "") if o.get("staff_only") else "", o.get("staff_note", "")) if t)
    noted = f' — <span class="staff-note">staff only: {e(staff)}</span>' if staff else ""
    return (f"<li><code>{e(o['test'])}</code>: {e(points)}{said}{noted} "
            f"<small>({e(o.get('by', ''))} {e(o.get('at', ''))})</small></li>")


def _group_line(out_dir: Path, name: str) -> list[str]:
    """Who this submission belongs to when OUT/roster.csv names a group (grader/intake/roster.py)."""
    from grader.intake import roster

    try:
        people = roster.in_out(out_dir)
    except roster.RosterError as error:
        return [f'<p class="error">roster.csv: {html.escape(str(error))}</p>']
    if people is None:
        return []
    members = people.members(name)
    group = people.group_of(name)
    if len(members) < 2 and not group:
        return []
    partners = [s for s in people.students if group and s.group == group and s.submission != name]
    said = ", ".join(html.escape(m.name or m.identity) for m in members)
    if partners:
        said += " · partners' own submissions: " + ", ".join(
            html.escape(f"{p.name or p.identity} ({p.submission})") for p in partners)
    return [f'<p class="group">group {html.escape(group or name)}: {said}</p>']


def _folded(title: str, items: list[str], *, tag: str = "div", cls: str = "", open_under: int = 4) -> str:
    """A section that folds: open when it holds at most `open_under` items, so long ones never push
    the form and the code below the first screen."""
    e = html.escape
    opened = " open" if len(items) <= open_under else ""
    return (f'<details{opened}><summary>{e(title)}</summary><{tag}{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>'
            + "".join(items) + f"</{tag}></details>")


def _details(t, release: str, visibility: dict, words: Words) -> str:
    e = html.escape
    if t.status == "passed":
        return ""
    if not released(visibility_of(t.name, t.component, visibility), release):
        return f"<p>details withheld (--release {e(release)})</p>"
    return html_blocks(test_details(t, words))  # the blocks the student's feedback shows


def _code_section(review: Review, result: SubmissionResult, comments: list, token: str,
                  line_form: dict | None) -> str:
    """Each graded file, coloured and numbered, with its diff from the stub (folded), the failing
    tests at the definition they test and the line comments under their lines."""
    e = html.escape
    files = review.code_files(result)
    if not files:
        why = " (files not available: pass --submissions)" if review.submissions is None else ""
        return f"<h2>Code</h2><p>No code to show{why}.</p>"
    lesson = review.lesson
    failing = [t for t in result.tests if t.status != "passed" and t.component in lesson.graded_names]
    out = ["<h2>Code</h2>", '<p class="muted">Click a line number to comment on that line.</p>']
    placed: set[str] = set()
    for index, f in enumerate(files):
        names = [n for c in lesson.graded_names for n in lesson.graded_names[c]]
        defined = codeview.definition_lines(f.text, names)
        at_line: dict[int, list] = {}
        for t in failing:
            if t.name in placed:
                continue
            owner = f.name == f"{t.component}.py" or f.name.lower().endswith(".ipynb")
            name = codeview.tested_name(t.title, t.output, lesson.graded_names.get(t.component, ()))
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
        opened = "" if as_released and not notes else " open"
        out.append(f'<details class="file" id="file-{index}"{opened}><summary>{e(f.name)} '
                   f'<small>({e(", ".join(summary))})</small></summary>')
        if counts:
            out.append(f'<details class="diff"><summary>diff from the released stub</summary>'
                       f"{_diff_table(f)}</details>")
        out.append(_code_table(index, f, at_line, notes, result.tests))
        if f.cut:
            out.append(f"<p class=muted>… cut at {codeview.MAX_FILE_CHARS} characters.</p>")
        out.append("</details>")
    out.append(_line_form(result, files, token, review.by, line_form))
    return "\n".join(out)


def _code_table(index: int, f, at_line: dict, notes: dict, tests) -> str:
    e = html.escape
    rows = ['<table class="code">']
    for number_, painted in enumerate(codeview.highlight(f.text), 1):
        anchor = f"f{index}-L{number_}"
        rows.append(f'<tr id="{anchor}"><td class="ln"><a class="ln" href="#{anchor}" data-file="{e(f.name)}" '
                    f'data-line="{number_}">{number_}</a></td><td class="src">{painted}</td></tr>')
        boxes = []
        for t in at_line.get(number_, []):
            boxes.append(f'<div class="failing"><b>✗ {e(t.name)}</b> ({number(t.score)} / {number(t.max_score)}): '
                         f'{e(t.title)}<details><summary>the calls and what they gave</summary>'
                         f"<pre>{e(clip(t.output))}</pre></details></div>")
        for c in notes.get(number_, []):
            if c.comment:
                boxes.append(f'<div class="said">to the student: {e(c.comment)} <small>({e(c.by)} {e(c.at)})</small></div>')
            if c.staff_note:
                boxes.append(f'<div class="staff">staff only: {e(c.staff_note)} <small>({e(c.by)} {e(c.at)})</small></div>')
        if boxes:
            rows.append(f'<tr class="note"><td class="ln"></td><td class="src">{"".join(boxes)}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def _diff_table(f) -> str:
    e = html.escape
    rows = ['<table class="code diff">']
    for kind, line, text in codeview.diff_rows(f.stub, f.text):
        cls = {"+": "add", "-": "del", "@": "hunk", " ": "same"}[kind]
        rows.append(f'<tr class="{cls}"><td class="ln">{line or ""}</td><td class="src">'
                    f'{e(kind if kind != "@" else "")}{e(text)}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def _line_form(result: SubmissionResult, files, token: str, by: str, typed: dict | None) -> str:
    e = html.escape
    typed = typed or {}
    chosen = typed.get("file", files[0].name)
    options = "".join(f'<option value="{e(f.name)}"{" selected" if f.name == chosen else ""}>{e(f.name)}</option>'
                      for f in files)
    return (f'<form method="post" id="line-form" action="/s/{e(quote(result.submission, safe=""))}/comment">'
            f'<input type="hidden" name="token" value="{e(token)}"><b>Comment on</b>'
            f'<select name="file" id="c-file">{options}</select>'
            f'<label>line <input name="line" id="c-line" size="4" value="{e(typed.get("line", ""))}"></label>'
            f'<span id="c-where" class="muted"></span>'
            f'<label>to the student <input type="text" name="comment" id="c-comment" size="34" '
            f'value="{e(typed.get("comment", ""))}"></label>'
            f'<label>staff-only note <input type="text" name="staff_note" id="c-note" size="24" '
            f'value="{e(typed.get("staff_note", ""))}"></label>'
            f'<input type="hidden" name="by" value="{e(typed.get("by", by))}">'
            '<button type="submit" id="c-save">add comment</button></form>')


def _request_block(result: SubmissionResult, standing, index: int, token: str, by: str) -> str:
    e = html.escape
    r = standing.request
    head = (f'<div class="req" id="request-{index}"><b>{e(r.test)}</b> · asked {e(r.time)} · '
            f"<b>{e(standing.state)}</b><br>“{e(r.reason)}”")
    if standing.decision is not None:
        d = standing.decision
        change = "no change of points" if d.points is None else f"{d.points:g} points"
        return head + f"<br>decision: {e(change)} — {e(d.comment)} <small>({e(d.by)} {e(d.at)})</small></div>"
    return head + (
        f'<form method="post" action="/s/{e(quote(result.submission, safe=""))}/regrade">'
        f'<input type="hidden" name="token" value="{e(token)}"><input type="hidden" name="request" value="{index}">'
        f'<input type="hidden" name="by" value="{e(by)}">'
        '<label>points (to accept) <input name="points" id="r-points-%d" size="5"></label> '
        '<label>reason, for the student <input type="text" name="comment" id="r-comment-%d" size="36"></label> '
        '<label>staff-only note <input type="text" name="staff_note" id="r-note-%d" size="20"></label> '
        '<button type="submit" name="decision" value="accept" id="r-accept-%d">accept</button> '
        '<button type="submit" name="decision" value="decline" id="r-decline-%d">decline</button></form></div>'
        % (index, index, index, index, index))


def _form(result: SubmissionResult, token: str, by: str, similar: list[dict] = (), typed: dict | None = None, *,
          components) -> str:
    e = html.escape
    typed = typed or {}
    chosen = typed.get("test", overrides.BONUS)
    options = "".join(f'<option value="{e(value)}"{" selected" if value == chosen else ""}>{e(label)}</option>'
                      for value, label, _ in _targets(result, similar, components=components))
    return (f'<form class="decide" method="post" action="/s/{e(quote(result.submission, safe=""))}/override">'
            f'<input type="hidden" name="token" value="{e(token)}"><b>Decide</b>'
            f'<label>set <select name="test" id="test">{options}</select></label>'
            '<label>points <input name="points" id="points" inputmode="decimal" '
            f'placeholder="empty: mark reviewed" value="{e(typed.get("points", ""))}"></label>'
            f'<label>comment to the student <input type="text" name="comment" id="comment" '
            f'value="{e(typed.get("comment", ""))}"></label>'
            f'<label>staff-only note <input type="text" name="staff_note" id="staff_note" '
            f'value="{e(typed.get("staff_note", ""))}"></label>'
            f'<label>by <input name="by" id="by" size="8" value="{e(typed.get("by", by))}"></label>'
            '<button type="submit" id="save">save</button></form>')


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
                return self._send(200, b"<!DOCTYPE html><p>No graded submissions in this folder.</p>",
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
               "by": typed["by"]}
        rows = [row]
        other = test.split(":", 1)[1] if test.startswith("similarity:") else None
        if other in index:  # one look at a pair is a look for both of its students
            rows.append({**row, "submission": other, "test": f"similarity:{name}"})
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
        except ValueError as error:
            return self._refused(records, index, name, str(error))
        review.append({"submission": name, "test": request.test, "points": points, "comment": comment,
                       "staff_note": note, "by": field.get("by", "")})
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
         release: str = "all", by: str = "", lesson=None) -> int:
    out_dir = Path(out)
    if not out_dir.is_dir() or not load_records(out_dir)[0]:
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
