"""grader/intake/collect.py with real git on local bare repositories."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.intake import collect
from grader.lesson import load_lesson

from grader.intake import submissions as intake

JAN = "2026-01-10T12:00:00+00:00"
FEB = "2026-02-10T12:00:00+00:00"
MAR = "2026-03-10T12:00:00+00:00"
TOY = Path(__file__).resolve().parents[1] / "fixtures" / "lessons" / "toy"
LESSON = load_lesson(str(TOY))  # the lesson value collect is given (its rubric has no late policy)


def git(*args, cwd, date=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="Student", GIT_AUTHOR_EMAIL="s@example.org",
               GIT_COMMITTER_NAME="Student", GIT_COMMITTER_EMAIL="s@example.org")
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


class StudentRepo:
    """A working copy that pushes to a bare repository (the 'remote' the roster names)."""

    def __init__(self, root: Path, name: str):
        self.bare = root / "remotes" / f"{name}.git"
        self.work = root / "work" / name
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--quiet", "--bare", "-b", "main", str(self.bare), cwd=root)
        self.work.mkdir(parents=True)
        git("init", "--quiet", "-b", "main", cwd=self.work)
        git("remote", "add", "origin", str(self.bare), cwd=self.work)

    def commit(self, date: str, files: dict[str, str | None], message="work") -> str:
        for name, text in files.items():
            path = self.work / name
            if text is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        git("add", "-A", cwd=self.work)
        git("commit", "--quiet", "-m", message, cwd=self.work, date=date)
        git("push", "--quiet", "origin", "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


@pytest.fixture
def repos(tmp_path):
    alice, bob = StudentRepo(tmp_path, "course-alice"), StudentRepo(tmp_path, "course-bob")
    first = alice.commit(JAN, {"model.py": "# v1\n", "notes.txt": "draft\n"})
    second = alice.commit(MAR, {"model.py": "# v2, after the deadline\n"})
    bob_only = bob.commit(JAN, {"layers.py": "# bob\n"})
    return {"alice": alice, "bob": bob, "alice_jan": first, "alice_mar": second, "bob_jan": bob_only}


def manifest(out: Path) -> dict[str, dict]:
    with open(out / collect.MANIFEST, encoding="utf-8") as handle:
        return {row["name"]: row for row in csv.DictReader(handle)}


def test_takes_the_last_commit_before_the_deadline(repos, tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"# week 1\nalice {repos['alice'].bare}\n{repos['bob'].bare}   # bob, named from the URL\n")
    out = tmp_path / "submissions"
    assert collect.main(roster=str(roster), out=str(out), deadline=FEB, lesson=LESSON) == 0
    assert (out / "alice" / "model.py").read_text() == "# v1\n"
    assert (out / "course-bob" / "layers.py").read_text() == "# bob\n"
    rows = manifest(out)
    assert rows["alice"]["commit"] == repos["alice_jan"] and rows["alice"]["status"] == "ok"
    assert rows["alice"]["committed"].startswith("2026-01-10T12:00:00")
    assert rows["course-bob"]["commit"] == repos["bob_jan"]
    assert not (out / "alice" / ".git").exists()
    # The folder is ready for `python -m grader grade`: exactly one submission per student.
    assert [s.name for s in intake.discover(out)] == ["alice", "course-bob"]


def test_without_deadline_takes_the_newest_and_a_rerun_updates(repos, tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    assert manifest(out)["alice"]["commit"] == repos["alice_mar"]
    assert (out / "alice" / "notes.txt").exists()
    newest = repos["alice"].commit("2026-04-01T09:00:00+00:00", {"notes.txt": None, "extra.py": "# b\n"})
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    assert manifest(out)["alice"]["commit"] == newest
    assert not (out / "alice" / "notes.txt").exists(), "a file deleted upstream must leave the snapshot"
    assert (out / "alice" / "extra.py").exists()


def test_no_commit_before_the_deadline_leaves_no_folder(repos, tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), deadline="2025-12-31", lesson=LESSON) == 0
    assert not (out / "alice").exists()
    assert manifest(out)["alice"]["status"] == "no commit before the deadline"


def test_unreadable_repository_is_reported_and_the_others_collected(repos, tmp_path, capsys):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"ghost {tmp_path / 'missing.git'}\nalice {repos['alice'].bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), deadline=FEB, lesson=LESSON) == 1
    rows = manifest(out)
    assert rows["ghost"]["status"].startswith("error: ") and len(rows["ghost"]["status"]) > 10
    assert rows["alice"]["status"] == "ok"
    assert "could not be read" in capsys.readouterr().out


def test_classroom_export(repos, tmp_path):
    export = tmp_path / "grades.csv"
    export.write_text(
        "assignment_name,assignment_url,starter_code_url,github_username,roster_identifier,"
        "student_repository_name,student_repository_url,submission_timestamp,points_awarded,points_available\n"
        f"week1,x,y,alice-gh,alice@uni,week1-alice-gh,{repos['alice'].bare},2026-01-10 12:00:00 UTC,0,100\n"
        f"week1,x,y,bob-gh,bob@uni,week1-bob-gh,{repos['bob'].bare},2026-01-10 12:00:00 UTC,0,100\n"
        "week1,x,y,,carol@uni,,,,0,100\n", encoding="utf-8")
    out = tmp_path / "out"
    assert collect.main(roster=str(export), out=str(out), deadline=FEB, lesson=LESSON) == 0
    rows = manifest(out)
    assert rows["alice-gh"]["commit"] == repos["alice_jan"]
    assert rows["bob-gh"]["commit"] == repos["bob_jan"]
    assert rows["carol-uni"]["status"].startswith("no repository")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.is_dir()) == ["alice-gh", "bob-gh"]


def test_symlinks_are_not_exported(tmp_path):
    repo = StudentRepo(tmp_path, "sneaky")
    (repo.work).mkdir(exist_ok=True)
    os.symlink("/etc/passwd", repo.work / "stolen.txt")
    repo.commit(JAN, {"model.py": "# ok\n"})
    roster = tmp_path / "roster.txt"
    roster.write_text(f"sneaky {repo.bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    assert (out / "sneaky" / "model.py").exists()
    assert not os.path.lexists(out / "sneaky" / "stolen.txt")
    assert "stolen.txt (not a regular file)" in manifest(out)["sneaky"]["status"]


def test_names_are_sanitised_and_unique(tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text("../evil /a/x.git\nevil /b/x.git\n")
    names = [e.name for e in collect.read_roster(roster)]
    assert names == ["evil", "evil-2"]


@pytest.mark.parametrize("bad, message", [("yesterday", "not an ISO time"), (None, None)])
def test_bad_input_exits_2_with_a_reason(tmp_path, capsys, bad, message):
    roster = tmp_path / "roster.txt"
    if bad is None:
        roster.write_text("one two three four\n")
        message = "expected 'URL', 'NAME URL' or 'NAME URL DEADLINE'"
    else:
        roster.write_text("alice /nowhere.git\n")
    assert collect.main(roster=str(roster), out=str(tmp_path / "out"), deadline=bad, lesson=LESSON) == 2
    assert message in capsys.readouterr().err


def test_naive_deadline_means_utc():
    assert collect.parse_deadline("2026-02-10T12:00") == "2026-02-10T12:00:00+00:00"
    assert collect.parse_deadline("2026-02-10T12:00:00Z") == "2026-02-10T12:00:00+00:00"


def test_a_snapshot_keeps_every_file_and_dates_each_notebook_by_its_last_commit(tmp_path, toy):
    """Stubs stay in the snapshot (the grader decides what is the student's work, grader/intake/submissions.py);
    each notebook carries the time of the last commit that changed it, so that of two edited
    notebooks the grader takes the one the student changed last, not the one written last."""
    from grader.intake import submissions as intake
    from grader.release import student_release as release

    repo = StudentRepo(tmp_path, "nb-student")
    files = dict(release.stub_texts(lesson=toy))
    files["final.ipynb"] = _notebook_text("x = 1")
    repo.commit(JAN, files)
    repo.commit(MAR, {toy.notebook: _notebook_text("x = 2")})
    repo.commit(MAR.replace("03-", "04-"), {"notes.txt": "later, no notebook changed\n"})
    roster = tmp_path / "roster.txt"
    roster.write_text(f"nb {repo.bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    folder = out / "nb"
    assert {f"{m}.py" for m in toy.modules} <= {p.name for p in folder.iterdir()}
    assert (folder / toy.notebook).stat().st_mtime > (folder / "final.ipynb").stat().st_mtime
    assert manifest(out)["nb"]["status"] == "ok"
    got = intake.materialise(intake.discover(out)[0], tmp_path / "scratch", lesson=toy)
    assert got.notebook == toy.notebook and any("not graded: final.ipynb" in n for n in got.notes), got.notes


def _notebook_text(code: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "source": code, "metadata": {}, "outputs": [],
                                  "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_never_collects_into_a_folder_it_did_not_make(repos, tmp_path, capsys):
    out = tmp_path / "kit"
    (out / "alice").mkdir(parents=True)
    (out / "alice" / "precious.txt").write_text("keep\n")
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\n")
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 2
    assert (out / "alice" / "precious.txt").read_text() == "keep\n"
    assert "collect into a new or empty folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- hostile repositories


def _tree_bomb(root: Path, name: str, fanout: int, levels: int) -> Path:
    """A bare repository of a few KB whose one commit holds fanout**levels files: each level is a tree
    naming the level below `fanout` times (git stores the subtree once)."""
    bare = root / "remotes" / f"{name}.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare), cwd=root)
    gd = ["--git-dir", str(bare)]
    blob = subprocess.run(["git", *gd, "hash-object", "-w", "--stdin"], input=b"x\n", capture_output=True,
                          check=True).stdout.decode().strip()
    entries = "".join(f"100644 blob {blob}\tf{i}\n" for i in range(fanout))
    tree = subprocess.run(["git", *gd, "mktree"], input=entries.encode(), capture_output=True,
                          check=True).stdout.decode().strip()
    for _ in range(levels - 1):
        entries = "".join(f"040000 tree {tree}\td{i}\n" for i in range(fanout))
        tree = subprocess.run(["git", *gd, "mktree"], input=entries.encode(), capture_output=True,
                              check=True).stdout.decode().strip()
    commit = git(*gd, "commit-tree", tree, "-m", "bomb", cwd=root, date=JAN)
    git(*gd, "update-ref", "refs/heads/main", commit, cwd=root)
    return bare


def _deep_tree(root: Path, name: str, depth: int) -> Path:
    """One file `depth` folders down."""
    bare = root / "remotes" / f"{name}.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare), cwd=root)
    gd = ["--git-dir", str(bare)]
    blob = subprocess.run(["git", *gd, "hash-object", "-w", "--stdin"], input=b"deep\n", capture_output=True,
                          check=True).stdout.decode().strip()
    entry = f"100644 blob {blob}\tmodel.py\n"
    for _ in range(depth):
        tree = subprocess.run(["git", *gd, "mktree"], input=entry.encode(), capture_output=True,
                              check=True).stdout.decode().strip()
        entry = f"040000 tree {tree}\td\n"
    tree = subprocess.run(["git", *gd, "mktree"], input=entry.encode(), capture_output=True,
                          check=True).stdout.decode().strip()
    commit = git(*gd, "commit-tree", tree, "-m", "deep", cwd=root, date=JAN)
    git(*gd, "update-ref", "refs/heads/main", commit, cwd=root)
    return bare


def _collect_limited(roster: Path, out: Path) -> tuple[int, str, int]:
    """collect in its own process under an address-space limit (git inherits it), so a regression
    that expands a bomb in memory fails this test instead of taking the machine down. Git maps its
    packs into a large address space it never touches, hence a limit of 3 GB on the address space and
    the measure that matters, the peak resident memory of collect and of every git it ran (MB)."""
    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
              "from grader.intake import collect\n"
              "from grader.lesson import load_lesson\n"
              f"code = collect.main(roster={str(roster)!r}, out={str(out)!r}, lesson=load_lesson({str(TOY)!r}))\n"
              # ru_maxrss of this process would carry the peak of the pytest process it was forked
              # from across exec; VmHWM belongs to this image alone. Children are the gits it ran.
              "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
              "peak = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
              "print(f'peak-rss-kb {peak}')\n"
              "sys.exit(code)\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600)
    peak = int(done.stdout.rsplit("peak-rss-kb ", 1)[1].split()[0]) if "peak-rss-kb" in done.stdout else -1
    return done.returncode, done.stdout + done.stderr, peak >> 10


def test_a_tree_bomb_is_reported_and_skipped_beside_honest_repositories(repos, tmp_path):
    bomb = _tree_bomb(tmp_path, "bomb", fanout=10, levels=9)  # 10**9 files, a few KB on disk
    deep = _deep_tree(tmp_path, "deep", depth=collect.MAX_DEPTH + 5)
    packed = sum(f.stat().st_size for f in bomb.rglob("*") if f.is_file())
    assert packed < 200_000
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\nbomb {bomb}\ndeep {deep}\nbob {repos['bob'].bare}\n")
    out = tmp_path / "out"
    code, printed, peak_mb = _collect_limited(roster, out)
    assert code == 1, printed
    assert 0 < peak_mb < 500, f"collect or git used {peak_mb} MB"
    rows = manifest(out)
    assert rows["bomb"]["status"] == f"error: skipped, the repository has more than {collect.MAX_ENTRIES} files and folders"
    assert rows["deep"]["status"].startswith(f"error: skipped, the repository has folders more than {collect.MAX_DEPTH}")
    assert rows["alice"]["status"] == "ok" and rows["bob"]["status"] == "ok"
    assert (out / "alice" / "model.py").read_text() == "# v2, after the deadline\n"
    assert not (out / "bomb").exists() and not (out / "deep").exists()
    assert not list(out.glob(".*.tmp")), "the partial snapshot is removed"
    assert [s.name for s in intake.discover(out)] == ["alice", "bob"]


def test_a_bomb_that_replaces_a_good_snapshot_leaves_no_old_files(repos, tmp_path):
    """The folder of a repository that turned hostile since the last run is removed, not left stale."""
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\n")
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    bomb = _tree_bomb(tmp_path, "bomb", fanout=10, levels=6)
    git("push", "--quiet", "--force", str(repos["alice"].bare), "refs/heads/main:refs/heads/main", cwd=bomb)
    code, printed, _ = _collect_limited(roster, out)
    assert code == 1, printed
    assert manifest(out)["alice"]["status"].startswith("error: skipped")
    assert not (out / "alice").exists()


def test_a_collect_that_stopped_half_way_can_run_again_into_the_same_folder(repos, tmp_path, monkeypatch):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\nbob {repos['bob'].bare}\n")
    out = tmp_path / "out"
    real = collect.collect_one

    def dies_on_bob(entry, *args):
        if entry.name == "bob":
            raise KeyboardInterrupt  # the run is stopped half-way (Ctrl-C, a cancelled CI job)
        return real(entry, *args)

    monkeypatch.setattr(collect, "collect_one", dies_on_bob)
    with pytest.raises(KeyboardInterrupt):
        collect.main(roster=str(roster), out=str(out), lesson=LESSON)
    assert (out / "alice").is_dir() and not (out / "bob").exists()
    monkeypatch.setattr(collect, "collect_one", real)
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 0
    assert {r["name"]: r["status"] for r in manifest(out).values()} == {"alice": "ok", "bob": "ok"}


def test_one_repository_failing_unexpectedly_does_not_stop_the_others(repos, tmp_path, monkeypatch):
    roster = tmp_path / "roster.txt"
    roster.write_text(f"alice {repos['alice'].bare}\nbob {repos['bob'].bare}\n")
    real = collect._export

    def broken_for_alice(cache, commit, target):
        if target.name == "alice":
            raise OSError("disk trouble")
        return real(cache, commit, target)

    monkeypatch.setattr(collect, "_export", broken_for_alice)
    out = tmp_path / "out"
    assert collect.main(roster=str(roster), out=str(out), lesson=LESSON) == 1
    rows = manifest(out)
    assert rows["alice"]["status"] == "error: OSError: disk trouble" and rows["bob"]["status"] == "ok"


def test_collect_runs_on_a_bare_python_as_the_instructor_workflow_does(repos, tmp_path):
    """The shipped workflow's collect step, run as written in a virtual environment with nothing
    installed (no nbformat, no torch, not even pip): the kit's checkout and git are all it has."""
    import shlex

    import yaml

    root = Path(__file__).resolve().parents[2]
    workflow = yaml.safe_load((root / "grader" / "templates" / "instructor-grade.yml").read_text())
    step = next(s for s in workflow["jobs"]["collect"]["steps"] if "grader collect" in s.get("run", ""))
    venv = tmp_path / "bare"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import nbformat"], capture_output=True)
    assert probe.returncode != 0, "the bare environment must not see the kit's packages"
    checkout = tmp_path / "checkout"
    shutil.copytree(root / "grader", checkout / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("solutions", "assignments"):
        shutil.copytree(root / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", checkout)  # the kit's default lesson, as a checkout has it
    (checkout / "roster.txt").write_text(f"alice {repos['alice'].bare}\nbob {repos['bob'].bare}\n")
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "ROSTER": "roster.txt", "DEADLINE": FEB,
           "PYTHONDONTWRITEBYTECODE": "1"}
    command = step["run"]
    assert shlex.split(command)[:3] == ["python", "-m", "grader"]
    done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (checkout / "submissions" / "alice" / "model.py").read_text() == "# v1\n"
    assert manifest(checkout / "submissions")["bob"]["status"] == "ok"
