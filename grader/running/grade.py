"""`python -m grader grade SUBMISSIONS --out OUT`: grade a class, in parallel, resumable.

Order matters for secrecy: the sandbox's zygote starts before this process imports anything
that knows an answer (grader.judging.score pulls in the reference, the rubric and the bug catalogue).
The zygote is a fresh interpreter in any case, so it never holds what this process loads later.

Per submission: a scratch copy (intake), one sandboxed transport, the hidden tests (score), the
result files (report). A submission that hangs, crashes or cheats gets a result stating why; it
never stops the batch or changes another submission's result. A rerun grades what changed and
nothing else (grader/admin/regrade.py): a submission without a complete record (resume after kill -9),
or whose content or grading inputs changed since its record; a change of rubric points or words
alone is rescored from the records. --force regrades all, --only NAME... those named. The class
files are rewritten at the end of every run.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import multiprocessing
import os
import queue
import re
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from grader.admin import regrade
from grader.intake import submissions as intake
from grader.judging import integrity
from grader.results.document import number
from grader.lesson import OUT_LESSON_FILE, lesson_of_output
from grader.results.records import SubmissionResult
from grader.running import run_seed
from grader.running.deliverables_process import LimitedChecker
from grader.sandbox import DEFAULT_CONFIG, SandboxConfig
from grader.sandbox.confinement import enterable_temp_dir, is_root, mount_quota, remove_tree, unmount_quota
from grader.sandbox.startup import skip_absent_device_seed_stacks
from grader.sandbox.transport import SandboxTransport, without_paths
from grader.sandbox.zygote import KeptZygotes, SandboxRefused, SandboxUnavailable, Zygote

EXIT_OK, EXIT_ENGINE_FAULT, EXIT_USAGE = 0, 1, 2


class UsageError(ValueError):
    pass


def _take_roster(out: Path, roster: str | None) -> None:
    """Read the roster before anything is graded (a bad one stops the run at once, saying which line),
    and keep it in OUT as roster.csv, where grades.csv, the report, similarity and export read it."""
    from grader.intake import roster as people
    from grader.results.storage import write_atomic

    if roster is None:
        if (out / people.FILE).is_file():
            people.read(out / people.FILE)
        return
    people.read(Path(roster))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / people.FILE, Path(roster).read_bytes())


def main(*, submissions, out, jobs=None, force=False, only=None, shard=None, overrides=None,
         release="after_due_date", config: SandboxConfig | None = None, roster=None, lesson, seed=None,
         zygotes: KeptZygotes | None = None, class_stage: bool = True) -> int:
    """Grade every submission under `submissions` into `out`. Returns 0, 1 (engine fault) or 2 (usage).

    `lesson`: the lesson value (grader.lesson.load_lesson), handed to every stage. `config` exists for
    the engine's own tests (short limits); the command line uses the defaults. `seed` pins the run's seed
    (grader/running/run_seed.py); by default the one kept in `out`, or a new one. `zygotes`: where a caller
    that runs many small runs in one process (the nbgrader step) keeps the sandbox's zygote between them.
    `class_stage=False` writes each row's record and feedback and nothing of the class (no gradebook, report,
    similarity or kept rubric): for a caller that reads one record and throws the folder away.
    """
    try:
        shard_k, shard_n = parse_shard(shard)
        jobs = parse_jobs(jobs)
        subs = intake.discover(Path(submissions))
    except (UsageError, OSError) as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(out)
    stray = intake.not_taken(Path(submissions))
    if not subs:
        looks = (f"; its files ({', '.join(stray[:5])}) look like one student's work: pass the folder that holds "
                 "every student's folder" if any(name.endswith(".py") for name in stray) else "")
        print(f"grade: found no submission in {submissions}: a submission is a sub-folder, a .zip or a .ipynb{looks}",
              file=sys.stderr)
        return EXIT_USAGE
    if stray:
        print(f"grade: not graded, as no submission is in this form (a folder, .zip or .ipynb is): "
              f"{', '.join(stray[:10])}{' ...' if len(stray) > 10 else ''}", flush=True)
    if problem := _misplaced_out(Path(submissions), out, subs) or _other_lesson(out, lesson):
        print(f"grade: {problem}", file=sys.stderr)
        return EXIT_USAGE
    # An output folder inside the submissions folder is not a student.
    subs = [s for s in subs if not _contains(s.source, out)]
    for moved in retire_moved_rows(out, subs):
        print(f"grade: {moved}", flush=True)
    if stale := _rows_without_a_submission(out, subs):
        print(f"grade: {len(stale)} row(s) of {out} match no submission in {submissions} and stay in the gradebook: "
              f"{', '.join(stale[:10])}{' ...' if len(stale) > 10 else ''} (delete {out}/<name> to drop one)", flush=True)
    overrides_path = Path(overrides) if overrides else out / "overrides.csv"
    try:
        # Checked before anything is graded: a typo in a name should not wait for the whole class.
        from grader.admin import overrides as decisions
        from grader.results.storage import load_records

        records = _with_rubric_maxima(load_records(out)[0] if out.is_dir() else [], lesson)
        decisions.check(decisions.read(overrides_path), records, path=overrides_path, submissions={s.name for s in subs})
        # A row written without a version is one made on the version graded now, before this run grades again.
        decisions.stamp_versions(overrides_path, {r.submission: digest for r in records
                                                  if isinstance(digest := (r.digests or {}).get("submission"), str)})
    except (decisions.OverrideError, OSError) as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        _take_roster(out, roster)
        # After the roster is taken: a request may name a student by their roster identity.
        _check_requests_and_comments(out, records, subs, lesson)
    except (ValueError, OSError) as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return EXIT_USAGE
    elsewhere = frozenset(s.name for i, s in enumerate(subs) if i % shard_n != shard_k - 1)  # other shards' rows
    subs = [s for i, s in enumerate(subs) if i % shard_n == shard_k - 1]
    if only:
        unknown = sorted(set(only) - {s.name for s in subs})
        if unknown:
            print(f"grade: --only names no submission{'' if shard_n == 1 else ' of this shard'}: "
                  f"{', '.join(unknown)}; the names are the rows of grades.csv", file=sys.stderr)
            return EXIT_USAGE
    try:
        seed, reseeded = run_seed.choose(out, seed)
        if reseeded and only:
            raise run_seed.SeedError(f"--seed {seed} is not the seed {out} was graded with: grade the whole "
                                     "folder with it (without --only), or leave --seed out")
        # Records graded with another seed's probes are graded again, so the folder is one run's.
        work = regrade.plan(subs, out, lesson=lesson, force=force or reseeded, only=set(only) if only else None)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    _mark_lesson(out, lesson)
    if is_root():
        os.chmod(out, 0o700)  # the sandbox uids must not read other students' results
    run_seed.keep(out, seed)
    where = f"shard {shard_k}/{shard_n}: " if shard_n > 1 else ""
    if work.rescore:
        # Points or words of the rubric changed, nothing else: no student code needs to run.
        again = set(regrade.rescore_records(out, work.rescore, lesson=lesson))
        work.rescore = [n for n in work.rescore if n not in again]
        for sub in subs:
            if sub.name in again:
                work.grade.append(sub)
                work.because("its record could not be rescored", sub.name)
    todo = work.grade
    previous = _previous_versions(out, todo)
    if reseeded:
        print(f"{where}the seed of the hidden tests' probes is not the one {out} was graded with: every "
              "submission is graded again with it", flush=True)
    # With --only the others are not looked at (held-out s61: a changed one was said to be "unchanged").
    left = (f"{len(work.unchanged)} not named with --only, left as they are (run without --only to regrade what "
            "changed)" if only else f"{len(work.unchanged)} already graded and unchanged")
    print(f"{where}{len(subs)} submission(s) in {submissions}; {left}; {len(todo)} to grade with {jobs} job(s)",
          flush=True)
    for line in regrade.describe(work):
        print(f"  {line}", flush=True)

    from grader.judging import late

    # Lateness first: the progress line of each row already says its final total (grader/judging/totals.py).
    late.write_lateness(out, Path(submissions) / "collected.csv", {s.name for s in subs})
    faults: list[str] = []
    if todo:
        config = config or DEFAULT_CONFIG
        # Started first: nothing secret has been imported by this process yet.
        slots = min(jobs, len(todo))
        zygote = (zygotes.take(slots=slots, config=config, lesson=lesson) if zygotes is not None
                  else Zygote(slots=slots, config=config, lesson=lesson))
        healthy = False
        try:
            faults = _grade_all(todo, out=out, zygote=zygote, config=config, jobs=slots,
                                final=_final_totals(out, overrides_path, lesson), lesson=lesson)
            healthy = not faults
        except SandboxRefused as exc:
            print(f"grade: {exc}", file=sys.stderr)
            return EXIT_ENGINE_FAULT
        finally:
            if zygotes is None:
                zygote.close()
            else:
                zygotes.give_back(zygote, healthy=healthy)
    from grader.results import classreport

    if class_stage:
        if shard_n == 1:
            _similarity(subs, out, jobs, lesson)
        regrade.keep_rubric(out, lesson=lesson)
        try:
            classreport.write_class(out, overrides_path, release, lesson=lesson, elsewhere=elsewhere)
        except decisions.OverrideError as exc:
            print(f"grade: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if earlier := _decisions_on_earlier_versions(out, overrides_path, previous):
            print(f"grade: {earlier}", flush=True)
        for line in _roster_warnings(out):
            print(f"grade: roster: {line}", flush=True)
    # The same engine fault on every row (e.g. a sandbox that cannot start) is said once.
    causes: dict[str, list[str]] = {}
    for fault in faults:
        name, _, cause = fault.partition(": ")
        causes.setdefault(cause, []).append(name)
    for cause, names in causes.items():
        who = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        print(f"engine fault ({who}): {cause}; run the same command again to regrade them", file=sys.stderr)
    if class_stage:
        print(f"results: {out / 'grades.csv'}, {out / 'report.html'}, {out / 'summary.md'}; "
              f"per submission: {out}/<name>/feedback.md", flush=True)
    return EXIT_ENGINE_FAULT if faults else EXIT_OK


def _with_rubric_maxima(records, lesson):
    """The records with each test's maximum as the rubric now gives it: a run that will rescore them is checked
    against the new points before anything is rewritten (a decision the new rubric refuses stops it untouched)."""
    points = lesson.test_points
    for record in records:
        for t in record.tests:
            t.max_score = points.get(t.name, t.max_score)
    return records


def _check_requests_and_comments(out: Path, records, subs, lesson) -> None:
    """OverrideError naming the first row of OUT/regrade_requests.csv or OUT/comments.csv about a student
    or test this class does not have, before anything is graded (a submission not graded yet has the
    rubric's tests)."""
    from grader.admin import linecomments, regrade_requests

    tests_of = regrade_requests.askable(records, [s.name for s in subs], lesson=lesson)
    path = regrade_requests.default_path(out)
    regrade_requests.check(regrade_requests.of_folder(out), tests_of, path=path)
    path = linecomments.default_path(out)
    linecomments.check(linecomments.read(path), set(tests_of), path=path)


def _roster_warnings(out: Path) -> list[str]:
    """grader/intake/roster.py warnings on this folder's rows, when it has a roster."""
    from grader.intake import roster

    try:
        people = roster.in_out(out)
    except (roster.RosterError, OSError):
        return []  # said by the class stage already
    if people is None:
        return []
    return roster.warnings(people, sorted(p.parent.name for p in out.glob("*/record.json")
                                          if not p.parent.name.startswith(("_", "."))))


def _previous_versions(out: Path, todo) -> dict[str, str]:
    """name -> the submission digest its record had before this run, for the rows about to be graded."""
    found = {}
    for sub in todo:
        try:
            digest = (json.loads((out / sub.name / "record.json").read_text("utf-8")).get("digests") or {}).get("submission")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(digest, str):
            found[sub.name] = digest
    return found


def _decisions_on_earlier_versions(out: Path, overrides_path: Path, previous: dict[str, str]) -> str:
    """The console's line on the decisions of overrides.csv made on an earlier version of their submission
    (grader/admin/overrides.py earlier_versions): they count, and a person should look at them again."""
    from grader.admin import overrides as decisions
    from grader.results.storage import load_records

    rows = decisions.read(overrides_path)
    found = decisions.earlier_versions(rows, load_records(out)[0], previous=previous) if rows else []
    if not found:
        return ""
    named = ", ".join(f"{r.submission} {r.test}" for r in found[:10]) + (" ..." if len(found) > 10 else "")
    return (f"{len(found)} decision(s) of {overrides_path} were made on an earlier version of the submission and "
            f"still count: {named}. Look at each again on the review page (python -m grader review {out} "
            "SUBMISSIONS) and set it again, or delete its row")


def _similarity(subs, out: Path, jobs: int, lesson) -> None:
    """The class similarity report (OUT/similarity.csv, .html): evidence for a person, never a grade,
    so a failure here is said and grading still succeeds. A shard sees only its slice of the class:
    after `merge`, run `python -m grader similarity` on the whole folder instead."""
    from grader.admin import similarity

    try:
        base = similarity.load_base(lesson, released_notebook=lambda: similarity.released_notebook_code(lesson))
        found = similarity.report(subs=subs, out=out, base=base, jobs=jobs)
        print(f"similarity: {similarity.summary(found)} in {out / 'similarity.html'}", flush=True)
    except Exception as exc:  # never costs a grade
        print(f"similarity report not written ({type(exc).__name__}: {exc}); run "
              f"`python -m grader similarity SUBMISSIONS --out {out}` to retry", file=sys.stderr)


def _rows_without_a_submission(out: Path, subs) -> list[str]:
    """The graded rows of `out` that no submission of the class folder is (removed, or renamed since): kept, as a
    person decides whether a grade goes, and named, so that the gradebook's extra rows are no surprise."""
    if not out.is_dir():
        return []
    names = {s.name for s in subs}
    return sorted(p.name for p in out.iterdir()
                  if p.is_dir() and not p.name.startswith(("_", ".")) and p.name not in names and (p / "record.json").is_file())


def _misplaced_out(submissions: Path, out: Path, subs) -> str | None:
    """Why `out` cannot hold this class's results: it is the class folder (or above it), or inside a student's
    own folder; None when it can (a folder of its own beside or inside the class folder)."""
    if _contains(out, submissions):
        return (f"--out {out} holds the class folder {submissions}: the results would be written among the students' "
                "files, and read back as students. Choose a folder of its own (e.g. --out out/class).")
    inside = next((s for s in subs if _contains(s.source, out) and s.source.absolute() != out.absolute()), None)
    if inside is not None:
        return (f"--out {out} is inside {inside.source}, a student's own folder. Choose a folder of its own "
                "(e.g. --out out/class).")
    return None


def _lesson_mark(lesson) -> str:
    """The lesson as OUT/_lesson names it: what `--lesson` takes, a lesson outside grader/ by its absolute path."""
    return lesson.ref if lesson.ref == lesson.name else str(lesson.folder.resolve())


def _other_lesson(out: Path, lesson) -> str | None:
    """Why `out` cannot take this lesson's records: it holds another lesson's; None when it can (a folder graded
    before the mark existed has none)."""
    kept, here = lesson_of_output(out), _lesson_mark(lesson)
    if kept and kept != here:
        return (f"{out} holds the grades of the lesson {kept}: grading it as {here} would replace every record. "
                f"Grade it with --lesson {kept} (make ... LESSON={kept}), or choose another --out for {here}.")
    return None


def _mark_lesson(out: Path, lesson) -> None:
    """Name the lesson in `out` (OUT/_lesson), unless a mark is there."""
    if not (out / OUT_LESSON_FILE).exists():
        (out / OUT_LESSON_FILE).write_text(_lesson_mark(lesson) + "\n", encoding="utf-8")


def _contains(folder: Path, path: Path) -> bool:
    folder, path = folder.absolute(), path.absolute()
    return folder == path or folder in path.parents


def parse_shard(shard) -> tuple[int, int]:
    if shard in (None, ""):
        return 1, 1
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(shard))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"--shard {shard!r} must be K/N with 1 <= K <= N, e.g. --shard 2/8")
    return int(m.group(1)), int(m.group(2))


