"""Stage "collect": fetch every student repository as it stood at the deadline.

    python -m grader collect ROSTER --out submissions [--deadline 2026-12-01T23:59:00+00:00]

ROSTER is either
- a text file, one repository per line: a git URL or a local path, optionally preceded by the
  row name (`alice https://github.com/course/attention-alice.git`) and optionally followed by the
  student's own deadline (an extension); `#` starts a comment; or
- a GitHub Classroom grades export (.csv): the repository comes from `student_repository_url`,
  the row name from `github_username` (or `roster_identifier`, `student_repository_name`), a push
  time from `submission_timestamp`, an extension from `deadline`.

With a late policy in the rubric (grader/judging/late.py), commits are taken up to the policy's last day
after each deadline, and each row's lateness is recorded in collected.csv.

For each repository, a bare clone is kept in <out>/.repos/<name>.git and fetched again on the next
run (real git, so any URL git can read works, with the instructor's own credentials). The commit
taken is the last one on the default branch's first-parent line whose committer date is before the
deadline (the newest one without --deadline). Its files (no .git, no symlinks) become <out>/<name>/,
which `python -m grader grade <out>` grades like any folder; each notebook there carries the time of
the last commit that changed it, so that the grader, which grades the most recently changed of
several edited notebooks (grader/intake/submissions.py), knows which that is. <out>/collected.csv records, per
row, the source, the commit hash and time, and the status.

Committer dates are written by the student's machine, so a student could backdate a late commit.
When that matters, compare with GitHub's push times (the Classroom export's submission_timestamp).

A repository is student data: its tree is walked folder by folder and its files streamed to disk, and a
repository over a cap (files, bytes, folder depth; see MAX_*) is reported and left out while the
others are collected, so a few kilobytes of repeated tree references cannot make collect expand
billions of files. collect needs the standard library and git only (the instructor workflow runs it
on a bare Python), and a collection that stopped half-way can be run again into the same folder.
"""
from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.judging import late
from grader.lesson import read_rubric

NAME_COLUMNS = ("github_username", "roster_identifier", "student_repository_name", "name", "login")
URL_COLUMNS = ("student_repository_url", "repository_url", "repository", "url", "repo")
MANIFEST = "collected.csv"
CACHE = ".repos"
GIT_TIMEOUT = 300  # seconds per git command
MAX_FILE_BYTES = 20 << 20  # the grader refuses bigger files anyway; don't write them
# One student's snapshot. A Day-13 repository holds a few dozen files and a few MB; these leave
# room for datasets and images while keeping a hostile repository from filling the disk or memory.
MAX_ENTRIES = 20_000  # files and folders
MAX_TOTAL_BYTES = 500 << 20  # of file content written
MAX_DEPTH = 32  # folder levels
CHUNK = 1 << 20  # bytes copied at a time


class OverCap(RuntimeError):
    """A repository over one of the snapshot caps; the message says which."""


class RosterError(ValueError):
    """A roster that can't be read; the message names the line and what to write instead."""


@dataclass
class Entry:
    name: str
    source: str
    commit: str = ""
    committed: str = ""
    status: str = "pending"
    deadline: str = ""  # this student's own (an extension), else the command's
    pushed: str = ""  # push time from the roster (a Classroom export's submission_timestamp)
    late_days: str = ""  # with a late policy only
    late_basis: str = ""
    handed_in: str = ""  # the time lateness was measured from (push or commit), ISO: a partner's own deadline needs it


# --------------------------------------------------------------------------- roster

def _row_name(raw: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw.strip()).strip(".-_")
    return name or "student"


def _default_name(source: str) -> str:
    last = source.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return last[:-4] if last.endswith(".git") else last


def _roster_time(path: Path, number: int, text: str) -> str:
    """A deadline written in the roster (an extension), in the form git reads."""
    if not (text or "").strip():
        return ""
    try:
        return parse_deadline(text)
    except ValueError:
        raise RosterError(f"{path}:{number}: the deadline {text.strip()!r} is not an ISO time; "
                          "write e.g. 2026-12-03T23:59:00+00:00") from None


