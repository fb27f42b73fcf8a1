"""Where the kit is checked out never changes a grade.

An instructor clones the kit into a folder other users cannot enter (`mktemp -d`, a 0700 or 0750
home). The sandboxed child runs as an unprivileged uid, so whatever torch imports lazily at call time
would be unreadable to it, and a correct submission would lose points to "No module named ...". These
tests grade from a copy of the kit (its virtual environment included) inside such a folder.
"""
import json
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, TOY, descendants, settled, private_kit_copy, run_kit, uid_base_for_tests  # noqa: E402

from grader.lesson import lesson_names, load_lesson  # noqa: E402

# Every lesson's hidden tests, as paths in the kit: none may be in the child's view.
HIDDEN_TESTS = tuple(str(load_lesson(name).tests_folder.relative_to(KIT)) for name in lesson_names())
@pytest.fixture(scope="module")
def private_kit():
    with private_kit_copy("kit-private-") as kit:
        yield kit


# The engine as `python -m grader grade` runs it, with this module's own sandbox uids and a call time
# limit generous enough for a loaded machine (a child's first broadcast_shapes imports sympy).
GRADE = """
import sys
from grader.running import grade as run
from grader.sandbox import SandboxConfig
from grader.lesson import load_lesson
config = SandboxConfig(call_timeout=30.0, uid_base={uid_base})
# The lesson by name or by path (sys.argv[3]), as the kit's copy finds it.
sys.exit(run.main(submissions=sys.argv[1], out=sys.argv[2], jobs=2, config=config, lesson=load_lesson(sys.argv[3])))
""".format(uid_base=uid_base_for_tests(3))


def test_the_child_sees_only_what_it_must_read_of_the_private_folder(private_kit):
    # Without Landlock too: the kit's hidden tests and reference are not in the child's view at all,
    # while the environment it imports from is, at its usual path.
    script = textwrap.dedent("""
        import json, os, shutil, sys, tempfile
        from pathlib import Path
        from grader.sandbox import SandboxConfig
        from grader.sandbox.confinement import prepare_scratch, slot_uid
        from grader.sandbox.transport import SandboxTransport
        from grader.sandbox.zygote import Zygote
        layers = ("pidns", "netns", "rlimits", "uid", "seccomp")
        config = SandboxConfig(call_timeout=30.0, uid_base={uid_base}, layers=layers)
        kit = Path.cwd()
        work = Path(tempfile.mkdtemp(prefix="kit-view-"))
        os.chmod(work, 0o711)
        (work / "look.py").write_text(
            "import os, sys, torch\\n"
            "def look(kit):\\n"
            "    import torch.fx.experimental.symbolic_shapes\\n"
            "    seen = [os.path.exists(os.path.join(kit, p)) for p in ('grader', 'solutions', *{hidden!r}, '.venv')]\\n"
            "    return torch.tensor(seen + [os.path.isdir(sys.prefix)])\\n")
        from grader.lesson import load_lesson
        with Zygote(slots=1, config=config, lesson=load_lesson(str(kit / {toy!r}))) as zygote:
            zygote.wait_ready()
            prepare_scratch(work, slot_uid(config, 0))
            with SandboxTransport(zygote=zygote, slot=0, scratch=work) as t:
                header, arrays = t.call({{"op": "function", "module": "look", "name": "look", "args": [str(kit)]}}, {{}})
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps({{"error": header["error"], "seen": arrays.get("out0", []).tolist() if not header["error"] else None,
                          "view": zygote.view, "layers": t.isolation}}))
    """).format(uid_base=uid_base_for_tests(3), hidden=HIDDEN_TESTS, toy=str(TOY.relative_to(KIT)))
    done = run_kit(private_kit, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["error"] is None, found
    if os.geteuid() != 0:  # no uid drop: the child is the instructor, who may read the kit
        assert found["view"]["covered"] == []
        return
    assert "landlock" not in found["layers"] or not found["layers"]["landlock"]
    # The private folder, and the one holding the base Python if others cannot enter it (pyenv under /root).
    assert found["view"]["covered"] == sorted({str(private_kit.parent), *_closed_ancestor(sys.base_prefix)})
    base = [str(Path(sys.base_prefix).resolve())] if _closed_ancestor(sys.base_prefix) else []
    assert found["view"]["bound"] == sorted({str(private_kit / ".venv"), *base})
    # grader/, solutions/, every lesson's hidden tests: absent; the environment: present
    assert found["seen"] == [False, False, *[False] * len(HIDDEN_TESTS), True, True]


def _closed_ancestor(path) -> list[str]:
    """The outermost folder above (or at) `path` that other users may not enter, if any."""
    resolved = Path(path).resolve()
    for folder in [*reversed(resolved.parents), resolved]:
        if folder != Path("/") and not folder.stat().st_mode & 0o001:
            return [str(folder)]
    return []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to a sandbox uid that a file can be hidden from")
def test_an_unreadable_file_on_the_import_path_stops_the_run_with_one_message(private_kit, tmp_path):
    # A package installed with umask 077, say: the start-up check finds it, the run grades nothing.
    site = next((private_kit / ".venv" / "lib").glob("python3*/site-packages"))
    private = site / "zz_private_pkg"
    private.mkdir(mode=0o700)  # a new folder in the copy: no linked file changes
    (private / "__init__.py").write_text("")
    try:
        subs = tmp_path / "subs"
        shutil.copytree(TOY / "solutions", subs / "ada")
        out = tmp_path / "out"
        toy = private_kit / TOY.relative_to(KIT)  # the lesson as the kit's copy holds it
        done = run_kit(private_kit, "-c", GRADE, str(subs), str(out), str(toy))
        assert done.returncode == 1, done.stdout + done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Nothing was graded" in lines[0], done.stderr
        assert str(private) in lines[0] and "chmod -R o+rX" in lines[0]
        assert not (out / "ada" / "record.json").exists()
        check = run_kit(private_kit, "-m", "grader.sandbox", "--check")
        assert check.returncode == 1
        assert str(private) in json.loads(check.stdout)["child_view"]["refused"]
    finally:
        shutil.rmtree(private)
    assert settled(lambda: descendants(os.getpid())) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="root enters any folder: the plan is built for the sandbox uid")