def parse_jobs(jobs) -> int:
    if jobs is None:
        return os.cpu_count() or 1
    if int(jobs) < 1:
        raise UsageError(f"--jobs {jobs} must be at least 1")
    return int(jobs)


def retire_moved_rows(out: Path, subs) -> list[str]:
    """Remove the row folders whose record came from an entry that has another row name now.

    A row name moves when a later upload collides with a renamed entry (`Ann Lee.zip` was `Ann_Lee`
    until `ann_lee/` arrived): the old folder would stay in the gradebook as a second row of that
    entry. Only folders whose record.json names a current entry are touched."""
    rows = {intake.source_label(s): s.name for s in subs}
    current = {s.name for s in subs}
    said = []
    for record in sorted(Path(out).glob("*/record.json")):
        folder = record.parent
        if folder.name.startswith((".", "_")) or folder.is_symlink() or folder.name in current:
            continue  # a current row: graded again if its record came from another entry (regrade.is_complete)
        try:
            source = json.loads(record.read_text(encoding="utf-8")).get("source")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(source, str) and source in rows:
            intake.remove(folder)
            said.append(f"row {folder.name} of {source} is now {rows[source]}: the old folder was removed")
    return said


def _final_totals(out: Path, overrides_path: Path, lesson):
    """name -> the row's final result, as grades.csv will say it (None: say the automated total)."""
    from grader.judging import totals

    try:
        return totals.Finaliser(out, overrides_path, lesson=lesson)
    except (OSError, ValueError):
        return None


