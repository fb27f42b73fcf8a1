"""grader/running/grade.py: the batch runner end to end: outputs, resume after kill -9, --force, shards,
exit codes, determinism, notebooks graded like .py files, and the CLI under `make grade`."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import engine_helpers  # noqa: E402
from engine_helpers import (KIT, TOY, descendants, in_kit_view, kept_zygotes, processes_of, settled,  # noqa: E402
                            shared_config)

from grader.running import grade as run  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

LESSON = load_lesson(str(TOY))  # the lesson value these tests pass to each stage: the toy's
REFERENCE = LESSON.solutions
# The toy's two parts: `activations` (softmax), and `classifier`, graded over the grader's softmax.
FULL = {part: LESSON.points[part] for part in LESSON.modules}

CONFIG = shared_config(call_timeout=3.0)
UIDS = range(CONFIG.uid_base, CONFIG.uid_base + 4)
COLUMNS = "submission,total,max_total,activations,classifier,status,source,overrides,late_days,penalty"


def make_submission(folder: Path, files: dict[str, str] | None = None, *, reference: bool = True) -> Path:
    return engine_helpers.make_submission(folder, files, reference=reference, solutions=REFERENCE)


def small_class(root: Path) -> Path:
    subs = root / "subs"
    make_submission(subs / "alice")
    # bob's softmax does not import: the classifier, graded over the grader's softmax, keeps its points.
    make_submission(subs / "bob", {"activations.py": "raise ImportError('bob broke it')\n"})
    make_submission(subs / "carol", reference=False)  # empty: every part missing
    with zipfile.ZipFile(subs / "dan.zip", "w") as z:
        for f in REFERENCE.glob("*.py"):
            z.write(f, f"dan/{f.name}")
    return subs


def notebook_of_reference(path: Path) -> None:
    cells = ["%matplotlib inline\n!pip install torch"]
    for name in LESSON.modules:
        src = (REFERENCE / f"{name}.py").read_text()
        cells.append("\n".join(l for l in src.splitlines() if not l.startswith(tuple(f"from {m} " for m in LESSON.modules))))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(path))


def rows(out: Path) -> list[str]:
    return (out / "grades.csv").read_text().splitlines()


def record(out: Path, name: str) -> dict:
    return json.loads((out / name / "record.json").read_text())


def no_leftovers():
    assert settled(lambda: processes_of(UIDS)) == []
    assert settled(lambda: descendants(os.getpid())) == []


@pytest.fixture(scope="module")
def graded():
    root = Path(tempfile.mkdtemp(prefix="kit-run-"))
    subs = small_class(root)
    notebook_of_reference(subs / "erin.ipynb")
    out = root / "out"
    code = run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes())
    yield root, subs, out, code
    shutil.rmtree(root, ignore_errors=True)


def test_every_output_is_written_in_a_stable_order(graded):
    root, subs, out, code = graded
    assert code == 0
    lines = rows(out)
    assert lines[0] == COLUMNS
    assert [l.split(",")[0] for l in lines[1:]] == ["alice", "bob", "carol", "dan", "erin"]
    for name in ("alice", "bob", "carol", "dan", "erin"):
        for f in ("results.json", "feedback.md", "record.json"):
            assert (out / name / f).is_file()
    for f in ("report.html", "summary.md"):
        assert (out / f).is_file()
    no_leftovers()


def test_a_kept_zygote_is_no_leftover_but_a_child_it_forked_and_left_alive_is(graded):
    # The module's runs share one zygote (engine_helpers.kept_zygotes): the leftover checks above must not count
    # it, and must still count a student child of it that outlives its transport.
    from grader.sandbox.transport import SandboxTransport

    keeper = kept_zygotes()
    zygote = keeper.take(slots=1, config=CONFIG, lesson=LESSON)
    assert zygote.process.pid in keeper.pids() and zygote.process.pid not in descendants(os.getpid())
    scratch = Path(tempfile.mkdtemp(prefix="kit-kept-", dir=run.scratch_base()))
    try:
        os.chmod(scratch, 0o711)
        shutil.copy(REFERENCE / "activations.py", scratch)
        with SandboxTransport(zygote=zygote, slot=0, scratch=scratch) as transport:
            answer, _ = transport.call({"op": "no such op"}, {})
            assert "unknown op" in json.dumps(answer)  # answered by a live child, which waits for the next call
            child = transport._child.pid
            assert child in descendants(os.getpid())
        assert settled(lambda: descendants(os.getpid())) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    no_leftovers()


def test_a_run_on_a_kept_zygote_keeps_its_own_time_limits(graded, tmp_path):
    # A kept zygote is taken by a run whose limits differ only in what the grader enforces: the call time
    # limit is this run's (1 s), not the one of the run that started the zygote (CONFIG's 3 s).
    keeper = kept_zygotes()
    zygote = keeper.take(slots=1, config=CONFIG, lesson=LESSON)
    started = keeper.started
    subs = tmp_path / "subs"
    make_submission(subs / "looper", {"classifier.py": (KIT / "tests/fixtures/hostile/infinite_loop/classifier.py").read_text()})
    short = shared_config(call_timeout=1.0)
    assert run.main(submissions=subs, out=tmp_path / "out", jobs=1, config=short, lesson=LESSON, zygotes=keeper) == 0
    assert keeper.started == started and zygote.process.pid in keeper.pids()
    looper = record(tmp_path / "out", "looper")
    assert looper["status"] == "timeout" and "no answer within 1 s" in json.dumps(looper), looper["status"]
    no_leftovers()


def test_faults_cost_only_their_part_and_are_stated(graded):
    root, subs, out, code = graded
    alice, bob, carol = (record(out, n) for n in ("alice", "bob", "carol"))
    scores = {r["submission"]: {t["name"]: t["score"] for t in r["tests"]} for r in (alice, bob, carol)}
    for test, score in scores["bob"].items():
        if test.startswith("activations."):
            assert score == 0
        elif not test.startswith("deliverables."):
            assert score == scores["alice"][test], test
    assert "bob broke it" in json.dumps(bob)
    assert carol["total"] == 0 and "missing" in json.dumps(carol)
    assert alice["isolation"]["scratch_copy"] is True and alice["isolation"]["copy_per_child"] is True
    assert alice["isolation"]["fresh_process_per_part"] is True
    if os.geteuid() == 0:
        assert all(alice["isolation"][k] for k in ("pidns", "netns", "uid", "landlock", "seccomp", "rlimits"))


def test_zip_and_notebook_score_like_the_same_py_files(graded):
    root, subs, out, code = graded
    code_parts = lambda r: {t["name"]: t["score"] for t in r["tests"] if not t["name"].startswith("deliverables.")}
    alice = code_parts(record(out, "alice"))
    assert code_parts(record(out, "dan")) == alice
    assert code_parts(record(out, "erin")) == alice
    assert "graded the code cells of erin.ipynb" in record(out, "erin")["notes"]


def test_rerun_skips_graded_and_force_regrades_byte_identically(graded):
    root, subs, out, code = graded
    before = {p: p.read_bytes() for p in out.glob("*/results.json")}
    stamp = (out / "alice" / "record.json").stat().st_mtime_ns
    assert run.main(submissions=subs, out=out, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert (out / "alice" / "record.json").stat().st_mtime_ns == stamp  # skipped
    assert run.main(submissions=subs, out=out, jobs=2, force=True, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert (out / "alice" / "record.json").stat().st_mtime_ns != stamp  # regraded
    for path, data in before.items():
        old, new = json.loads(data), json.loads(path.read_bytes())
        old.pop("execution_time"), new.pop("execution_time")
        assert old == new, path
    no_leftovers()


def test_resume_after_kill_9_loses_and_duplicates_nothing(tmp_path):
    subs = tmp_path / "subs"
    for i in range(6):
        make_submission(subs / f"s{i}", {"classifier.py": "import time\ntime.sleep(0.6)\n"
                                         + (REFERENCE / "classifier.py").read_text()})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--jobs", "2", "--lesson", str(TOY)]
    proc = subprocess.Popen(cmd, cwd=KIT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.glob("*/record.json"))) < 2:
        time.sleep(0.05)
    family = descendants(proc.pid)  # workers, zygote, student children
    proc.kill()  # only the batch process: the rest must follow it on their own
    proc.wait()
    done_before = len(list(out.glob("*/record.json")))
    assert 2 <= done_before < 6 and len(family) >= 3
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in family):
        time.sleep(0.05)
    assert [p for p in family if os.path.exists(f"/proc/{p}")] == []
    # The killed run's scratch folder (its owner file names the killed process); another grading run
    # on this machine may have its own, live, and the next run must leave that one alone. (Another
    # run that starts meanwhile may clean the killed one's up first: then there is none to find.)
    killed = [f for f in run.scratch_base().glob(run.scratch_prefix(LESSON) + "*")
              if _read(f / "owner").split()[:1] == [str(proc.pid)]]
    assert len(killed) <= 1
    rerun = subprocess.run(cmd, cwd=KIT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    # The killed run's scratch folder and any quota mount left in it are cleaned up by the next run.
    mounts = [l.split()[4] for l in Path("/proc/self/mountinfo").read_text().splitlines()]
    for folder in killed:
        assert [m for m in mounts if m.startswith(str(folder) + "/")] == []
        assert not folder.exists()
    assert f"{done_before} already graded" in rerun.stdout
    names = [l.split(",")[0] for l in rows(out)[1:]]
    assert names == [f"s{i}" for i in range(6)]
    assert all(record(out, n)["status"] == "ok" for n in names)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_a_run_leaves_the_scratch_of_a_live_run_alone(tmp_path):
    # Another grading run on this machine (a live process owns it): the stale-scratch clean-up skips it.
    base = run.scratch_base()
    live = Path(tempfile.mkdtemp(prefix=run.scratch_prefix(LESSON), dir=base))
    try:
        (live / "owner").write_text(run._process_identity(os.getpid()))
        (live / "slot0" / "s1").mkdir(parents=True)
        run.clean_stale_scratch(LESSON)
        assert (live / "slot0" / "s1").is_dir()
    finally:
        run.remove_tree(live)


def test_a_scratch_folder_that_vanishes_while_it_is_looked_at_stops_no_run(monkeypatch):
    # Two runs at once (a clean-clone CI run's parallel workers): one run's clean-up listed the other's scratch
    # folder, which that run removed as it ended before its owner file was read; the stat that followed raised
    # FileNotFoundError and the starting run (an nbgrader autograde) failed as an engine fault.
    folder = Path(tempfile.mkdtemp(prefix=run.scratch_prefix(LESSON), dir=run.scratch_base()))
    real_read = Path.read_text

    def vanishing(self, *args, **kwargs):
        if self == folder / "owner":
            shutil.rmtree(folder)  # its run ends between the listing and this read
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", vanishing)
    try:
        run.clean_stale_scratch(LESSON)
    finally:
        monkeypatch.undo()
        shutil.rmtree(folder, ignore_errors=True)


def test_shards_partition_the_class_and_merge_equals_one_run(graded, tmp_path):
    root, subs, out, code = graded
    shard_outs = []
    # One decisions file for the whole class: each shard applies the rows of its own students.
    decisions = tmp_path / "overrides.csv"
    decisions.write_text("submission,test,points,comment,by,at\nalice,*,1,,ta,\nbob,classifier,2,,ta,\n")
    for k in (1, 2):
        shard_out = tmp_path / f"shard{k}"
        (shard_out).mkdir()
        (shard_out / "regrade_requests.csv").write_text("student,test,reason,time\nbob,classifier,why,2026-12-01T10:00:00Z\n")
        assert run.main(submissions=subs, out=shard_out, jobs=1, shard=f"{k}/2", config=CONFIG, lesson=LESSON,
                        overrides=decisions, zygotes=kept_zygotes()) == 0
        shard_outs.append(shard_out)
    said = [{line.split(",")[0]: line for line in rows(o)} for o in shard_outs]
    assert "classifier" in said[1]["bob"] and "* +1" in said[0]["alice"]
    for shard_out in shard_outs:
        (shard_out / "regrade_requests.csv").unlink()
    names = [sorted(p.parent.name for p in o.glob("*/record.json")) for o in shard_outs]
    assert names == [["alice", "carol", "erin"], ["bob", "dan"]]
    from grader.admin.merge import merge
    merged = tmp_path / "merged"
    assert merge(shards=[str(o) for o in shard_outs], out=str(merged), lesson=LESSON) == 0
    assert rows(merged) == rows(out)


@pytest.mark.parametrize("kwargs, message", [
    (dict(shard="3/2"), "--shard"),
    (dict(shard="x"), "--shard"),
    (dict(jobs=0), "--jobs"),
])
def test_usage_errors_exit_2_with_a_hint(tmp_path, capsys, kwargs, message):
    (tmp_path / "subs").mkdir()
    assert run.main(submissions=tmp_path / "subs", out=tmp_path / "out", **kwargs, lesson=LESSON) == 2
    assert message in capsys.readouterr().err


def test_missing_submissions_folder_exits_2(tmp_path, capsys):
    assert run.main(submissions=tmp_path / "nope", out=tmp_path / "out", lesson=LESSON) == 2
    assert "folder of submissions" in capsys.readouterr().err


def test_an_engine_fault_on_one_submission_exits_1_and_keeps_the_others(graded, tmp_path, monkeypatch, capsys):
    root, subs, out, code = graded
    real = run.grade_one

    def flaky(sub, **kw):
        if sub.name == "bob":
            raise RuntimeError(f"engine bug for bob in {KIT}/grader/running/grade.py")
        return real(sub, **kw)

    monkeypatch.setattr(run, "grade_one", flaky)
    out2 = tmp_path / "out"
    assert run.main(submissions=subs, out=out2, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 1
    err = capsys.readouterr().err
    assert f"engine fault (bob): RuntimeError: engine bug for bob in {KIT}/grader/running/grade.py; run the same command again" in err
    assert record(out2, "bob")["status"] == "engine-error"
    notes = " ".join(record(out2, "bob")["notes"])
    # The student is told what failed, never where: the instructor's paths stay on the console.
    assert "engine bug for bob in …/grade.py" in notes and str(KIT) not in notes and "/grader/" not in notes
    assert str(KIT) not in (out2 / "bob" / "feedback.md").read_text()
    assert record(out2, "alice")["total"] == record(out, "alice")["total"]
    # The engine's fault is not the student's: the next run grades bob again, and only bob.
    monkeypatch.setattr(run, "grade_one", real)
    stamp = (out2 / "alice" / "record.json").stat().st_mtime_ns
    assert run.main(submissions=subs, out=out2, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert record(out2, "bob")["status"] != "engine-error"
    assert (out2 / "alice" / "record.json").stat().st_mtime_ns == stamp


def test_progress_is_plain_lines_off_a_terminal(graded, tmp_path, capsys):
    root, subs, out, code = graded
    assert run.main(submissions=subs, out=tmp_path / "o", jobs=1, shard="2/2", config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    text = capsys.readouterr().out
    assert "graded 1/2 bob: " in text and "graded 2/2 dan: " in text and "\r" not in text
    assert "grades.csv" in text


def test_progress_is_a_bar_on_a_terminal():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    bar = run.Progress(4, stream=stream)
    bar.step("alice", 100, 100, "ok")
    bar.step("bob", 36.5, 100, "timeout")
    bar.finish()
    text = stream.getvalue()
    assert "\r[###############...............] 2/4 bob: 36.5/100 (timeout)" in text
    assert text.endswith("graded 2 submission(s) in 0.0 s\n")


def test_an_output_folder_inside_the_submissions_is_not_graded_as_a_student(tmp_path):
    subs = tmp_path / "subs"
    make_submission(subs / "alice")
    out = subs / "zz_results"
    assert run.main(submissions=subs, out=out, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    assert [l.split(",")[0] for l in rows(out)[1:]] == ["alice"]
    assert run.main(submissions=subs, out=out, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0  # and not on a rerun either
    assert [l.split(",")[0] for l in rows(out)[1:]] == ["alice"]


def test_a_batch_leaves_no_mutant_folders_behind(tmp_path):
    # A failing test replays the student's calls on catalogue mutants built in temporary folders;
    # the workers end with os._exit (no atexit), so they must remove those folders themselves.
    subs = tmp_path / "subs"
    for name in ("p", "q"):
        make_submission(subs / name, {"activations.py": (REFERENCE / "activations.py").read_text()
                                      .replace("shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x")})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "grader", "grade", str(subs), "--out", str(tmp_path / "out"), "--jobs", "2",
           "--lesson", str(TOY)]
    done = subprocess.run(cmd, cwd=KIT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stderr
    assert "act.no_shift" in (tmp_path / "out" / "p" / "record.json").read_text()  # the mutants were used
    assert sorted(p.name for p in tmp.glob(f"{LESSON.name}-mutants-*")) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to a sandbox uid that may be locked out")
def test_scratch_moves_out_of_a_temporary_folder_the_sandbox_uid_cannot_enter(tmp_path, monkeypatch):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    base = run.scratch_base()
    assert base != private and all(p.stat().st_mode & 0o001 for p in (base, *base.parents))
    open_to_all = Path(tempfile.mkdtemp(dir="/tmp", prefix="kit-open-"))  # /tmp is world-enterable
    try:
        os.chmod(open_to_all, 0o711)
        monkeypatch.setattr(tempfile, "tempdir", str(open_to_all))
        assert run.scratch_base() == open_to_all.resolve()
    finally:
        open_to_all.rmdir()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to run the grader as another user")
def test_without_root_the_engine_grades_alike_with_the_layers_it_has():
    # An instructor's laptop: no namespaces, no uid drop; Landlock, seccomp and rlimits still apply,
    # each record says which layers were on, the grades are the root run's, and nothing is left.
    tmp_path = Path(tempfile.mkdtemp(prefix="kit-nonroot-"))  # pytest's own folder is root's only
    subs = tmp_path / "subs"
    make_submission(subs / "alice")
    make_submission(subs / "bob", {"activations.py": "raise ImportError('bob broke it')\n"})
    make_submission(subs / "eve", {"classifier.py": "import os\nos.kill(os.getppid(), 9)\n"})
    out = tmp_path / "out"
    for folder in (tmp_path, out):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o777)
    for path in subs.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(subs, 0o755)
    # From a checkout nobody may enter too: the kit is shown to it in a private mount namespace.
    cmd = in_kit_view(["runuser", "-u", "nobody", "--", sys.executable, "-m", "grader", "grade", str(subs),
                       "--out", str(out), "--jobs", "2", "--lesson", str(TOY)])
    done = subprocess.run(cmd, cwd=KIT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    def parts(name):
        scores = {}
        for t in record(out, name)["tests"]:
            scores[t["component"]] = scores.get(t["component"], 0) + t["score"]
        return scores

    full = FULL
    assert {c: parts("alice")[c] for c in full} == full
    assert {c: parts("bob")[c] for c in full} == {**full, "activations": 0}
    assert {c: parts("eve")[c] for c in full} == {**full, "classifier": 0}  # killing its parent killed only itself
    layers = record(out, "alice")["isolation"]
    assert layers["pidns"] is False and layers["netns"] is False and layers["uid"] is False
    assert layers["rlimits"] is True
    assert settled(lambda: descendants(os.getpid())) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def _poisoned_tree(root: Path, depth: int) -> None:
    """What a child may leave in its scratch: a very deep chain of folders, folders it locked (000),
    read-only files, a symlink out. Built with fd-relative calls (a 10,000-deep path is too long to name)."""
    root.mkdir()
    (root / "outside").symlink_to("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(depth):
        os.mkdir("d", dir_fd=fd)
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o400, dir_fd=fd), "w") as f:
            f.write("x")
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    for locked in (root / "d" / "d", root / "d", root):  # deepest first: a locked folder hides what is under it
        os.chmod(locked / "d", 0o000)


REMOVE_AS_OWNER = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.engine.test_run import _poisoned_tree
from grader.running.grade import remove_tree
root = Path(sys.argv[1]) / "scratch"
_poisoned_tree(root, 10_000)
print(remove_tree(root), os.path.lexists(root), os.listdir(sys.argv[1]))
"""