def test_the_view_covers_the_outermost_closed_folder_and_binds_back_only_what_is_needed():
    from grader.sandbox.confinement import view_plan

    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="kit-plan-"))  # /tmp: open to all, unlike tmp_path
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        (home / "kit" / ".venv" / "lib").mkdir(parents=True)
        (home / "kit" / "grader").mkdir()
        (home / "inner").mkdir(mode=0o700)  # a closed folder inside a closed folder: one cover
        (home / "inner" / "python").mkdir()
        (base / "open" / "python").mkdir(parents=True)
        (home / "link").symlink_to(base / "open" / "python")  # named through a closed folder, open where it is
        home.chmod(0o750)
        wanted = [home / "kit" / ".venv", home / "kit" / ".venv" / "lib", home / "inner" / "python",
                  home / "link", base / "open" / "python"]
        plan = view_plan([str(p) for p in wanted])
        assert plan == [(str(home), [(str(home / "inner" / "python"), str(home / "inner" / "python")),
                                     (str(home / "kit" / ".venv"), str(home / "kit" / ".venv")),
                                     (str(home / "link"), str(base / "open" / "python"))])]
        assert view_plan([str(base / "open" / "python")]) == []  # nothing to cover on an open path
    finally:
        home.chmod(0o755)
        shutil.rmtree(base)


def test_a_view_that_cannot_be_set_up_is_refused_with_what_to_do():
    # A container whose root may not mount, say: one message naming the folder and the way out.
    from grader.sandbox.startup import verdict

    message = verdict({"setup_error": "OSError: [Errno 1] mount tmpfs on /home/ann: Operation not permitted"},
                      64000, covered=["/home/ann"])
    assert "uid (64000)" in message and "Operation not permitted" in message
    assert "/home/ann" in message and "chmod o+x" in message and "Nothing was graded" in message
    failed = {"probe": {"hidden": [], "unreadable": [], "unreadable_count": 0,
                        "failed_imports": {"sympy": "ModuleNotFoundError: No module named 'sympy'"}}}
    assert "cannot import sympy (ModuleNotFoundError" in verdict(failed, 64000, covered=[])
    assert verdict({"probe": {**failed["probe"], "failed_imports": {}}}, 64000, covered=[]) == ""