def _grade_all(todo, *, out: Path, zygote: Zygote, config: SandboxConfig, jobs: int, lesson,
               final=None) -> list[str]:
    """Grade `todo` with `jobs` worker processes, one sandbox slot each.

    Workers are processes, not threads: the scorer keeps per-submission state (the reference's and
    the catalogue's answers, on the lesson value), and two submissions graded in one process at once
    could change each other's results. This process loads torch, the scorer and the reference's
    answers once (_preload) while the zygote is still importing torch, then forks the workers, which
    inherit them; each waits for the zygote on its own control socket before its first submission.
    """
    clean_stale_scratch(lesson)
    work = Path(tempfile.mkdtemp(prefix=scratch_prefix(lesson), dir=scratch_base()))
    # Traversable but not listable, so a sandbox uid reaches its own copy and cannot find others.
    os.chmod(work, 0o711)
    (work / "owner").write_text(_process_identity(os.getpid()))
    for slot in range(jobs):
        (work / f"slot{slot}").mkdir(mode=0o711)
    progress = Progress(len(todo), final=final)
    faults: list[str] = []
    try:
        _preload(lesson)  # while the zygote starts: it overlaps the start-up check below
        try:
            # The start-up check's verdict: a refusal stops the run here. The bound is this run's, as a kept
            # zygote may have been started by another (grader/sandbox/zygote.py, KeptZygotes).
            zygote.wait_ready(0, timeout=config.start_timeout)
        except SandboxRefused:
            raise
        except SandboxUnavailable:
            pass  # a zygote that did not start: each row says so, as an engine fault
        if jobs == 1:
            # The zygote is a separate interpreter, already started: importing the scorer here while it
            # loads torch overlaps both start-ups and cannot reach it.
            grader = _Worker(0, out=out, work=work, zygote=zygote, config=config, lesson=lesson)
            try:
                for sub in todo:
                    summary = grader.grade(sub)
                    _account(summary, progress, faults)
            finally:
                grader.close()
        else:
            _grade_in_processes(todo, out=out, work=work, zygote=zygote, config=config, jobs=jobs,
                                progress=progress, faults=faults, lesson=lesson)
    finally:
        _unmount_under(work)
        remove_tree(work)
    progress.finish()
    return faults