@pytest.mark.parametrize("as_root", [True, False])
def test_remove_tree_takes_a_10000_deep_locked_tree_without_recursion(tmp_path, as_root):
    # Without root the grader and the child share a uid: locked folders are the owner's to unlock.
    if as_root and os.geteuid() != 0:
        pytest.skip("needs root")
    # On a tmpfs, as the scratch copies are when the grader runs as root (and a disk is far slower).
    holder = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp", prefix="kit-remove-"))
    try:
        cmd = [sys.executable, "-c", REMOVE_AS_OWNER, str(holder), str(KIT)]
        if os.geteuid() == 0 and not as_root:
            os.chown(holder, 65534, 65534)
            # in_kit_view: from a checkout that uid may not enter too.
            cmd = in_kit_view(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd])
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=holder)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["True", "False", "[]"]
    finally:
        run.remove_tree(holder)


def test_remove_tree_empties_a_tmpfs_whose_inodes_are_all_used(tmp_path):
    # A child's copy shares its slot's tmpfs: a child that used every inode of it (empty folders cost no bytes)
    # leaves nothing free for a folder the removal would make, so the removal must make none.
    from grader.sandbox.confinement import is_root

    if not is_root():
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: this test mounts a tmpfs")
        pytest.skip("mounting a tmpfs needs root")
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mount(b"tmpfs", str(tmp_path).encode(), b"tmpfs", 0, b"size=1M,nr_inodes=300") == 0
    try:
        copy = tmp_path / "copy"
        copy.mkdir()
        (copy / "a.py").write_text("x = 1\n")
        os.chmod(copy / "a.py", 0o000)
        made = 0
        with pytest.raises(OSError, match="No space left"):
            while made < 1000:  # the mount's cap stops it long before
                os.makedirs(copy / f"d{made % 7}" / f"{made}")
                made += 1
        assert run.remove_tree(copy) is True
        assert os.listdir(tmp_path) == []
    finally:
        libc.umount2(str(tmp_path).encode(), 2)


