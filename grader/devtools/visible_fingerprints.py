"""A lesson's visible tests' evidence about mistakes: <assignment>/tests/known_mistakes.json.

The students' visible tests name a misconception only when the student's numbers are those of a
catalogued mistake, as the hidden grading does. They get no mutant's code, only its fingerprints:
this module runs every bug-catalogue mutant of the lesson through the visible tests of its part, in one
pytest process with a recording plugin, and keeps, for each test the mutant fails, the first comparison
it fails and what it gives there (grader/student's `fingerprint`: the shape and at most 64 values,
rounded to 5 significant digits; a digest for a structured value). With them go the hint texts of those
mutants (the rubric's [hints.*], the one source of the wording), the words for facts ([facts.*]) and
the forbidden-library rule the visible tests apply on a student's machine (the lesson's forbidden policy
[names] and the rubric's forbidden_message).

    python -m grader.devtools.visible_fingerprints --lesson NAME|PATH           # rewrite the file
    python -m grader.devtools.visible_fingerprints --lesson NAME|PATH --check   # exit 1 when out of date

Run it after changing a visible test, the catalogue or a hint; each lesson's visible-test checks hold
the file current, and the release's leak check refuses a fingerprint file holding anything but numbers,
visible test names and the rubric's words.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KNOWN_MISTAKES = "known_mistakes.json"
PLUGIN = "grader.devtools.visible_fingerprints"  # this module, as the recording run loads it (also when run as __main__)
_PLAN, _OUT = "GRADER_FINGERPRINTS_PLAN", "GRADER_FINGERPRINTS_OUT"
DIGITS = 5  # significant digits kept: far finer than the match tolerance, coarse enough to be stable


def target(lesson) -> Path:
    return lesson.assignment / "tests" / KNOWN_MISTAKES


def recorded_names(*, lesson) -> list[str]:
    """The runs build() reads from a recording: "reference" (the reference, every test) and each named catalogue
    mutant that the visible tests can see (by its id, its own part's tests only)."""
    return ["reference"] + [bug.id for bug in _named_bugs(lesson)]


def _named_bugs(lesson) -> list:
    catalogue = importlib.import_module(lesson.catalogue_module)
    hints = lesson.rubric().get("hints", {})
    return [bug for bug in catalogue.BUGS if not bug.forbidden and bug.id in hints and bug.visible]


def build(*, lesson, recorded: dict | None = None) -> dict:
    """Run the reference and every catalogue mutant through the visible tests; the file's contents. A caller that
    has recorded those runs already (record_visible, a plan holding at least recorded_names()) passes them as
    `recorded`: the diagnostics audit's recording of every mistake then also checks this file."""
    from grader.judging.mutants import apply

    rubric = lesson.rubric()
    hints = {bug_id: entry["text"] for bug_id, entry in rubric.get("hints", {}).items()}
    bugs = _named_bugs(lesson)
    if recorded is not None:
        missing = [name for name in recorded_names(lesson=lesson) if name not in recorded["comparisons"]]
        if missing:
            raise ValueError(f"the recording lacks runs the known mistakes are built from: {missing}")
    else:
        with tempfile.TemporaryDirectory(prefix=f"{lesson.name}-fingerprints-") as tmp:
            tmp = Path(tmp)
            plan = [{"name": "reference", "part": None, "folder": str(lesson.solutions)}]
            for bug in bugs:
                mutant = tmp / "mutants" / bug.id
                mutant.mkdir(parents=True)
                for name, text in apply(bug, lesson.solutions).items():
                    (mutant / name).write_text(text, encoding="utf-8")
                plan.append({"name": bug.id, "part": bug.component, "folder": str(mutant)})
            recorded = record_visible(plan, lesson=lesson)
    table = _table(recorded["comparisons"], bugs, hints, lesson.forbidden_policy["names"],
                   rubric.get("meta", {}).get("forbidden_message", ""))
    # The tests of its part each named mistake passes: a student who fails one of them did not make that mistake.
    table["passes"] = {m: recorded["passes"].get(m, []) for m in table["hints"]}
    # The words for what the numbers show (rubric [facts.*]), the same as the hidden feedback's.
    table["facts"] = {k: v["text"] for k, v in sorted(rubric.get("facts", {}).items()) if isinstance(v, dict)}
    return table


def record_visible(plan: list[dict], *, lesson) -> dict:
    """Run the visible tests on each folder of `plan` ({name, part or None for all, folder}), in one pytest
    process, as a student runs them (the tests as the release ships them). Returns {"comparisons": {name:
    {test: [comparison, ...]}}, "told": {name: {test: [what a failure found and said, ...]}}, "passes": {name:
    [test, ...]}} (the conftest's VISIBLE.evidence.record, .told and the tests each run passed)."""
    from grader.release.visible_tests import write_visible_tests

    with tempfile.TemporaryDirectory(prefix=f"{lesson.name}-visible-") as tmp:
        tmp = Path(tmp)
        folder = tmp / lesson.name
        write_visible_tests(folder, lesson=lesson)
        (tmp / "plan.json").write_text(json.dumps({"modules": list(lesson.modules), "runs": plan}), encoding="utf-8")
        out = tmp / "records.json"
        env = {**os.environ, _PLAN: str(tmp / "plan.json"), _OUT: str(out), "PYTHONPATH": str(ROOT),
               "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q"],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
        if not out.exists():
            raise RuntimeError(f"running the visible tests on the plan failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return json.loads(out.read_text(encoding="utf-8"))


def _table(records: dict, bugs, hints: dict, names: dict, message: str) -> dict:
    reference = records["reference"]
    failed = [f"{test} #{c['n']}" for test, seen in reference.items() for c in seen if c["failed"]]
    if failed:
        raise RuntimeError(f"the reference fails visible comparisons: {failed}")
    tests: dict = {}
    for bug in bugs:
        for test, seen in sorted(records.get(bug.id, {}).items()):
            first = next((c for c in seen if c["failed"]), None)
            if first is None:
                continue  # the test passes, or fails outside a comparison (an assert, an error)
            entry = {"kind": first["kind"], "got": _rounded(first["got"])}
            same_place = next((c for c in reference.get(test, ()) if c["n"] == first["n"]), None)
            if first["expected"] is None and first["kind"] != "shape":
                entry["expected"] = None  # the mistake gave no second value (say, no mask) where one may be given
            elif first["expected"] is not None and (same_place is None or same_place["expected"] != first["expected"]):
                entry["expected"] = _rounded(first["expected"])  # the test compares two answers of the student's
            slot = tests.setdefault(test, {}).setdefault(str(first["n"]), [])
            twin = next((e for e in slot if {k: v for k, v in e.items() if k != "mutants"} == entry), None)
            if twin is not None:
                twin["mutants"].append(bug.id)
            else:
                slot.append({**entry, "mutants": [bug.id]})
    used = sorted({m for places in tests.values() for slot in places.values() for e in slot for m in e["mutants"]})
    return {
        "format": 1,
        "hints": {m: hints[m] for m in used},
        "forbidden": {"anywhere": sorted(names.get("anywhere", ())), "torch_only": sorted(names.get("torch_only", ())),
                      "kit_packages": sorted(names.get("kit_packages", ())), "message": message},
        "tests": tests,
    }


def _rounded(fp: dict) -> dict:
    if "digest" in fp:
        return {"shape": fp["shape"], "digest": fp["digest"]}
    values = []
    for v in fp["values"]:
        if math.isnan(v):
            values.append("nan")
        elif math.isinf(v):
            values.append("inf" if v > 0 else "-inf")
        else:
            r = float(f"{v:.{DIGITS}g}")
            values.append(0.0 if r == 0 else (int(r) if r.is_integer() and abs(r) < 1e15 else r))
    return {"shape": fp["shape"], "values": values}


def dumps(table: dict) -> str:
    """One line per test, so a change shows as a readable diff."""
    head = {k: v for k, v in table.items() if k != "tests"}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False, sort_keys=True)}," for k, v in head.items()]
    lines.append(' "tests": {')
    tests = sorted(table["tests"].items())
    lines += [f"  {json.dumps(name)}: {json.dumps(places, sort_keys=True, separators=(',', ':'))}"
              + ("," if i < len(tests) - 1 else "") for i, (name, places) in enumerate(tests)]
    return "\n".join(lines + [" }", "}"]) + "\n"