def scratch_prefix(lesson) -> str:
    """How the scratch folders of a run of `lesson` begin (clean_stale_scratch finds a killed run's by it)."""
    return f"{lesson.name}-scratch-"


def _process_identity(pid: int) -> str:
    """pid and start time: a pid alone may have been reused by the time someone checks it."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return f"{pid} {start}"


def scratch_base() -> Path:
    """Where the scratch copies go: the temporary folder, unless the sandbox's unprivileged uid could
    not reach it (TMPDIR under a 0700 folder such as pytest's or /root's). Then every student would
    lose every point to "file not found", so a reachable system folder is used instead."""
    return Path(enterable_temp_dir())


def clean_stale_scratch(lesson) -> None:
    """Remove the scratch folders (and unmount the quota tmpfs) of runs of `lesson` that were killed (kill -9)."""
    for folder in scratch_base().glob(scratch_prefix(lesson) + "*"):
        try:
            owner = (folder / "owner").read_text()
        except OSError:  # being created right now, gone since the listing, or left by a kit without owner files
            try:
                if time.time() - folder.stat().st_mtime < 3600:
                    continue
            except OSError:
                continue  # its run removed it as it ended: nothing left to clean
            owner = ""
        pid = owner.split()[0] if owner.split() else ""
        if pid.isdigit() and _process_identity(int(pid)) == owner:
            continue  # a run still in progress
        _unmount_under(folder)
        remove_tree(folder)


def _unmount_under(folder: Path) -> None:
    """Unmount the scratch tmpfs mounts under `folder`, deepest first."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    # mountinfo escapes spaces and the like in octal (\040); scratch paths hold none.
    points = [line.split()[4] for line in lines]
    for mount_point in sorted((p for p in points if p.startswith(str(folder) + "/")), key=len, reverse=True):
        unmount_quota(Path(mount_point))


