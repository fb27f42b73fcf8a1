"""`python -m grader killrate`: how well a lesson's hidden graders separate right from wrong.

Grades, in this process (trusted code only):
- every bug-catalogue mutant (grader/judging/mutants.py): it is "killed" when it loses points in its own
  component and in no other, fails the test the catalogue names, and that test's feedback names
  the entry's hint;
- every correct implementation in the lesson's variants folder (lesson.toml [killrate]): a
  "false failure" is any code test it does not pass;
- every skeleton in the lesson's skeletons folder (the contract's shapes and attributes, no
  computation): it may pass structure tests only (the rubric's `structure = true`).
Prints the three figures and returns 1 when any is not perfect.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.judging import score
from grader.judging.mutants import Bug
from grader.running.calls import InProcessTransport

COUNT_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def catalogue(lesson):
    """The lesson's catalogue (its mutant folders are shared while the value lives)."""
    return lesson.catalogue


@dataclass
class MutantVerdict:
    bug: Bug
    scores: dict
    failed: dict  # rubric id -> hint id
    killed: bool
    reason: str


def _no_deliverables(fn):
    """Grade code only: mutants and variants carry no deliverables worth checking here."""
    saved = score._deliverables
    score._deliverables = lambda directory, rubric, run_checks=None: []
    try:
        return fn()
    finally:
        score._deliverables = saved


def grade(directory: Path, name: str, *, lesson):
    return _no_deliverables(lambda: score.grade_submission(name=name, directory=Path(directory), lesson=lesson,
                                                           transport=InProcessTransport(directory, lesson=lesson)))


def full_marks(*, lesson) -> dict:
    rubric = lesson.rubric()
    return {c: float(sum(t["points"] for t in rubric[c].values())) for c in lesson.modules}


def judge_mutant(bug: Bug, full: dict | None = None, *, lesson) -> MutantVerdict:
    full = full or full_marks(lesson=lesson)
    result = grade(lesson.catalogue.mutant_dir(bug.id), bug.id, lesson=lesson)
    scores = result.component_scores(lesson.components)
    failed = {t.name: t.hint_id for t in result.tests if t.status == "failed"}
    others = [c for c in lesson.modules if c != bug.component and scores[c] != full[c]]
    if others:
        reason = f"also lost points in {', '.join(others)}"
    elif bug.test not in failed:
        reason = f"passed {bug.test}"
    elif failed[bug.test] != bug.id:
        reason = f"{bug.test} named {failed[bug.test]} instead"
    else:
        reason = ""
    return MutantVerdict(bug, scores, failed, not reason, reason)


def variants(*, lesson) -> list[Path]:
    folder = lesson.variants
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder and folder.exists() else []


def false_failures(directory: Path, *, lesson) -> list[str]:
    result = grade(directory, directory.name, lesson=lesson)
    return [t.name for t in result.tests if t.component in lesson.modules and t.status != "passed"]


def skeletons(*, lesson) -> list[str]:
    folder = lesson.skeletons
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder and folder.exists() else []


def skeleton_part(case: str, *, lesson) -> str | None:
    """The component a part skeleton replaces (None for a whole-submission skeleton)."""
    return lesson.skeleton_parts.get(case.split("_")[0])


