"""What a rerun of `grade` has to do: regrade, rescore from the record, or leave alone.

Each record keeps three digests (`SubmissionResult.digests`):
    submission  the submission's bytes as found (folder tree, .zip or .ipynb)
    inputs      what decides pass or fail: the engine and the lesson's code (hidden tests, adapter,
                catalogue, ...), the reference solutions, the packaging, and the rubric's structure
                (which tests exist) without its points and words
    rubric      the whole rubric file, points and words included

A submission is regraded (its code runs again) when its submission or inputs digest differs from
the current one, or it has no complete record. When only the rubric digest differs, the change is
one of points, titles, hints or policy (`[late]`, `[meta] extra_credit`, which the outputs apply
to the records): the record is rescored from the rubric it was graded with (kept under
OUT/_rubrics/<digest>.toml) without running anything. Standard library only, and no import
of the scorer: the plan is made before the sandbox starts.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from grader.results.storage import hash_files

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "grader"
RUBRIC_SNAPSHOTS = "_rubrics"  # under OUT; "_" keeps it apart from the students' folders
# Rubric keys that hold points or words: changing them rescores, everything else is structure.
WORDING_KEYS = frozenset({"points", "title", "hint", "text", "section", "forbidden_message", "visibility"})
# Rubric tables of policy the outputs apply to the records (grader/judging/totals.py): a change rescores too.
POLICY_TABLES = frozenset({"late"})
POLICY_META = frozenset({"extra_credit"})
SKIP_PARTS = frozenset({"__pycache__", "templates", ".pytest_cache"})


def rubric_path(*, lesson) -> Path:
    """The lesson's rubric (the one the scorer reads)."""
    return lesson.rubric_path


def _structure(node):
    if isinstance(node, dict):
        return {k: _structure(v) for k, v in sorted(node.items()) if k not in WORDING_KEYS}
    if isinstance(node, list):
        return [_structure(v) for v in node]
    return node


def current(*, lesson) -> dict[str, str]:
    """The digests of the grading inputs as they are on disk now (once per process and lesson files)."""
    return _digests(lesson.folder, rubric_path(lesson=lesson), lesson.solutions)


# Keyed by the files it reads (not by a lesson value): every run that grades with the same files on disk
# shares the digests, which read the whole engine. `current.cache_clear()` after editing an input in place.
@functools.lru_cache(maxsize=4)
def _digests(folder: Path, rubric: Path, solutions: Path) -> dict[str, str]:
    inputs = hashlib.sha256(b"grading inputs v1\n")
    engine = [p for p in ENGINE.rglob("*") if p.is_file() and not SKIP_PARTS & set(p.relative_to(ENGINE).parts)
              and p.name != "rubric.toml" and p.suffix not in (".pyc", ".pyo")]
    hash_files(inputs, ROOT, engine)
    if not folder.is_relative_to(ENGINE):  # a lesson found by path: its hidden tests and catalogue
        # Its own rubric.toml is left out as the engine's folders' are: the rubric in use (perhaps an
        # instructor's edited copy elsewhere) is read below, for its structure and for rescoring.
        hash_files(inputs, folder, [p for p in folder.rglob("*") if p.is_file()
                                     and not SKIP_PARTS & set(p.relative_to(folder).parts)
                                     and p != rubric and p.name != "rubric.toml"
                                     and p.suffix not in (".pyc", ".pyo")])
    hash_files(inputs, ROOT if solutions.is_relative_to(ROOT) else solutions,
                [p for p in solutions.rglob("*.py") if "__pycache__" not in p.parts])
    hash_files(inputs, ROOT, [ROOT / "pyproject.toml"])
    text = rubric.read_bytes()
    rubric_data = tomllib.loads(text.decode("utf-8"))
    rubric_data = {k: v for k, v in rubric_data.items() if k not in POLICY_TABLES}
    if isinstance(rubric_data.get("meta"), dict):
        rubric_data["meta"] = {k: v for k, v in rubric_data["meta"].items() if k not in POLICY_META}
    structure = json.dumps(_structure(rubric_data), sort_keys=True)
    inputs.update(structure.encode())
    return {"inputs": inputs.hexdigest(), "rubric": hashlib.sha256(text).hexdigest()}


current.cache_clear = _digests.cache_clear  # after editing an input in place