def _account(summary, progress, faults) -> None:
    name, total, max_total, status, fault = summary
    if fault:
        faults.append(f"{name}: {fault}")
    progress.step(name, total, max_total, status)


def _grade_in_processes(todo, *, out, work, zygote, config, jobs, progress, faults, lesson) -> None:
    _preload(lesson)
    ctx = multiprocessing.get_context("fork")  # no thread pool yet (one intra-op thread, see _preload)
    tasks, results = ctx.Queue(), ctx.Queue()
    for i in range(len(todo)):
        tasks.put(i)
    for _ in range(jobs):
        tasks.put(None)
    procs = [ctx.Process(target=_worker_main, args=(slot, todo, tasks, results),
                         kwargs=dict(out=out, work=work, zygote=zygote, config=config, lesson=lesson),
                         daemon=True)
             for slot in range(jobs)]
    for p in procs:
        p.start()
    # The class report's plotting library (~0.3 s) loads now, while the workers wait for the zygote,
    # rather than after the last row, when nothing else runs beside it.
    with contextlib.suppress(Exception):
        _preload(lesson)[1].pyplot()
    pending = {s.name for s in todo}
    while pending:
        try:
            summary = results.get(timeout=1.0)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                for name in sorted(pending):
                    faults.append(f"{name}: a grading worker died before grading it; run again to resume")
                break
            continue
        pending.discard(summary[0])
        _account(summary, progress, faults)
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()