@pytest.mark.parametrize("where", ["the class folder", "above the class folder", "inside a student's folder"])
def test_an_output_folder_among_the_students_files_is_refused_before_anything_is_written(tmp_path, capsys, where):
    subs = small_class(tmp_path / "class")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = {"the class folder": subs, "above the class folder": tmp_path,
           "inside a student's folder": subs / "alice" / "out"}[where]
    assert run.main(submissions=subs, out=out, lesson=LESSON) == 2
    assert "Choose a folder of its own" in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_folder_graded_for_one_lesson_is_not_graded_for_another(graded, tmp_path, capsys):
    root, subs, out, code = graded
    assert (out / run.OUT_LESSON_FILE).read_text(encoding="utf-8").strip() == str(LESSON.folder.resolve())
    kept = {p: p.read_bytes() for p in out.glob("*/record.json")}
    other = tmp_path / "out"
    shutil.copytree(out, other)
    (other / run.OUT_LESSON_FILE).write_text("another_lesson\n", encoding="utf-8")
    assert run.main(submissions=subs, out=other, lesson=LESSON, force=True) == 2
    said = capsys.readouterr().err
    assert "holds the grades of the lesson another_lesson" in said and "--lesson another_lesson" in said
    assert {p: p.read_bytes() for p in other.glob("*/record.json")} == {
        other / p.relative_to(out): data for p, data in kept.items()}


