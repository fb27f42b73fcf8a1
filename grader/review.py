"""`python -m grader review OUT`: a page on this machine that walks the class one student at a time.

For each student: the score by part, the decisions already taken, integrity flags and grading
notes, the attention heatmap, the block diagram, the analysis and the README, every test's verdict
with the failing tests' output and hints. A TA sets points on any test, any part or the whole
submission (added to the total), with a comment for the student and a note only the staff read (two
fields: who may read a text is decided when it is written); each decision is one line appended to
OUT/overrides.csv (grader/overrides.py), which `grade` and `merge` apply to every output. Left/right arrows (or j/k)
move between students.

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
from urllib.parse import parse_qs, quote, unquote, urlsplit

from grader import overrides, similarity, totals
from grader.document import number
from grader.feedback import by_component, clip, hint_texts, released, visibility_of
from grader.lesson import load_lesson
from grader.records import SubmissionResult
from grader.storage import load_records

MAX_TEXT = 100_000  # characters of a README or analysis shown
MAX_IMAGE = 20 << 20  # bytes of an image served
MAX_FORM = 64 << 10  # bytes of a posted form
TEXTS = {"README": ("readme.md", "readme.markdown", "readme.txt", "readme"),
         "analysis": ("analysis.md", "analysis.txt")}
IMAGES = {"heatmap": ("attention_heatmap.png",),
          "diagram": tuple(f"transformer_block.{ext}" for ext in ("png", "jpg", "jpeg", "svg"))}
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
               "base-uri 'none'; frame-ancestors 'none'")
IMAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; sandbox"

_SCRIPT = """// Keyboard: left/right or k/j move between students (not while typing in the form).
document.addEventListener('keydown', function (event) {
  var tag = (event.target && event.target.tagName) || '';
  if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || event.altKey || event.ctrlKey || event.metaKey) {
    return;
  }
  var rel = {ArrowRight: 'next', j: 'next', ArrowLeft: 'prev', k: 'prev'}[event.key];
  var link = rel && document.querySelector('a[rel="' + rel + '"]');
  if (link) { window.location.href = link.href; event.preventDefault(); }
});
"""
_STYLE = """body{font-family:system-ui,sans-serif;margin:1em auto;max-width:70em;padding:0 1em;color:#222}
nav{display:flex;gap:1em;align-items:center;border-bottom:1px solid #ccc;padding-bottom:.5em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em;max-height:30em;overflow:auto}
img{max-width:100%;border:1px solid #ddd}.bad{color:#b00}.ok{color:#070}.grid{display:grid;grid-template-columns:1fr 1fr;gap:1em}
form{background:#f0f4ff;padding:.6em;border:1px solid #ccd}form input,form select{margin:.2em}.flag{background:#fff3cd}
.staff-note{background:#fde8e8}.why{color:#555}
"""


class Review:
    """The data behind the pages: records, the overrides file, the students' files."""

    def __init__(self, out: Path, submissions: Path | None, overrides_path: Path | None, release: str, by: str):
        self.out, self.submissions = Path(out), Path(submissions) if submissions else None
        self.overrides_path = Path(overrides_path) if overrides_path else overrides.default_path(self.out)
        self.release, self.by = release, by
        self.lock = threading.Lock()

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

    def _source(self, result: SubmissionResult) -> Path | None:
        if self.submissions is None or not result.source:
            return None
        path = self.submissions / result.source.rstrip("/")
        # The source is a name in the class folder, never a path out of it.
        if path.parent.resolve() != self.submissions.resolve() or path.is_symlink():
            return None
        return path

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

    def append(self, row: dict) -> None:
        with self.lock:
            overrides.append(self.overrides_path, row)


def _image_type(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    head = data[:4096].lstrip().lower()
    if head.startswith((b"<?xml", b"<svg", b"<!--", b"<!doctype svg")) and b"<svg" in data[:65536].lower():
        return "image/svg+xml"
    return None


def _targets(result: SubmissionResult) -> list[tuple[str, str, float | None]]:
    """(value, label, maximum) for the form's choice of what to set: the whole submission, parts, tests."""
    found = [(overrides.BONUS, "whole submission: add or take points (+/-)", None)]
    for component in load_lesson().components:
        tests = [t for t in result.tests if t.component == component]
        if tests:
            found.append((component, f"part {component} (0..{number(sum(t.max_score for t in tests))})",
                          sum(t.max_score for t in tests)))
            found += [(t.name, f"  {t.name} (0..{number(t.max_score)})", t.max_score) for t in tests]
    return found


def render_student(review: Review, records: list[SubmissionResult], index: int, token: str, problem: str,
                   message: str = "") -> str:
    e = html.escape
    result = records[index]
    name = result.submission
    prev_link = f'<a rel="prev" href="/s/{e(quote(records[index - 1].submission, safe=""))}">← previous</a>' \
        if index > 0 else "<span>← previous</span>"
    next_link = f'<a rel="next" href="/s/{e(quote(records[index + 1].submission, safe=""))}">next →</a>' \
        if index + 1 < len(records) else "<span>next →</span>"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>Review: {e(name)}</title>", '<link rel="stylesheet" href="/app.css">',
           '<script src="/app.js" defer></script></head><body>',
           f"<nav>{prev_link}<strong>{e(name)}</strong><span>{index + 1} / {len(records)}</span>{next_link}"
           "<small>keys: ← → (or k j)</small></nav>"]
    if problem:
        out.append(f'<p class="bad">The overrides file has a problem; scores below are without it: {e(problem)}</p>')
    if message:
        out.append(f'<p class="bad">{e(message)}</p>')
    status = "" if result.status == "ok" else f' <span class="bad">status: {e(result.status)}</span>'
    out.append(f"<h1>{e(name)}: {number(result.total)} / {number(result.max_total)}{status}</h1>")
    if why := totals.explain(result):
        out.append(f'<p class="why">{e(why)}</p>')
    out.append(f"<p>from <code>{e(result.source or '?')}</code></p>")
    out.append("<table><tr><th>part</th><th>points</th></tr>")
    for component, (score, possible) in by_component(result).items():
        out.append(f"<tr><td>{e(component)}</td><td>{number(score)} / {number(possible)}</td></tr>")
    out.append("</table>")
    if result.overrides:
        out.append("<h2>Decisions in effect</h2><ul>")
        for o in result.overrides:
            points = "reviewed" if o["points"] is None else f"{o['points']:g}"
            said = "" if o.get("staff_only") or not o.get("comment") else \
                f' — <span class="to-student">to the student: {e(o["comment"])}</span>'
            staff = "; ".join(t for t in (o.get("comment", "") if o.get("staff_only") else "",
                                           o.get("staff_note", "")) if t)
            noted = f' — <span class="staff-note">staff only: {e(staff)}</span>' if staff else ""
            out.append(f"<li><code>{e(o['test'])}</code>: {e(points)}{said}{noted} "
                       f"<small>({e(o.get('by', ''))} {e(o.get('at', ''))})</small></li>")
        out.append("</ul>")
    flags = list(getattr(result, "flags", []) or [])
    if flags or result.notes:
        out.append('<h2>Integrity flags and grading notes</h2><ul class="flag">')
        out += [f"<li><b>flag</b>: {e(str(f))}</li>" for f in flags]
        out += [f"<li>{e(str(n))}</li>" for n in result.notes]
        out.append("</ul>")
    pairs = similarity.flagged_pairs(review.out, name)
    if pairs:  # evidence for the reviewer to weigh, never points
        out.append('<h2>Similar to (similarity.html)</h2><ul class="flag">')
        out += [f"<li>{e(p['other'])}: {e(p['kind'])} {p['score']:.2f}, {e(p['detail'])}</li>" for p in pairs[:20]]
        out.append("</ul>")
    out.append(_form(result, token, review.by))
    out.append('<div class="grid">')
    for kind, names in IMAGES.items():
        found = review.student_file(result, names, MAX_IMAGE)
        out.append(f"<section><h2>{e(kind)}</h2>")
        if found and _image_type(found[1]):
            out.append(f'<img alt="{e(kind)} of {e(name)}" src="/f/{e(quote(name, safe=""))}/{kind}">'
                       f"<p><small>{e(found[0])}</small></p>")
        else:
            out.append(f"<p>No {e(kind)} image{' (files not available: pass --submissions)' if review.submissions is None else ''}.</p>")
        out.append("</section>")
    out.append("</div>")
    for kind, names in TEXTS.items():
        found = review.student_file(result, names, MAX_TEXT)
        out.append(f"<h2>{e(kind)}</h2>")
        if found:
            text = found[1].decode("utf-8", "replace")
            out.append(f"<p><small>{e(found[0])}</small></p><pre>{e(text)}</pre>")
        else:
            out.append(f"<p>No {e(kind)}.</p>")
    out.append("<h2>Automated verdicts</h2><table><tr><th>test</th><th>verdict</th><th>points</th><th>details</th></tr>")
    hints = hint_texts()
    for t in result.tests:
        cls = "ok" if t.status == "passed" else "bad"
        details = ""
        if t.status != "passed":
            if released(visibility_of(t.name, t.component), review.release):
                hint = hints.get(t.hint_id or "")
                details = f"<pre>{e(clip(t.output))}</pre>" + \
                    (f"<p><b>Hint:</b> {e(hint)}</p>" if hint and hint not in t.output else "")
            else:
                details = f"<p>details withheld (--release {e(review.release)})</p>"
        out.append(f'<tr><td><code>{e(t.name)}</code><br><small>{e(t.title)}</small></td>'
                   f'<td class="{cls}">{e(t.status)}</td>'
                   f"<td>{number(t.score)} / {number(t.max_score)}</td><td>{details}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def _form(result: SubmissionResult, token: str, by: str) -> str:
    e = html.escape
    options = "".join(f'<option value="{e(value)}">{e(label)}</option>' for value, label, _ in _targets(result))
    return (f'<form method="post" action="/s/{e(quote(result.submission, safe=""))}/override">'
            f'<input type="hidden" name="token" value="{e(token)}">'
            f'<label>set <select name="test" id="test">{options}</select></label>'
            '<label>points <input name="points" id="points" type="number" step="any" '
            'placeholder="empty: mark reviewed"></label>'
            '<label>comment to the student <input name="comment" id="comment" size="36"></label>'
            '<label>staff-only note <input name="staff_note" id="staff_note" size="36"></label>'
            f'<label>by <input name="by" id="by" size="8" value="{e(by)}"></label>'
            '<button type="submit" id="save">save</button></form>')


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

    def _host_ok(self) -> bool:
        port = self.server.server_address[1]
        return self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _records(self):
        records, problem = self.server.review.records()
        return records, problem, {r.submission: i for i, r in enumerate(records)}

    def do_GET(self):  # noqa: N802 - http.server's name
        if not self._host_ok():
            return self._refuse(403, "wrong Host: open the address the review command printed")
        path = urlsplit(self.path).path
        if path == "/app.js":
            return self._send(200, _SCRIPT.encode(), "text/javascript; charset=utf-8")
        if path == "/app.css":
            return self._send(200, _STYLE.encode(), "text/css; charset=utf-8")
        records, problem, index = self._records()
        if path == "/":
            if not records:
                return self._send(200, b"<!DOCTYPE html><p>No graded submissions in this folder.</p>",
                                  "text/html; charset=utf-8")
            return self._send(303, b"", "text/plain", extra={"Location": f"/s/{quote(records[0].submission, safe='')}"})
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "s" and unquote(parts[2]) in index:
            page = render_student(self.server.review, records, index[unquote(parts[2])], self.server.token, problem)
            return self._send(200, page.encode(), "text/html; charset=utf-8")
        if len(parts) == 4 and parts[1] == "f" and unquote(parts[2]) in index and parts[3] in IMAGES:
            found = self.server.review.student_file(records[index[unquote(parts[2])]], IMAGES[parts[3]], MAX_IMAGE)
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
        if not (len(parts) == 4 and parts[1] == "s" and parts[3] == "override" and unquote(parts[2]) in index):
            return self._refuse(404, "no such submission")
        name = unquote(parts[2])
        raw = field.get("points", "").strip()
        row = {"submission": name, "test": field.get("test", "").strip(), "points": raw,
               "comment": field.get("comment", ""), "staff_note": field.get("staff_note", ""),
               "by": field.get("by", "")}
        try:
            points = float(raw) if raw else None
            candidate = overrides.Override(name, row["test"], points, row["comment"].strip(), line=0,
                                           staff_note=row["staff_note"].strip())
            if points is not None and points != points:
                raise ValueError
            overrides.check([candidate], [r for r in load_records(self.server.review.out)[0]
                                          if r.submission == name], path="this form")
        except (ValueError, overrides.OverrideError) as error:
            message = str(error) if isinstance(error, overrides.OverrideError) else f"points {raw!r} is not a number"
            page = render_student(self.server.review, records, index[name], self.server.token, "", message)
            return self._send(400, page.encode(), "text/html; charset=utf-8")
        row["points"] = points
        self.server.review.append(row)
        self._send(303, b"", "text/plain", extra={"Location": f"/s/{quote(name, safe='')}"})


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
         release: str = "all", by: str = "") -> int:
    out_dir = Path(out)
    if not out_dir.is_dir() or not load_records(out_dir)[0]:
        print(f"review: {out} holds no graded submissions; run `python -m grader grade SUBMISSIONS --out {out}` first",
              file=sys.stderr)
        return 2
    review = Review(out_dir, Path(submissions) if submissions else None, Path(overrides_path) if overrides_path
                    else None, release, by)
    try:
        server = ReviewServer(review, port)
    except OSError as error:
        print(f"review: cannot listen on 127.0.0.1:{port} ({error}); pass --port with a free port", file=sys.stderr)
        return 2
    print(f"review: {server.url} (this machine only; Ctrl-C to stop). Decisions go to {review.overrides_path};"
          f" run grade again to write them into grades.csv and feedback.md.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
