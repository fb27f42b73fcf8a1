"""Files under OUT that other stages read back: written atomically, records as deterministic JSON.

Every file is written atomically (temp file in the same folder, then os.replace). A submission's
folder gets its record.json last: a folder with a record.json is complete, which is what resume
and `merge` rely on. The same record always gives the same bytes (sorted keys, fixed rounding);
only `execution_time` may differ between two gradings of one submission.

A submission name is student-derived: it becomes a folder under OUT only through `check_name`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

from grader.results.records import SubmissionResult, TestResult

RECORD_VERSION = 1
DIGITS = 4  # rounding of every score and evidence value written
PLOTS = "_plots"  # intake never names a submission with a leading "_", so no student folder can clash
# Every file a run writes beside the row folders: intake never gives a row one of these names.
CLASS_FILES = ("grades.csv", "summary.md", "report.html", "similarity.csv", "similarity.html", "overrides.csv",
               "comments.csv", "regrade_requests.csv", "roster.csv",
               PLOTS)


def hash_files(digest, root: Path, files) -> None:
    """Feed `files` (paths under `root`) into `digest`: each one's name relative to `root` and its bytes,
    length-prefixed, in name order (the regrade digests, a cached collection's key)."""
    for path in sorted(files):
        relative = path.relative_to(root).as_posix()
        digest.update(f"{len(relative)}:{relative}".encode())
        data = path.read_bytes()
        digest.update(f"{len(data)}:".encode() + data)


def write_atomic(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write `path` so that readers see the old file or the new one, never a part.

    The temp file lives in the same folder (os.replace is only atomic within one file
    system) and starts with a dot, so nothing that globs for outputs ever picks it up.
    `durable=False` leaves out the fsync before the rename, for files the caller makes durable
    together afterwards (sync_folder): after a power cut before that, such a file may be empty,
    never a part of another; a process killed at any point still leaves the old file or the new one.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Covers KeyboardInterrupt too; only kill -9 can leave a dot-temp behind, and readers ignore those.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sync_folder(folder: Path) -> None:
    """Everything written under `folder` on disk: one syncfs of its file system (os.sync where the C
    library has none), for the files written with write_atomic(durable=False) before it."""
    import ctypes

    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    fd = os.open(folder, os.O_RDONLY)
    try:
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def dumps(obj) -> str:
    """Deterministic JSON: sorted keys, fixed rounding, one trailing newline."""
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


def check_name(name: str) -> str:
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
    for applied in ("line_comments", "requests"):  # read from OUT's files on every run, like overrides
        data.pop(applied, None)
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


def write_record(folder: Path, result: SubmissionResult) -> None:
    """record.json, written last in a submission's folder: its presence marks the folder complete."""
    write_atomic(Path(folder) / "record.json", dumps(record_to_json(result)))


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
