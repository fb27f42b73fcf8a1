"""`grader merge`: the --out folders of several `grade --shard K/N` runs joined into one, then the
class files written once over all of them (grader/results/classreport.py).

Only complete submission folders (a record.json, grader/results/storage.py) are copied, each through a
staging folder and one os.replace, so a merge interrupted half-way leaves whole folders only.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grader.admin import overrides
from grader.intake import roster
from grader.lesson import OUT_LESSON_FILE
from grader.results.classreport import isolation_warnings, write_class
from grader.results.feedback import DEFAULT_RELEASE
from grader.results.storage import load_records


def merge(*, shards: list[str], out: str, lesson, overrides_path: str | None = None,
          release: str = DEFAULT_RELEASE) -> int:
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
    kept = _class_inputs([Path(shard) for shard in shards], out_dir)
    if isinstance(kept, str):
        print(f"merge: {kept}", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in kept.items():
        (out_dir / name).write_bytes(data)
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
        write_class(out_dir, overrides_path, release, lesson=lesson)
    except overrides.OverrideError as error:
        print(f"merge: {error}", file=sys.stderr)
        return 2
    print(f"merge: {len(sources)} submissions from {len(shards)} shards -> {out_dir}/grades.csv, "
          f"{out_dir}/report.html")
    for warning in isolation_warnings(load_records(out_dir)[0]):
        print(f"merge: WARNING: {warning}", file=sys.stderr)
    for d in duplicates:
        print(f"merge: duplicate kept once: {d}", file=sys.stderr)
    if incomplete:
        print("merge: not graded yet (no record.json), missing from the gradebook:\n  " + "\n  ".join(incomplete)
              + "\nRe-run those shards; grading resumes where it stopped.", file=sys.stderr)
        return 1
    return 0


# What a shard's folder holds of the class beside its rows, and the merged folder keeps: the roster it was graded
# with (a row per student in grades.csv) and the lesson its records are of.
CLASS_INPUTS = (roster.FILE, OUT_LESSON_FILE)


def _class_inputs(shards: list[Path], out_dir: Path) -> dict[str, bytes] | str:
    """{file name: bytes} of each of CLASS_INPUTS the shards hold, for the merged folder, or why they cannot be
    merged (two shards with different ones). The merged folder's own file is kept when it has one."""
    kept = {}
    for name in CLASS_INPUTS:
        found = {shard: (shard / name).read_bytes() for shard in shards if (shard / name).is_file()}
        if len(set(found.values())) > 1:
            return (f"the shards hold different {name} files ({', '.join(str(s) for s in found)}): grade every shard "
                    f"with the same one, or put the one to use in {out_dir / name}")
        if found and not (out_dir / name).is_file():
            kept[name] = next(iter(found.values()))
    return kept


def _same_record(a: Path, b: Path) -> bool:
    try:
        left, right = json.loads(a.read_text("utf-8")), json.loads(b.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    for data in (left, right):
        data.pop("execution_time", None)
    return left == right