def _worker_main(slot, todo, tasks, results, **kwargs) -> None:
    # If the batch process is killed, its workers go too (resume picks up from the records).
    libc = ctypes.CDLL(None)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    # PR_SET_NAME: `top`, `ps -o comm` and `make bench` tell a worker from the grader that forked it.
    libc.prctl(15, b"grade-worker", 0, 0, 0)
    grader = _Worker(slot, **kwargs)
    try:
        while (i := tasks.get()) is not None:
            results.put(grader.grade(todo[i]))
    finally:
        grader.close()
        kwargs["lesson"].cleanup()  # the catalogue's mutant folders: os._exit skips atexit handlers


def _preload(lesson):
    """Import torch and the scorer and run the hidden tests once on the reference, in this process.

    Called before the workers are forked, so each inherits all of it instead of importing torch
    and filling the reference's cache on its own (~1.5 s of CPU per worker, at the start, while
    the zygote is importing torch too). Secret from here on: the zygote already runs, and it is a
    separate interpreter. One intra-op thread before any op: a forked worker must not inherit a
    thread pool (it would hang in it), and two workers on two cores must not oversubscribe.
    Returns the scorer and the feedback and plots modules; done once per process (a forked worker has it).
    """
    global _preloaded
    if _preloaded is not None:
        return _preloaded
    import importlib

    import torch

    torch.set_num_threads(1)
    skip_absent_device_seed_stacks(torch)  # the reference and mutants run here too
    from grader.results import feedback
    from grader.results import plots

    score = importlib.import_module("grader.judging.score")
    # The static scan reads the release's own files in each worker (score._kit_sources): imported here, once.
    importlib.import_module("grader.release.student_release")
    InProcessTransport = score.InProcessTransport

    # The reference answers every call the hidden tests make; its cache is shared by every submission.
    # Only a warm-up: if it fails, each submission fills what it needs (and reports what goes wrong).
    with contextlib.suppress(Exception):
        solutions = lesson.solutions
        score.grade_submission(name="reference", directory=solutions, transport=InProcessTransport(solutions, lesson=lesson),
                               lesson=lesson)
    # What is loaded now lives as long as the run: frozen, the collector never walks it again, in this process
    # (the class stage's full collections walked it: ~0.7 s at 200 submissions) or in a forked worker.
    import gc

    gc.collect()
    gc.freeze()
    _preloaded = score, plots, feedback
    return _preloaded


_preloaded = None