def same_tables(a, b, rel: float = 1e-4) -> bool:
    """Equal structure and words; numbers equal up to a last-digit rounding flip."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_tables(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_tables(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b or abs(a - b) <= rel * max(1.0, abs(a), abs(b))
    return a == b


# -- the pytest plugin (active only in the recording run above) ---------------------------------
def pytest_runtestloop(session):
    """Instead of one run: the reference on every visible test, then each mutant on its part's tests."""
    from _pytest.runner import runtestprotocol

    conftest = sys.modules.get("conftest")
    visible = getattr(conftest, "VISIBLE", None)
    if visible is None:
        raise RuntimeError("the visible tests' conftest.py has no VISIBLE (grader/student's VisibleTests) to record")
    plan = json.loads(Path(os.environ[_PLAN]).read_text(encoding="utf-8"))
    records: dict = {}
    told_all: dict = {}
    passes: dict = {}
    for run in plan["runs"]:
        visible.use_folder(Path(run["folder"]))
        visible.evidence.outcomes = {}  # what this run's tests did, and only this run's
        seen = records[run["name"]] = {}
        told = told_all[run["name"]] = {}

        def record(test, n, kind, got, expected, failed, seen=seen):
            seen.setdefault(test, []).append({"n": n, "kind": kind, "got": got, "expected": expected,
                                              "failed": bool(failed)})

        def tell(test, found, told=told):
            told.setdefault(test, []).append(found)

        visible.evidence.record, visible.evidence.told = record, tell
        for item in session.items:
            if run["part"] is None or item.get_closest_marker(run["part"]):
                runtestprotocol(item, log=False, nextitem=None)
        passes[run["name"]] = sorted(test for test, outcome in visible.evidence.outcomes.items() if outcome is None)
    visible.evidence.record = visible.evidence.told = None
    visible.evidence.outcomes = {}
    Path(os.environ[_OUT]).write_text(json.dumps({"comparisons": records, "told": told_all, "passes": passes}),
                                      encoding="utf-8")
    return True