def test_a_folder_with_no_submission_exits_2_and_says_what_a_submission_is(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run.main(submissions=tmp_path / "empty", out=tmp_path / "out", lesson=LESSON) == 2
    assert "found no submission" in capsys.readouterr().err
    one = make_submission(tmp_path / "one")  # one student's own folder, given as the class
    assert run.main(submissions=one, out=tmp_path / "out", lesson=LESSON) == 2
    said = capsys.readouterr().err
    assert "look like one student's work" in said and "activations.py" in said
    assert not (tmp_path / "out").exists()


def test_a_hand_in_in_no_graded_form_is_named_not_lost(tmp_path, capsys):
    subs = tmp_path / "class"
    make_submission(subs / "alice")
    (subs / "bob.tar.gz").write_bytes(b"\x1f\x8b")
    (subs / "collected.csv").write_text("name\nalice\n", encoding="utf-8")
    assert run.main(submissions=subs, out=tmp_path / "out", jobs=1, config=CONFIG, lesson=LESSON,
                    zygotes=kept_zygotes()) == 0
    said = capsys.readouterr().out
    assert "not graded, as no submission is in this form" in said and "bob.tar.gz" in said
    assert "collected.csv" not in said.split("not graded")[1].splitlines()[0]


def test_a_row_whose_submission_left_the_class_folder_is_named(graded, tmp_path, capsys):
    root, subs, out, code = graded
    copy = tmp_path / "class"
    shutil.copytree(subs, copy)
    kept = tmp_path / "out"
    shutil.copytree(out, kept)
    shutil.rmtree(copy / "bob")
    assert run.main(submissions=copy, out=kept, jobs=1, config=CONFIG, lesson=LESSON, zygotes=kept_zygotes()) == 0
    said = capsys.readouterr().out
    assert "1 row(s) of" in said and "stay in the gradebook: bob " in said
    assert (kept / "bob" / "record.json").is_file()