class _Worker:
    """Grades submissions one at a time through one sandbox slot, with the scorer from _preload."""

    def __init__(self, slot, *, out, work, zygote, config, lesson):
        self.slot, self.out, self.work, self.zygote, self.config = slot, out, work, zygote, config
        self.lesson = lesson
        self.seed = run_seed.read(out) or 0  # kept by main before any worker starts
        self.score, _, self.feedback = _preload(lesson)  # already done (and inherited) when workers are forked
        limits = lesson.limits.get("deliverables", {})
        self.checker = LimitedChecker(memory_bytes=limits.get("memory_bytes", 1 << 30), seconds=limits.get("seconds", 30),
                                      lesson=lesson)
        self.scanner = self.score.limited_scan(lesson=lesson, **lesson.limits.get("scan", {}))
        # The zygote's start-up is the run's, not the first submission's: its execution_time starts after.
        with contextlib.suppress(SandboxUnavailable):  # then each row says so, as an engine fault
            zygote.wait_ready(slot, timeout=config.start_timeout)

    def grade(self, sub) -> tuple:
        fault = None
        try:
            result = grade_one(sub, slot=self.slot, work=self.work, zygote=self.zygote, config=self.config,
                               score=self.score, checker=self.checker, scanner=self.scanner, lesson=self.lesson,
                               seed=self.seed)
        except Exception as exc:  # the engine's own fault: it costs this row only
            tb = traceback.format_exc(limit=-3)
            fault = tb.strip().splitlines()[-1]
            print(f"engine fault on {sub.name}:\n{tb}", file=sys.stderr, flush=True)  # the instructor's console
            # The student's feedback says what failed, never where: no path of this machine.
            result = SubmissionResult(submission=sub.name, status="engine-error", source=intake.source_label(sub),
                                      notes=[*sub.flags, f"the grading engine failed on this submission "
                                             f"({type(exc).__name__}: {without_paths(str(exc))[:300]}); this is not "
                                             "your code's fault, and the next grading run grades it again"])
        try:
            # The record only: the class stage writes the student's files once, overrides and all.
            self.feedback.keep_record(self.out, result)
        except Exception as exc:
            fault = f"could not write its results ({type(exc).__name__}: {exc})"
        return sub.name, result.total, result.max_total, result.status, fault

    def close(self) -> None:
        self.checker.close()
        self.scanner.close()


def grade_one(sub, *, slot: int, work: Path, zygote: Zygote, config: SandboxConfig, score, lesson,
              checker=None, scanner=None, seed: int = 0) -> SubmissionResult:
    """Copy, sandbox and grade one submission; every fault becomes part of its result.

    The scratch copy is fresh for every submission, whatever the one before left in the slot: as
    root, the slot gets a new tmpfs (the quota) for each submission and loses it after, so nothing a
    child wrote there (a full quota, a deep tree, folders it locked) outlives its submission;
    otherwise the copy is removed with remove_tree. `checker` runs the deliverables checks
    (grader/running/deliverables_process.py); without one they run in this process. `scanner` parses the sources (a
    score.limited_scan); without one they are parsed in this process. Either way the sources are read
    before any student code runs, so what the child does to its files changes no flag. `seed`: the run's
    (grader/running/run_seed.py), for the hidden tests' probes and call order."""
    start = time.monotonic()
    config = with_lesson_limits(config, lesson.limits, files=len(lesson.modules))
    digests = {"submission": regrade.submission_digest(sub.source), **regrade.current(lesson=lesson)}
    slot_dir = work / f"slot{slot}"
    quota = slot_dir.is_dir() and mount_quota(slot_dir, config)
    scratch = Path(tempfile.mkdtemp(prefix="s", dir=slot_dir if slot_dir.is_dir() else work))
    try:
        # Intake's copy stays the grader's: each child gets a fresh copy of it (SandboxTransport).
        taken = intake.materialise(sub, scratch, lesson=lesson)
        # Read before any of its code runs: the names it holds, and paths that plant a result.
        handed_in, named = integrity.top_files(scratch), integrity.named_paths(scratch)
        findings = scanner.scan(scratch) if scanner else score.scan_submission(scratch, lesson=lesson)
        if checker:
            # The deliverables as handed in, checked by the helper while the hidden tests run.
            checker.start(scratch)
        with SandboxTransport(zygote=zygote, slot=slot, scratch=scratch, config=config, quota=quota) as transport:
            result = score.grade_submission(name=sub.name, directory=scratch, transport=transport, findings=findings,
                                            lesson=lesson, seed=seed, check_deliverables=(lambda _: checker.finish()) if checker else None)
            fault_types, faults = list(transport.fault_types), list(transport.faults)
            isolation = dict(transport.isolation)
            printed = integrity.printed_claims(transport.printed_heads())
            planted = integrity.written_results(handed_in, transport.top_names())  # each child wrote in its own copy
            quoted = ["an answer quoted the grader's stand-in code, which its process was lent to run (the words "
                      "were not shown in its feedback)"] if transport.quoted_grader_code else []
            quoted += ["its code put a channel of its own in place of its process's channel to the grader (to read "
                       "or rewrite answers): the process was stopped"] if transport.channel_replaced else []
        full = scratch_full_words(transport.scratch_full, config)  # the last child's copy was checked as it closed
    finally:
        if quota:
            unmount_quota(slot_dir)  # the whole tmpfs goes, whatever is in it
        else:
            remove_tree(scratch)
    result.submission, result.source = sub.name, intake.source_label(sub)
    # What it tried is for the staff (the report, the review page); its feedback never shows flags.
    # A full scratch folder is the submission's own doing, never the grader's: its calls scored as they answered.
    own = [f"your code filled the folder it runs in to its limit ({full}): past it, writing a file or making a "
           "folder fails with \"No space left on device\". Write fewer or smaller files: the assignment needs a few "
           "dozen files and a few MB"] if full else []
    filled = [f"filled its scratch folder to the limit ({full}): a loop of files or folders the assignment never "
              "needs"] if full else []
    result.flags += [f for f in named + planted + printed + filled + quoted if f not in result.flags]
    result.notes = _dedupe(list(sub.flags) + list(taken.notes) + list(result.notes) + faults + own)
    if taken.notebook:
        result.notes.insert(0, f"graded the code cells of {taken.notebook}")
    if fault_types and result.status in ("ok", "", None):
        result.status = _STATUS[fault_types[0]]
    elif sub.kind == "symlink" or (sub.kind != "folder" and taken.files == 0):
        result.status = "no-files"
    isolation.update(scratch_copy=True, copy_per_child=True, fresh_process_per_submission=True,
                     fresh_process_per_part=True,  # a child answers one contract module's calls (transport)
                     scratch_quota_mb=(config.scratch_quota_bytes >> 20) if quota else False,
                     scratch_quota_inodes=config.scratch_inodes if quota else False)
    result.isolation = dict(sorted(isolation.items()))
    result.execution_time = round(time.monotonic() - start, 3)
    result.digests = digests
    return result