def build_skeleton(case: str, folder: Path, *, lesson) -> Path:
    """The reference's code with the skeleton's files on top; a whole_* skeleton's parts.txt names
    the part skeletons it combines."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in lesson.solutions.glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    listing = lesson.skeletons / case / "parts.txt"
    for part in listing.read_text().split() if listing.exists() else [case]:
        for path in (lesson.skeletons / part).glob("*.py"):
            shutil.copyfile(path, folder / path.name)
    return folder


def structure_points(component: str | None = None, *, lesson) -> dict:
    """rubric id -> points of the structure tests (of one component, or of all)."""
    rubric = lesson.rubric()
    return {f"{c}.{t}": float(entry["points"]) for c in lesson.modules if component in (None, c)
            for t, entry in rubric[c].items() if entry.get("structure")}


def judge_skeleton(case: str, root: Path, *, lesson) -> tuple[float, float, list[str]]:
    """(points of what it replaces, the structure points there, the other tests it passed)."""
    result = grade(build_skeleton(case, root / case, lesson=lesson), case, lesson=lesson)
    part = skeleton_part(case, lesson=lesson)
    mine = [t for t in result.tests if t.component in lesson.modules and part in (None, t.component)]
    structure = structure_points(part, lesson=lesson)
    beyond = [t.name for t in mine if t.status == "passed" and t.name not in structure]
    return sum(t.score for t in mine), sum(structure.values()), beyond


def own_kinds(lesson) -> dict[str, str]:
    """Contract module -> the kind of value its outputs are measured as, for a module whose outputs keep
    a tolerance of their own: the lesson's tolerances module says (`OWN_KINDS`); every other module's
    outputs are "outputs <dtype>"."""
    import importlib

    return dict(getattr(importlib.import_module(lesson.tolerances_module), "OWN_KINDS", {}))


def measure_spread(*, lesson) -> dict:
    """Largest difference between each correct variant and the reference on the hidden tests' own calls.

    Returns kind -> (spread, where); spread is |got - expected| / max(1, max|expected|). A kind is
    "outputs <dtype>", "gradients <dtype>", or "<kind> <dtype>" for a module the lesson files under a
    kind of its own (own_kinds).
    """
    reference = lesson.reference
    own = own_kinds(lesson)
    spread: dict[str, tuple[float, str]] = {}
    for folder in variants(lesson=lesson):
        student = lesson.adapter()(InProcessTransport(folder, lesson=lesson), record=True)
        for component, test_id, fn in lesson.hidden_tests:
            student.current_test = f"{component}.{test_id}"
            try:
                fn(student, reference)
            except AssertionError:
                pass
        for call in student.calls:
            expected = reference.call(call.header, call.arrays)
            got = call.result
            if got.error or expected.error:
                continue
            dtype = call.header.get("dtype") or _input_dtype(call.arrays)
            own_kind = own.get(call.header.get("module"))
            for i in range(min(len(got.outputs), len(expected.outputs))):
                a, b = got.array(i), expected.array(i)
                if a is None or b is None or a.shape != b.shape or b.dtype == bool:
                    continue
                kind = f"{own_kind} {b.dtype}" if own_kind else f"outputs {dtype}"
                _note(spread, kind, a, b, f"{folder.name}: {call.result.request}")
            for name in (expected.header.get("grads") or {}):
                a, b = got.grad(name), expected.grad(name)
                if a is not None and b is not None and a.shape == b.shape:
                    _note(spread, f"gradients {dtype}", a, b, f"{folder.name}: {call.result.request}, d/d{name}")
    return spread


def mutant_effect(bug: Bug, *, lesson) -> float:
    """How far a mutant's numbers land from the reference on its named test's calls (same scale as
    measure_spread); 0 when it is caught by an error, a missing gradient, a dtype or forbidden use."""
    reference = lesson.reference
    test = {f"{c}.{t}": fn for c, t, fn in lesson.hidden_tests}[bug.test]
    student = lesson.adapter()(lesson.catalogue.transport(bug.id), record=True)
    try:
        test(student, reference)
    except AssertionError:
        pass
    found: dict = {}
    for call in student.calls:
        expected, got = reference.call(call.header, call.arrays), call.result
        if got.error or expected.error:
            continue
        for i in range(min(len(got.outputs), len(expected.outputs))):
            a, b = got.array(i), expected.array(i)
            if a is not None and b is not None and a.shape == b.shape and b.dtype != bool:
                _note(found, "effect", a, b, "")
    return found.get("effect", (0.0, ""))[0]


def _input_dtype(arrays: dict) -> str:
    floats = [str(a.dtype) for a in arrays.values() if a.dtype.kind == "f"]
    return floats[0] if floats else "float32"


def _note(spread, kind, a, b, where):
    a, b = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(b) & np.isfinite(a)
    if not finite.any():
        return
    scale = max(1.0, float(np.abs(b[finite]).max()))
    value = float(np.abs(a[finite] - b[finite]).max()) / scale
    if value >= spread.get(kind, (-1.0, ""))[0]:
        spread[kind] = (value, where)


def main(*, lesson) -> int:
    import torch

    torch.set_num_threads(1)  # tiny tensors: threads only contend with each other
    start = time.perf_counter()
    full = full_marks(lesson=lesson)
    verdicts = [judge_mutant(bug, full, lesson=lesson) for bug in lesson.catalogue.bugs]
    killed = sum(v.killed for v in verdicts)
    print(f"Bug catalogue: {len(verdicts)} mutants")
    for v in verdicts:
        mark = "killed " if v.killed else "SURVIVED"
        lost = full[v.bug.component] - v.scores[v.bug.component]
        print(f"  {mark} {v.bug.id:28s} {v.bug.component:15s} -{lost:g} pts  {v.reason}")
    folders = variants(lesson=lesson)
    failures = {f.name: false_failures(f, lesson=lesson) for f in folders}
    n_tests = len(lesson.hidden_tests)
    print(f"Correct implementations: {len(folders)}")
    for name, failed in failures.items():
        print(f"  {'full marks' if not failed else 'FALSE FAILURES: ' + ', '.join(failed):s}  {name}")
    total_false = sum(len(f) for f in failures.values())
    print()
    print(f"Kill rate: {killed}/{len(verdicts)} = {100 * killed / max(1, len(verdicts)):.1f}% "
          "(each mutant loses points in its own component only, fails its named test and gets its hint)")
    print(f"False failures: {total_false} of {len(folders) * n_tests} code tests on {len(folders)} correct implementations")
    cases = skeletons(lesson=lesson)
    if cases:
        print(f"Skeletons (the contract's shapes and attributes, no computation): {len(cases)}")
        root = Path(tempfile.mkdtemp(prefix=f"{lesson.name}-skeletons-"))
        try:
            judged = {case: judge_skeleton(case, root, lesson=lesson) for case in cases}
        finally:
            shutil.rmtree(root, ignore_errors=True)
        code = lesson.modules
        every_part = f"all {COUNT_WORDS[len(code)] if len(code) < len(COUNT_WORDS) else len(code)} parts"
        for case, (got, structure, beyond) in judged.items():
            mark = "structure only" if not beyond else "PASSED " + ", ".join(beyond)
            print(f"  {case:20s} {skeleton_part(case, lesson=lesson) or every_part:15s} {got:2g} pts "
                  f"(structure tests: {structure:g})  {mark}")
        leaks = sum(bool(beyond) for _, _, beyond in judged.values())
        print(f"Skeletons scoring beyond structure: {leaks} of {len(cases)} "
              f"(the most a skeleton can score: {sum(structure_points(lesson=lesson).values()):g} of {sum(full.values()):g} code points)")
    else:
        leaks = 0
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0 if killed == len(verdicts) and total_false == 0 and leaks == 0 else 1