def is_current(*, lesson, recorded: dict | None = None) -> bool:
    """Whether the lesson's stored file holds what build() makes now (from `recorded`, if given)."""
    fresh = build(lesson=lesson, recorded=recorded)
    try:
        return same_tables(json.loads(target(lesson).read_text(encoding="utf-8")), json.loads(dumps(fresh)))
    except (OSError, ValueError):
        return False


def main(*, lesson, check: bool = False) -> int:
    where = target(lesson)
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    command = f"python -m grader.devtools.visible_fingerprints --lesson {lesson.ref}"
    if check:
        current = is_current(lesson=lesson)
        print(f"{shown} is {'up to date' if current else f'out of date: run {command}'}")
        return 0 if current else 1
    fresh = build(lesson=lesson)
    where.write_text(dumps(fresh), encoding="utf-8")
    count = sum(len(slot) for places in fresh["tests"].values() for slot in places.values())
    print(f"wrote {shown} ({count} fingerprints of {len(fresh['hints'])} mistakes, {where.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    from grader.lesson import lesson_option, load_lesson

    parser = argparse.ArgumentParser(prog="python -m grader.devtools.visible_fingerprints",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", type=lesson_option, default=None, help="the lesson (a name under grader/ or a path)")
    parser.add_argument("--check", action="store_true", help="compare with the stored file instead of writing it")
    args = parser.parse_args()
    sys.exit(main(lesson=load_lesson(args.lesson), check=args.check))