def scratch_full_words(full: set[str], config: SandboxConfig) -> str:
    """What a submission's children used up of their scratch folder, in words ("" for nothing)."""
    return " and ".join([f"{number(config.scratch_quota_bytes >> 20)} MB"] * ("bytes" in full) +
                        [f"{config.scratch_inodes:,} files and folders"] * ("inodes" in full))


def with_lesson_limits(config: SandboxConfig, limits: dict, files: int = 1) -> SandboxConfig:
    """`config` with the reply caps and the import time of the lesson's limits (a value a test set itself is kept).
    The submission's cap is shared evenly among the lesson's `files` (its modules), so that one file's flood of
    answers costs only its own part's calls."""
    replies = limits.get("replies", {})
    replies_bytes = config.replies_bytes or int(replies.get("submission_bytes", 0))
    return dataclasses.replace(config, reply_bytes=config.reply_bytes or int(replies.get("call_bytes", 0)),
                               replies_bytes=replies_bytes,
                               file_replies_bytes=config.file_replies_bytes or replies_bytes // max(1, files),
                               import_timeout=config.import_timeout
                               or float(limits.get("calls", {}).get("import_seconds", 0)))


_STATUS = {"Timeout": "timeout", "Budget": "time-budget", "Crashed": "crashed", "OutOfMemory": "out-of-memory",
           "ProtocolError": "protocol-error", "OversizedReply": "oversized-reply"}


def _dedupe(notes: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    for n in notes:
        counts[n] = counts.get(n, 0) + 1
    return [n if k == 1 else f"{n} (x{k})" for n, k in counts.items()]


class Progress:
    """A bar on a terminal, one plain line per submission otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None, final=None):
        self.total, self.done, self.stream = total, 0, stream or sys.stdout
        self.final = final  # name -> final SubmissionResult (grader/judging/totals.py), or None
        self.tty = self.stream.isatty()
        self.start = time.monotonic()

    def step(self, name: str, total: float, max_total: float, status: str) -> None:
        self.done += 1
        why = ""
        if self.final is not None:
            from grader.judging import totals

            try:
                result = self.final(name)
            except (OSError, ValueError):
                result = None
            if result is not None:  # the total every class file says, and why it is not the automated one
                total, max_total, why = result.total, result.max_total, totals.explain(result)
        line = f"{name}: {number(total)}/{number(max_total)} ({status}{'; ' + why if why else ''})"
        if self.tty:
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {line[:60]:<60}")
        else:
            self.stream.write(f"graded {self.done}/{self.total} {line}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
        self.stream.write(f"graded {self.done} submission(s) in {time.monotonic() - self.start:.1f} s\n")
        self.stream.flush()