def read_roster(path: Path) -> list[Entry]:
    """The roster's entries with unique, safe row names, in roster order."""
    text = path.read_text(encoding="utf-8-sig")
    first = next((line for line in text.splitlines() if line.strip()), "")
    header = [c.strip().lower() for c in next(csv.reader([first]))] if first else []
    entries = []
    if path.suffix.lower() == ".csv" or (set(header) & set(URL_COLUMNS) and "," in first):
        rows = list(csv.DictReader(io.StringIO(text)))
        columns = {c.strip().lower(): c for c in (rows[0].keys() if rows else header)}
        url_col = next((columns[c] for c in URL_COLUMNS if c in columns), None)
        if url_col is None:
            raise RosterError(f"{path}: no repository column; a GitHub Classroom export has "
                              f"'student_repository_url' (found: {', '.join(columns) or 'nothing'})")
        name_cols = [columns[c] for c in NAME_COLUMNS if c in columns]
        for number, row in enumerate(rows, start=2):
            source = (row.get(url_col) or "").strip()
            name = next((row[c].strip() for c in name_cols if (row.get(c) or "").strip()), "")
            if not source:
                entries.append(Entry(_row_name(name or f"row-{number}"), "", status="no repository (not accepted?)"))
                continue
            entries.append(Entry(_row_name(name or _default_name(source)), source,
                                 deadline=_roster_time(path, number, row.get(columns.get("deadline", ""), "")),
                                 pushed=(row.get(columns.get("submission_timestamp", ""), "") or "").strip()))
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) > 3:
                raise RosterError(f"{path}:{number}: expected 'URL', 'NAME URL' or 'NAME URL DEADLINE', "
                                  f"got {line.strip()!r}")
            deadline = _roster_time(path, number, words.pop()) if len(words) == 3 else ""
            name, source = (words if len(words) == 2 else (_default_name(words[0]), words[0]))
            entries.append(Entry(_row_name(name), source, deadline=deadline))
    seen: dict[str, int] = {}
    for entry in entries:
        base = entry.name
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:
            entry.name = f"{base}-{seen[base]}"
    return entries


# --------------------------------------------------------------------------- git

def _env() -> dict[str, str]:
    # Never wait for a password on a terminal; the instructor's own git config and credentials apply.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _git(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, env=_env())
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(message[-1] if message else f"git {args[0]} failed ({result.returncode})")
    return result.stdout.decode("utf-8", "replace")


def _fetch(source: str, cache: Path) -> None:
    """Clone once (bare), then fetch every branch again on later runs."""
    if (cache / "HEAD").exists():
        _git("--git-dir", str(cache), "fetch", "--quiet", "--prune", "origin", "+refs/heads/*:refs/heads/*")
        # The default branch may have changed upstream; follow it.
        try:
            head = _git("--git-dir", str(cache), "ls-remote", "--symref", "origin", "HEAD")
            match = re.search(r"^ref: (refs/heads/\S+)\s+HEAD", head, re.M)
            if match:
                _git("--git-dir", str(cache), "symbolic-ref", "HEAD", match.group(1))
        except RuntimeError:
            pass
    else:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _git("clone", "--quiet", "--bare", "--no-tags", "--", source, str(tmp))
        tmp.rename(cache)


def _commit_at(cache: Path, deadline: str | None) -> tuple[str, str] | None:
    """The commit to take and its committer time, in one `rev-list` that never diffs: `git show`
    compares a root commit with the empty tree, which on a tree of repeated subtrees never ends."""
    args = ["--git-dir", str(cache), "rev-list", "-1", "--first-parent", "--format=%cI"]
    if deadline:
        args.append(f"--before={deadline}")
    try:
        lines = _git(*args, "HEAD", "--").split()
    except RuntimeError:
        return None  # an empty repository has no HEAD commit
    if len(lines) != 3 or lines[0] != "commit":
        return None
    return lines[1], lines[2]