def submission_digest(source: Path) -> str:
    """The bytes of a submission as found: a file's content, or a folder's tree (names, file
    contents, link targets; nothing followed out of it)."""
    source = Path(source)
    digest = hashlib.sha256()
    if source.is_symlink():
        digest.update(b"link:" + os.readlink(source).encode("utf-8", "surrogateescape"))
    elif source.is_file():
        with open(source, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    elif source.is_dir():
        from grader.intake.submissions import DEFAULT_LIMITS

        for folder, dirs, files in os.walk(source):
            dirs.sort()
            if len(Path(folder).relative_to(source).parts) > DEFAULT_LIMITS.max_depth:
                # Nothing below is graded (the intake skips it), and os.walk recurses once per level.
                dirs.clear()
            for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = Path(folder, name)
                relative = path.relative_to(source).as_posix().encode("utf-8", "surrogateescape")
                digest.update(len(relative).to_bytes(4, "big") + relative)
                if path.is_symlink():
                    digest.update(b"L" + os.readlink(path).encode("utf-8", "surrogateescape"))
                elif path.is_file():
                    with open(path, "rb") as handle:
                        digest.update(b"F" + os.fstat(handle.fileno()).st_size.to_bytes(8, "big"))
                        while chunk := handle.read(1 << 20):
                            digest.update(chunk)
    return digest.hexdigest()


def keep_rubric(out: Path, *, lesson) -> None:
    """Store the rubric this run grades with under OUT, so a later run can rescore from it."""
    folder = Path(out) / RUBRIC_SNAPSHOTS
    target = folder / f"{current(lesson=lesson)['rubric']}.toml"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        from grader.results.storage import write_atomic

        write_atomic(target, rubric_path(lesson=lesson).read_bytes())


@dataclass
class Plan:
    grade: list = field(default_factory=list)  # Submissions whose code runs
    rescore: list = field(default_factory=list)  # names rescored from their records
    unchanged: list = field(default_factory=list)  # names left alone
    reasons: dict = field(default_factory=dict)  # reason -> names, for the run's first lines

    def because(self, reason: str, name: str) -> None:
        self.reasons.setdefault(reason, []).append(name)


def is_complete(folder: Path, *, source: str | None = None) -> bool:
    """A submission counts as graded when its record.json (written last, atomically) parses, and
    it was graded from `source` (a row name that passed to another entry is graded again)."""
    try:
        data = json.loads((folder / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or source is not None and data.get("source", "") not in ("", source):
        return False
    # An engine fault is ours, not the student's: such a row is graded again. The student's files are
    # not asked for: the class stage writes them from the record (any missing one) on every run.
    return data.get("submission") == folder.name and data.get("status") != "engine-error"


def plan(subs, out: Path, *, lesson, force: bool = False, only=None) -> Plan:
    """Sort `subs` into grade / rescore / unchanged. `only` (names) regrades those and touches
    nothing else; `force` regrades all."""
    from grader.intake.submissions import source_label

    now = current(lesson=lesson)
    result = Plan()
    for sub in subs:
        if only is not None:
            if sub.name in only:
                result.grade.append(sub)
                result.because("named with --only", sub.name)
            else:
                result.unchanged.append(sub.name)
            continue
        if force:
            result.grade.append(sub)
            result.because("--force", sub.name)
            continue
        if not is_complete(Path(out) / sub.name, source=source_label(sub)):
            result.grade.append(sub)
            result.because("not graded yet", sub.name)
            continue
        try:
            digests = json.loads((Path(out) / sub.name / "record.json").read_text("utf-8")).get("digests") or {}
        except (OSError, ValueError):
            digests = {}
        if digests.get("submission") != submission_digest(sub.source):
            result.grade.append(sub)
            result.because("the submission changed", sub.name)
        elif digests.get("inputs") != now["inputs"]:
            result.grade.append(sub)
            result.because("the grading code, tests, reference or rubric structure changed", sub.name)
        elif digests.get("rubric") != now["rubric"]:
            if (Path(out) / RUBRIC_SNAPSHOTS / f"{digests.get('rubric')}.toml").is_file():
                result.rescore.append(sub.name)
            else:
                result.grade.append(sub)
                result.because("the rubric changed and the one it was graded with is gone", sub.name)
        else:
            result.unchanged.append(sub.name)
    return result


def describe(p: Plan) -> list[str]:
    """One line per reason, naming the submissions (the first few of a long list)."""
    def names(items: list[str]) -> str:
        return ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")

    lines = [f"regrade {len(who)} ({reason}): {names(who)}" for reason, who in p.reasons.items()]
    if p.rescore:
        lines.append(f"rescore {len(p.rescore)} from their records (rubric points, words or policy changed): "
                     f"{names(p.rescore)}")
    return lines


# ---------------------------------------------------------------- rescoring


def _entry(rubric: dict, test_name: str) -> dict | None:
    component, _, test = test_name.partition(".")
    entry = rubric.get(component, {}).get(test)
    return entry if isinstance(entry, dict) else None


def rescore(result, old_rubric: dict, new_rubric: dict) -> bool:
    """Points and titles of `result`'s tests from `new_rubric`, in place; pass or fail stays as graded.
    A test's words are not in its record (grader/results/feedback.py chooses them from the rubric when
    the files are written), so nothing here edits text. Returns False when a test has no entry in one of
    the rubrics (a structure change: the submission must be regraded instead)."""
    if any(_entry(rubric, test.name) is None for test in result.tests for rubric in (old_rubric, new_rubric)):
        return False
    for test in result.tests:
        new = _entry(new_rubric, test.name)
        test.max_score = float(new.get("points", 0))
        test.score = test.max_score if test.status == "passed" else 0.0
        test.title = new.get("title", test.title)
    return True


def rescore_records(out: Path, names: list[str], *, lesson) -> list[str]:
    """Rescore each named record in place and rewrite its files; returns the names that could not
    be rescored (to be regraded)."""
    from grader.results import feedback
    from grader.results import storage

    new_rubric = tomllib.loads(rubric_path(lesson=lesson).read_text("utf-8"))
    failed = []
    for name in names:
        record_path = Path(out) / name / "record.json"
        try:
            result = storage.record_from_json(json.loads(record_path.read_text("utf-8")))
            old_file = Path(out) / RUBRIC_SNAPSHOTS / f"{result.digests.get('rubric')}.toml"
            old_rubric = tomllib.loads(old_file.read_text("utf-8"))
        except (OSError, ValueError, TypeError):
            failed.append(name)
            continue
        if not rescore(result, old_rubric, new_rubric):
            failed.append(name)
            continue
        result.digests = {**result.digests, "rubric": current(lesson=lesson)["rubric"]}
        feedback.keep_record(Path(out), result)  # the class stage writes the student's files, once
    return failed
