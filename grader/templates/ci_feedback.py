"""Feedback on every push: the visible tests and the deliverables checker, in one report.

The release ships this file as tools/ci_feedback.py; .github/workflows/autograde.yml runs it,
and so can you, from the top of your repository:

    python tools/ci_feedback.py

It prints what passed and what to fix, writes the same as Markdown to the job summary
(--summary, the workflow passes $GITHUB_STEP_SUMMARY) and the points in GitHub Classroom's
runner format to --output ($GITHUB_OUTPUT): a line `result=<base64 JSON>` holding
{"version": 1, "status", "max_score", "tests": [{"name", "status", "score", "message"}]},
which classroom-resources/autograding-grading-reporter reads from FEEDBACK_RESULTS.

If you work in @@NOTEBOOK@@ and leave the .py files as released, the feedback comes from the
notebook's test cells instead (tools/stubs.json tells the released files from yours).

These points come from the visible tests only. They are feedback, not your grade: your
grade comes from the instructor's hidden tests, which never live in your repository.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import linecache
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ()  # the lesson's graded parts: the release writes them here, from its rubric
# The files a notebook's `%%writefile` may not write, as the grader refuses them: the contract's files, then the
# module the grader makes of the notebook's cells (the release writes them here).
NOT_WRITTEN = ()
MESSAGE_CHARS = 600


class _Collector:
    """A pytest plugin that keeps one outcome per test: the first phase that did not pass."""

    def __init__(self):
        self.results: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report):
        entry = self.results.setdefault(report.nodeid, {
            "part": next((p for p in PARTS if p in report.keywords), "other"),
            "passed": True, "message": "", "seconds": 0.0})
        entry["seconds"] += report.duration
        if report.failed and entry["passed"]:
            entry["passed"] = False
            crash = getattr(report.longrepr, "reprcrash", None)
            entry["message"] = (crash.message if crash else str(report.longrepr))[:MESSAGE_CHARS]


def run_visible_tests(folder: Path) -> dict[str, dict]:
    import pytest

    collector = _Collector()
    pytest.main(["-q", "-p", "no:cacheprovider", str(folder / "tests")], plugins=[collector])
    return collector.results


def _digest(text: str) -> str:
    return hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def _code_cells(notebook: Path) -> list[tuple[str, str]]:
    """(grade id or cell number, source) of each code cell, read with the standard library."""
    data = json.loads(notebook.read_text(encoding="utf-8"))
    cells = []
    for n, cell in enumerate(data.get("cells", []), 1):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {n}"
            cells.append((grade_id, source))
    return cells


def _magics():
    """The grader's reader of IPython syntax, as the release ships it beside the visible tests."""
    spec = importlib.util.spec_from_file_location("_feedback_magics", HERE.parent / "tests" / "_feedback" / "magics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook_submission(folder: Path) -> Path | None:
    """The notebook the student works in, as the grader chooses it, when every .py is still the released stub: of
    the notebooks whose code differs from @@NOTEBOOK@@ as released, whatever their names, the one changed last."""
    record = HERE / "stubs.json"
    if not record.is_file():
        return None
    released = json.loads(record.read_text(encoding="utf-8"))
    # The .py files first: a few small reads, and `make test` asks this on every run of a .py student.
    for name, digest in released.items():
        path = folder / name
        if name.endswith(".py") and path.is_file() and _digest(path.read_text(encoding="utf-8")) != digest:
            return None
    edited = []
    for notebook in folder.iterdir():
        if notebook.suffix.lower() != ".ipynb" or not notebook.is_file():
            continue
        try:
            code = "\n\n".join(source for _, source in _code_cells(notebook))
        except (ValueError, OSError):
            continue
        if _digest(code) != released.get("@@NOTEBOOK@@:code"):  # an untouched notebook: no work in it
            edited.append(notebook)
    if not edited:
        return None
    return min(edited, key=lambda n: (-n.stat().st_mtime_ns, n.name != "@@NOTEBOOK@@", n.name))


def run_notebook_tests(notebook: Path) -> dict[str, dict]:
    """The visible tests on the notebook's code: its cells run in order in one namespace, as a kernel
    would, except the test cells; then every visible test runs once on that code, with the runner the
    notebook's test cells use (tools/notebook_tests.py), so the tests and their points are those of
    the .py route.

    IPython magics, shell lines and help requests (%..., !..., name?) are skipped as the grader skips them:
    with its own reader, tests/_feedback/magics.py."""
    # display() is a builtin in every Jupyter kernel; graded, as here, it shows nothing.
    namespace: dict = {"__name__": "__main__", "display": lambda *objects, **options: None}
    errors = []
    magics = _magics()
    flags = 0  # the __future__ imports of the cells run so far, as a kernel keeps them
    # What its `%%writefile` cells write, as Jupyter writes it beside the notebook (the grader does too): here in a
    # folder of its own, importable, so CI changes nothing in the student's folder.
    written = Path(tempfile.mkdtemp(prefix="notebook-files-"))
    sys.path[:0] = [str(HERE), str(written)]  # the notebook's set-up cell imports the runner from tools/
    try:
        for grade_id, source in _code_cells(notebook):
            if grade_id.startswith("test_"):
                continue
            found = magics.written_file(source)
            if found and not (magics.plain_file_name(found[0]) and found[0] not in NOT_WRITTEN):
                print(f"The notebook's cell `%%writefile {found[0][:80]}` was not run: a notebook may write files "
                      f"inside its own folder, other than {', '.join(NOT_WRITTEN[:-1])} (the grader skips it too).")
                continue
            if found:
                name, append, text = found
                (written / name).parent.mkdir(parents=True, exist_ok=True)
                with open(written / name, "a" if append else "w", encoding="utf-8") as f:
                    f.write(text)
                importlib.invalidate_caches()
                continue
            try:
                plain, name = magics.neutralise_magics(source), f"{notebook.name} {grade_id}"
                # The cell's lines where a kernel keeps them: a traceback shows them, and what reads a function's
                # source (inspect.getsource, torch.jit.script) finds it (held-out s46: a scripted function's cell).
                linecache.cache[name] = (len(plain), None, plain.splitlines(True), name)
                code, flags = magics.compile_cell(plain, name, flags)
                exec(code, namespace)  # noqa: S102
            except (Exception, SystemExit) as exc:  # a failing cell is feedback, and later cells still run
                errors.append(f"{grade_id}: {type(exc).__name__}: {exc}")
        runner = namespace.get("visible_test")
        if runner is None or not hasattr(runner, "run"):
            problem = "; ".join(errors) or "its cell `visible_test = VisibleTests(...)` is gone"
            return {f"{notebook.name}::set-up": {"part": part, "passed": False, "seconds": 0.0,
                                                 "message": f"the notebook's tests could not start ({problem})"[:MESSAGE_CHARS]}
                    for part in PARTS}
        return {nodeid: {**result, "message": result["message"][:MESSAGE_CHARS]}
                for nodeid, result in runner.run().items()}
    finally:
        sys.path.remove(str(HERE))
        sys.path.remove(str(written))
        shutil.rmtree(written, ignore_errors=True)


def run_deliverables(folder: Path) -> list:
    """The assignment's deliverable checks (tools/deliverable_checks.py), run by the checker beside it; none
    when the lesson asks for nothing besides the code (its release ships no checks file then)."""
    if not (HERE / "deliverable_checks.py").is_file():
        return []
    sys.path.insert(0, str(HERE))
    try:
        import deliverables
        import deliverable_checks
    finally:
        sys.path.remove(str(HERE))
    return deliverables.run_checks(str(folder), deliverable_checks.CHECKS)


def _shares(points: float, count: int) -> list[float]:
    """`count` shares of `points`, rounded, the last one taking the remainder so they add up exactly."""
    if count == 0:
        return []
    shares = [round(points / count, 4)] * (count - 1)
    return shares + [round(points - sum(shares), 4)]


def classroom_result(tests: dict[str, dict], checks: list, points: dict[str, float]) -> dict:
    """GitHub Classroom's runner result: each test carries its share of its part's points."""
    entries = []
    for part in PARTS:
        mine = sorted((k, v) for k, v in tests.items() if v["part"] == part)
        for (nodeid, test), share in zip(mine, _shares(points.get(part, 0.0), len(mine))):
            entries.append({"name": f"{part}: {nodeid.split('::')[-1]}",
                            "status": "pass" if test["passed"] else "fail",
                            "score": share if test["passed"] else 0.0,
                            "message": test["message"], "line_no": 0,
                            "execution_time": f"{test['seconds']:.2f}s"})
    for check, share in zip(checks, _shares(points.get("deliverables", 0.0), len(checks))):
        entries.append({"name": f"deliverables: {check.id}", "status": "pass" if check.passed else "fail",
                        "score": share if check.passed else 0.0,
                        "message": check.message[:MESSAGE_CHARS], "line_no": 0, "execution_time": "0.00s"})
    max_score = round(sum(points.get(p, 0.0) for p in PARTS)
                      + (points.get("deliverables", 0.0) if checks else 0.0), 4)
    status = "pass" if entries and all(e["status"] == "pass" for e in entries) else "fail"
    return {"version": 1, "status": status, "max_score": max_score, "tests": entries}


def shown_points(x: float) -> str:
    """Points as a person reads them: at most two decimals (93.71, 12.5, 30); the result keeps them all."""
    text = f"{round(float(x), 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def summary_markdown(result: dict) -> str:
    total = sum(t["score"] for t in result["tests"])
    delivered = (HERE / "deliverable_checks.py").is_file()  # a lesson without deliverables ships no checks
    lines = [f"## @@LABEL@@ feedback (visible tests{' and deliverables' if delivered else ''})", "",
             f"**{shown_points(total)} / {shown_points(result['max_score'])}** feedback points. This is not your grade: the "
             "instructor grades with hidden tests that your repository never holds.", "",
             "| part | passed | points |", "| --- | --- | --- |"]
    by_part: dict[str, list] = {}
    for test in result["tests"]:
        by_part.setdefault(test["name"].split(":")[0], []).append(test)
    for part, tests in by_part.items():
        passed = sum(t["status"] == "pass" for t in tests)
        lines.append(f"| {part} | {passed}/{len(tests)} | {shown_points(sum(t['score'] for t in tests))} |")
    failing = [t for t in result["tests"] if t["status"] != "pass"]
    if failing:
        lines += ["", "### To fix", ""]
        # Tests of one part that fail for the same reason (a stub, say) are shown once.
        groups: dict[tuple[str, str], list[str]] = {}
        for test in failing:
            part, _, name = test["name"].partition(": ")
            groups.setdefault((part, (test["message"] or "failed").strip()), []).append(name)
        for (part, message), names in groups.items():
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            quoted = message.replace("\n", "\n  > ")
            lines.append(f"- **{part}**: {shown}\n  > {quoted}")
    else:
        lines += ["", "Everything visible passes." + (" Push your deliverables too." if delivered else "")
                  + " The hidden tests check more cases."]
    return "\n".join(lines) + "\n"


def load_points(path: Path) -> dict[str, float]:
    if not path.exists():
        raise SystemExit(f"{path} is missing: it comes with the release. Restore it from the starter "
                         "repository (git checkout origin/main -- tools/points.json).")
    return {k: float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python tools/ci_feedback.py", description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default=".", help="the student folder (default: the current one)")
    parser.add_argument("--summary", default=None, help="append the Markdown report here ($GITHUB_STEP_SUMMARY)")
    parser.add_argument("--output", default=None, help="append `result=<base64>` here ($GITHUB_OUTPUT)")
    parser.add_argument("--points", default=str(HERE / "points.json"), help="points per part (from the release)")
    # `make test` asks these: whether the work is in the notebook, and then its visible tests alone (exit 1 on a failure).
    parser.add_argument("--notebook-route", action="store_true",
                        help="exit 0 when the .py files are the released stubs and the notebook holds your code")
    parser.add_argument("--tests-only", action="store_true", help="only the visible tests, exit 1 when one fails")
    parser.add_argument("--part", default="", help="with --tests-only: one part's tests")
    return parser


def tests_report(tests: dict[str, dict]) -> str:
    """The visible tests as `make test` shows them: one line a test, then each failure's message."""
    lines = [f"{'passed' if t['passed'] else 'FAILED'}  {nodeid}" for nodeid, t in tests.items()]
    for nodeid, t in tests.items():
        if not t["passed"]:
            lines += ["", f"___ {nodeid} ___", (t["message"] or "failed").strip()]
    passed = sum(t["passed"] for t in tests.values())
    return "\n".join(lines + ["", f"{passed} passed, {len(tests) - passed} failed"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    folder = Path(args.folder).resolve()
    if args.notebook_route:
        return 0 if notebook_submission(folder) else 1
    if args.tests_only:
        notebook = notebook_submission(folder)
        if notebook:
            print(f"Your .py files are still the released stubs and {notebook.name} has your code: the visible tests "
                  "run on the notebook's code, as its test cells run them (the grader grades the notebook too).")
        tests = run_notebook_tests(notebook) if notebook else run_visible_tests(folder)
        tests = {k: v for k, v in tests.items() if not args.part or v["part"] == args.part}
        print(tests_report(tests), end="")
        return 0 if all(t["passed"] for t in tests.values()) else 1
    points = load_points(Path(args.points))
    started = time.monotonic()
    notebook = notebook_submission(folder)
    if notebook:
        print(f"Your .py files are still the released stubs and {notebook.name} has your code: "
              "feedback from the notebook's test cells (the grader grades the notebook too).")
        tests = run_notebook_tests(notebook)
    else:
        tests = run_visible_tests(folder)
    checks = run_deliverables(folder)
    result = classroom_result(tests, checks, points)
    report = summary_markdown(result)
    print("\n" + report)
    print(f"(feedback took {time.monotonic() - started:.1f} s)")
    if args.summary:
        with open(args.summary, "a", encoding="utf-8") as summary:
            summary.write(report)
    if args.output:
        encoded = base64.b64encode(json.dumps(result, sort_keys=True).encode("utf-8")).decode("ascii")
        with open(args.output, "a", encoding="utf-8") as output:
            output.write(f"result={encoded}\n")
    # Failing tests are feedback, not an error of this script: the reporter step marks the run red.
    return 0


if __name__ == "__main__":
    sys.exit(main())