class _Objects:
    """One `git cat-file --batch-command` for a whole snapshot: an object's type and size are asked
    first, and its bytes read only when they are under the cap, a chunk at a time."""

    def __init__(self, cache: Path):
        self.process = subprocess.Popen(["git", "--git-dir", str(cache), "cat-file", "--batch-command"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=_env())

    def _ask(self, command: str, oid: str) -> tuple[str, int]:
        self.process.stdin.write(f"{command} {oid}\n".encode())
        self.process.stdin.flush()
        words = self.process.stdout.readline().decode("ascii", "replace").split()
        if len(words) != 3 or not words[2].isdigit():
            raise OverCap(f"an object git cannot read ({oid})")
        return words[1], int(words[2])

    def info(self, oid: str) -> tuple[str, int]:
        return self._ask("info", oid)

    def read(self, oid: str, sink=None) -> bytes:
        """The object's bytes, returned (small trees) or written to `sink` (files)."""
        _, size = self._ask("contents", oid)
        parts, left = [], size
        while left:
            chunk = self.process.stdout.read(min(CHUNK, left))
            if not chunk:
                raise OverCap(f"git stopped while sending {oid}")
            left -= len(chunk)
            if sink is None:
                parts.append(chunk)
            else:
                sink.write(chunk)
        self.process.stdout.read(1)  # the newline after the contents
        return b"".join(parts)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def _tree_entries(raw: bytes, oid_bytes: int):
    """(mode, name, hex oid) of a raw tree object: `<mode> <name>\\0<oid>` repeated."""
    at = 0
    while at < len(raw):
        space = raw.index(b" ", at)
        nul = raw.index(b"\0", space)
        yield raw[at:space].decode("ascii"), raw[space + 1:nul], raw[nul + 1:nul + 1 + oid_bytes].hex()
        at = nul + 1 + oid_bytes


def _export(cache: Path, commit: str, target: Path) -> list[str]:
    """Write the commit's regular files into `target` (replaced whole); returns what was skipped.

    The tree is walked by hand, folder by folder, counting as it goes: `git archive` (and `git
    show`) would first walk a tree of repeated subtrees to its end, which never comes. The plan
    (paths and object ids, MAX_ENTRIES at most) is complete and within every cap before a file is
    written; file bytes are streamed to disk. The snapshot is built beside `target` and only
    replaces it once complete."""
    objects = _Objects(cache)
    try:
        files, skipped = _plan(objects, _git("--git-dir", str(cache), "rev-parse", f"{commit}^{{tree}}").strip())
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            for relative, oid in files:
                path = tmp.joinpath(*relative)
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as handle:
                    objects.read(oid, handle)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        objects.close()
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return skipped


def _plan(objects: _Objects, root: str) -> tuple[list[tuple[tuple[str, ...], str]], list[str]]:
    """The files to write as (path parts, blob id), and what is skipped; OverCap past a cap."""
    files: list[tuple[tuple[str, ...], str]] = []
    skipped: list[str] = []
    entries = written = 0
    pending = [((), root)]
    while pending:
        folder, oid = pending.pop()
        kind, size = objects.info(oid)
        if kind != "tree" or size > MAX_FILE_BYTES:
            raise OverCap(f"a folder git cannot list ({'/'.join(folder) or 'top'})")
        for mode, raw_name, child in _tree_entries(objects.read(oid), len(oid) // 2):
            entries += 1
            if entries > MAX_ENTRIES:
                raise OverCap(f"more than {MAX_ENTRIES} files and folders")
            name = raw_name.decode("utf-8", "replace")
            shown = "/".join((*folder, name))
            if name in ("", ".", "..") or name.lower() == ".git" or "/" in name or "\0" in name:
                skipped.append(f"{shown} (a name no folder may hold)")
            elif mode == "40000":
                if len(folder) + 1 > MAX_DEPTH:
                    raise OverCap(f"folders more than {MAX_DEPTH} levels deep ({shown[:80]}...)")
                pending.append(((*folder, name), child))
            elif mode not in ("100644", "100755"):
                skipped.append(f"{shown} (not a regular file)")
            else:
                _, size = objects.info(child)
                if size > MAX_FILE_BYTES:
                    skipped.append(f"{shown} ({size} bytes, over the cap)")
                    continue
                written += size
                if written > MAX_TOTAL_BYTES:
                    raise OverCap(f"more than {MAX_TOTAL_BYTES >> 20} MB of files")
                files.append(((*folder, name), child))
    return sorted(files), skipped


# --------------------------------------------------------------------------- entry

def parse_deadline(deadline: str) -> str:
    """ISO 8601; no time zone means UTC. Returned in the form git reads unambiguously."""
    try:
        when = datetime.fromisoformat(deadline.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--deadline {deadline!r} is not an ISO time; write e.g. 2026-12-01T23:59:00+00:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.isoformat()


def collect_one(entry: Entry, out: Path, deadline: str | None, policy: late.Policy | None = None) -> Entry:
    if not entry.source:
        return entry
    deadline = entry.deadline or deadline
    entry.deadline = deadline or ""
    due = late.parse_time(deadline) if deadline else None
    if due is not None and policy is not None:
        deadline = (due + policy.last_day).isoformat()  # late work is taken up to the policy's last day
    cache = out / CACHE / f"{entry.name}.git"
    try:
        _fetch(entry.source, cache)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        entry.status = f"error: {error}"
        return entry
    found = _commit_at(cache, deadline)
    if found is None:
        entry.status = "no commit before the deadline" if deadline else "empty repository"
        shutil.rmtree(out / entry.name, ignore_errors=True)  # don't grade an older snapshot
        return entry
    entry.commit, entry.committed = found
    if due is not None and policy is not None:
        pushed = late.parse_time(entry.pushed)
        committed = late.parse_time(entry.committed)
        if pushed is not None and pushed <= due + policy.last_day:
            entry.late_days, entry.late_basis = str(late.late_days(due, pushed, policy)), "push time"
            entry.handed_in = pushed.isoformat()
        elif committed is not None:
            # The commit time was written by the student's machine; said so wherever it is shown.
            entry.late_days, entry.late_basis = str(late.late_days(due, committed, policy)), \
                "commit time (written by the student's machine)"
            entry.handed_in = committed.isoformat()
    try:
        skipped = _export(cache, entry.commit, out / entry.name)
    except (OverCap, ValueError) as error:  # ValueError: a tree object that does not parse
        entry.status = f"error: skipped, the repository has {error}" if isinstance(error, OverCap) \
            else f"error: skipped, git gave a folder listing that does not parse ({error})"
        shutil.rmtree(out / entry.name, ignore_errors=True)  # never grade a partial or older snapshot
        return entry
    _date_notebooks(cache, entry.commit, out / entry.name)
    entry.status = "ok" + (f"; skipped {len(skipped)}: {', '.join(skipped[:3])}" if skipped else "")
    return entry


def _date_notebooks(cache: Path, commit: str, folder: Path) -> None:
    """Give each notebook at the top of a snapshot the time of the last commit that changed it.

    Every file of a snapshot is written now, so its own time says nothing; the grader grades, of
    several edited notebooks, the most recently changed one (grader/intake/submissions.py), and the history is
    what knows which that is."""
    for path in sorted(folder.glob("*.ipynb")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            when = _git("--literal-pathspecs", "--git-dir", str(cache), "log", "-1", "--format=%ct", commit, "--",
                        path.name).strip()  # a student's file name is a path, never a pattern
            os.utime(path, (int(when), int(when)))
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError):
            continue  # no date: the notebook keeps the time it was written


def write_manifest(out: Path, entries: list[Entry]) -> Path:
    path = out / MANIFEST
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["name", "source", "commit", "committed", "status", "deadline", "late_days", "late_basis",
                         "handed_in"])
        for entry in sorted(entries, key=lambda e: e.name):
            writer.writerow([entry.name, entry.source, entry.commit, entry.committed, entry.status, entry.deadline,
                             entry.late_days, entry.late_basis, entry.handed_in])
    tmp.replace(path)
    return path


def _late_policy(rubric: Path):
    """The rubric's late policy, or None when it has none or cannot be read (then nothing is late)."""
    try:
        table = read_rubric(rubric)
    except (OSError, ValueError):
        return None
    return late.policy_of(table, rubric)


def main(*, roster: str, out: str, lesson, deadline: str | None = None, rubric: str | None = None) -> int:
    """Collect every roster entry into `out`. Exit 0 when every repository could be read, 1 when one
    could not (the others are collected all the same), 2 for a bad roster or deadline. The late policy
    is `lesson`'s rubric's (or that of the rubric file `rubric`)."""
    try:
        entries = read_roster(Path(roster))
        when = parse_deadline(deadline) if deadline else None
        policy = _late_policy(Path(rubric) if rubric else lesson.rubric_path)
    except (OSError, RosterError, ValueError) as error:
        print(f"collect: {error}", file=sys.stderr)
        return 2
    target = Path(out)
    if target.is_dir() and any(target.iterdir()) and not (target / MANIFEST).is_file():
        # Snapshots replace folders by name: never do that in a folder a collection did not make.
        print(f"collect: {target} holds files but no {MANIFEST}; collect into a new or empty folder",
              file=sys.stderr)
        return 2
    target.mkdir(parents=True, exist_ok=True)
    # The manifest comes first: a run stopped half-way leaves a folder that a rerun recognises as its own.
    write_manifest(target, entries)
    for entry in entries:
        try:
            collect_one(entry, target, when, policy)
        except Exception as error:  # one repository's surprise never stops the others
            entry.status = f"error: {type(error).__name__}: {error}"
            traceback.print_exc(limit=-2, file=sys.stderr)
        write_manifest(target, entries)
        shown = entry.commit[:12] if entry.commit else "-"
        print(f"{entry.name:<24} {shown:<12} {entry.committed or '':<25} {entry.status}")
    manifest = write_manifest(target, entries)
    failed = [e for e in entries if e.status.startswith("error")]
    ok = sum(e.status.startswith("ok") for e in entries)
    print(f"{ok} of {len(entries)} collected into {target}/ (commits in {manifest})"
          + (f"; {len(failed)} could not be read" if failed else ""))
    return 1 if failed else 0
