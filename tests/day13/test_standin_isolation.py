"""Nothing that works outlives the call it was lent for (tests/fixtures/borrow/).

A submission that raises on purpose inside another graded name has the call asked again over the
grader's stand-in of that name (grader/judging/score.py, OverStandIns). Each borrowing submission here does
that in every graded name it can, takes every function a lent stand-in lets it reach, uses it at
once and keeps it (marshal) where a later child might read it: in its scratch folder, /tmp or
/dev/shm. A submission that rewrites a sibling's source for a later child tries the same with its files.
Each must score exactly what the same submission scores without the borrowing (its control), beside
honest siblings that keep full marks, in one sandboxed batch.
"""
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import (REFERENCE, components, descendants, kept_zygotes, make_submission, processes_of,  # noqa: E402
                            settled, shared_config)

from grader.running import grade as run  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402

DAY13 = load_lesson("day13")  # the lesson value these tests pass to each stage

BORROW = Path(__file__).resolve().parents[1] / "fixtures" / "borrow"
CONFIG = shared_config(call_timeout=5.0)
JOBS = 2
HONEST = ("aaa_reference", "zzz_reference")
TAG = f"day13-borrow-{os.getpid()}"
# name -> (where the harvest is kept between children, whether it borrows at all)
BORROWERS = {
    "borrow_in_memory": ("None", True),  # what a lent stand-in reaches, used in the same child only
    "borrow_scratch": ("os.path.join(os.getcwd(), '.stash')", True),
    "borrow_tmp": (repr(f"/tmp/{TAG}"), True),
    "borrow_dev_shm": (repr(f"/dev/shm/{TAG}"), True),
    "borrow_control": ("None", False),  # the same code, borrowing nothing: what the others must score
}
# A sibling's source rewritten by one child for the next: positional.py as handed in raises; the first
# call of causal_mask writes the reference's positional.py over it and ends its child, so the
# positional calls are answered by a later child. Its control hands in the same files and writes nothing.
BROKEN_POSITIONAL = (REFERENCE / "positional.py").read_text().replace(
    "    pos = torch.arange(T", "    raise RuntimeError('not written yet')\n    pos = torch.arange(T")
REWRITE = """

def causal_mask(T, device=None):
    import os
    if @@WRITE@@:
        with open(os.path.join(os.getcwd(), "positional.py"), "w") as f:
            f.write(@@POSITIONAL@@)
    os._exit(0)
""".replace("@@POSITIONAL@@", repr((REFERENCE / "positional.py").read_text()))


def _render(text: str, stash: str, steal: bool) -> str:
    text = re.sub(r"^# @@INCLUDE (\S+)$", lambda m: (BORROW / m.group(1)).read_text(), text, flags=re.M)
    text = re.sub(r"^# @@INCLUDE_BODY (\S+)$", lambda m: (REFERENCE / m.group(1)).read_text(), text, flags=re.M)
    return text.replace("@@STASH@@", stash).replace("@@STEAL@@", str(steal))


STUB_SDPA = re.sub(r"(def scaled_dot_product_attention\(.*?\"\"\"\n)(.*?)(\n\n\ndef )",
                   lambda m: m.group(1) + '    raise NotImplementedError("TODO")' + m.group(3),
                   (REFERENCE / "self_attention.py").read_text(), count=1, flags=re.S)
# A function graded over the stand-in of its own class (red team s35r, atk_sdpa_stub_reverse): its body has no
# attention in it; under the grader it raises inside its own SelfAttention, so a grader that asked the call again
# over StandInSelfAttention would lend it the grader's working attention, which _borrowed runs.
REVERSE = STUB_SDPA.replace('    raise NotImplementedError("TODO")', """    import os
    if os.getpid() == 1:  # in the grader's child
        got = _borrowed(Q, K, V, mask)
        if got is not None:
            return got
        SelfAttention._check()
    raise NotImplementedError("TODO")""", 1).replace("    def __init__(self, d_model, d_k):\n", """    _mine = True

    @staticmethod
    def _check():
        raise ValueError("raised inside SelfAttention on purpose")

    def __init__(self, d_model, d_k):
""", 1) + """

class _Pick(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, x):
        return x[self.i]


def _borrowed(Q, K, V, mask):
    helper = SelfAttention  # the grader's StandInSelfAttention while the call is asked over it
    if getattr(helper, "_mine", False):
        return None
    sa = helper(1, 1)
    sa.W_q, sa.W_k, sa.W_v = _Pick(0), _Pick(1), _Pick(2)
    return sa((Q, K, V), mask)
"""


def build(subs: Path) -> None:
    for name in HONEST:
        make_submission(subs / name, solutions=REFERENCE)
    for name, (stash, steal) in BORROWERS.items():
        folder = make_submission(subs / name, solutions=REFERENCE)
        for f in BORROW.glob("[!_]*.py"):
            (folder / f.name).write_text(_render(f.read_text(), stash, steal))
    for name, write in (("rewrite_sibling", True), ("rewrite_control", False)):
        folder = make_submission(subs / name, solutions=REFERENCE)
        (folder / "positional.py").write_text(BROKEN_POSITIONAL)
        (folder / "self_attention.py").write_text((REFERENCE / "self_attention.py").read_text()
                                                  + REWRITE.replace("@@WRITE@@", str(write)))
    make_submission(subs / "reverse_borrow", {"self_attention.py": REVERSE}, solutions=REFERENCE)
    make_submission(subs / "reverse_control", {"self_attention.py": STUB_SDPA}, solutions=REFERENCE)


@pytest.fixture(scope="module")
def batch():
    root = Path(tempfile.mkdtemp(prefix="day13-borrow-"))
    subs, out = root / "submissions", root / "out"
    build(subs)
    code = run.main(submissions=subs, out=out, jobs=JOBS, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes())
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    yield dict(code=code, records=records)
    shutil.rmtree(root, ignore_errors=True)
    for leftover in (Path(f"/tmp/{TAG}"), Path(f"/dev/shm/{TAG}")):
        leftover.unlink(missing_ok=True)
    uids = range(CONFIG.uid_base, CONFIG.uid_base + JOBS)
    assert settled(lambda: processes_of(uids)) == []
    assert settled(lambda: descendants(os.getpid())) == []


def test_the_honest_siblings_keep_full_marks(batch):
    assert batch["code"] == 0
    assert set(batch["records"]) == set(HONEST) | set(BORROWERS) | {"rewrite_sibling", "rewrite_control",
                                                                      "reverse_borrow", "reverse_control"}
    for name in HONEST:
        record = batch["records"][name]
        assert all(got == top for got, top in components(record).values()), (name, components(record))
        assert record["status"] == "ok", name


def test_the_control_loses_exactly_the_functions_that_raise(batch):
    # Its own scaled_dot_product_attention, causal_mask and positional_encoding raise: their tests are
    # lost; SelfAttention and PositionalEncoding are graded over the stand-ins, multihead and block are the
    # reference's. So a borrower that scores more than this borrowed.
    control = components(batch["records"]["borrow_control"])
    assert 0 < control["self_attention"][0] < control["self_attention"][1]
    assert 0 < control["positional"][0] < control["positional"][1]
    assert control["multihead"][0] == control["multihead"][1] and control["block"][0] == control["block"][1]


@pytest.mark.parametrize("name", [n for n in BORROWERS if n != "borrow_control"])
def test_raising_inside_another_graded_name_gains_nothing(batch, name):
    got, control = components(batch["records"][name]), components(batch["records"]["borrow_control"])
    assert got == control, (name, got, control)


def test_a_function_is_never_graded_over_the_stand_in_of_a_class_that_calls_it(batch):
    """Only a caller is graded over its callee's stand-in: a function raising inside its own class gains nothing."""
    got, control = (components(batch["records"][n]) for n in ("reverse_borrow", "reverse_control"))
    assert got == control, (got, control)
    assert control["self_attention"][0] < control["self_attention"][1]


def test_a_sibling_rewritten_for_the_next_child_is_graded_as_handed_in(batch):
    got, control = (components(batch["records"][n]) for n in ("rewrite_sibling", "rewrite_control"))
    assert got == control, (got, control)
    assert control["positional"][0] < control["positional"][1]


# -- What a child can reach ---------------------------------------------------------------------------
# A child lent one stand-in walks everything it can reach, as student code would: every object the
# collector knows, every frame, and from each its referents, globals, closures, defaults and code
# constants (code objects are not followed by the collector); every string met is searched for the
# stand-ins' and the reference's source; and every file it may list and read outside the interpreter's
# own folders. It must find the stand-in it was lent and what that one calls, and nothing else; and the
# transport must never give it a call of a graded name those implement, unless that call needs them.

WALK = r'''
import gc, json, os, sys, types

STANDIN_FILE = "<grader stand-in "
KIT_PRIVATE = @@KIT_PRIVATE@@  # the lesson's package and the reference, in the kit
# name -> a piece of its source found nowhere else, in two halves: this file never holds it whole.
MARKERS = json.loads(@@MARKERS@@)
SKIP = tuple(json.loads(@@SKIP@@))  # the interpreter's and the system's libraries
ROOTS = json.loads(@@ROOTS@@)  # every folder at the top of the file system, and the usual shared ones
FILES = json.loads(@@FILES@@)  # files of the kit a child must not read, and the few it may read outside


def _text(found, text):
    for name, (head, tail) in MARKERS.items():
        if head in text and head + tail in text:
            found.add(f"source:{name}")


def walk(*_):
    # Every object the collector tracks (the zygote's, frozen before the fork, included), each followed
    # one step, and from there through the containers the collector does not track (a dict of strings,
    # a tuple of constants) and code constants: every object Python code can reach is met this way.
    gc.unfreeze()
    found = set()
    is_tracked, referents = gc.is_tracked, gc.get_referents

    def look(obj, depth=0):
        kind = type(obj)
        if kind is str:
            if len(obj) > 40:
                _text(found, obj)
        elif kind is types.CodeType:
            if obj.co_filename.startswith(STANDIN_FILE):
                found.add("code:" + obj.co_qualname.split(".")[0])
            elif obj.co_filename.startswith(KIT_PRIVATE):
                found.add("kit:" + obj.co_filename)
            for const in obj.co_consts:
                look(const, depth + 1)
        elif kind in (tuple, list, dict, frozenset, set) and not is_tracked(obj) and depth < 100:
            for inner in referents(obj):
                look(inner, depth + 1)

    frames = []
    for frame in sys._current_frames().values():
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
    for obj in gc.get_objects() + frames:
        look(obj)
        if isinstance(obj, types.FrameType):
            look(obj.f_code)
        for inner in referents(obj):
            look(inner)
    # Every folder it may list (os.walk passes over those it may not), and the files named directly.
    paths = []
    for start in [os.getcwd(), *ROOTS]:
        # By where it leads: /bin, /sbin and /lib64 are links into /usr on a merged-/usr system (Debian's).
        start = os.path.realpath(start)
        if start.startswith(SKIP) or start in ("/proc", "/sys", "/dev"):
            continue
        for root, dirs, files in os.walk(start):
            dirs[:] = [d for d in dirs if not os.path.join(root, d).startswith(SKIP)]
            paths += [os.path.join(root, name) for name in files]
    for path in paths + FILES:
        try:
            with open(path, "rb") as f:
                _text(found, f.read(2 << 20).decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
    raise RuntimeError("FOUND " + json.dumps(sorted(found)))
'''


SHARED = {"/tmp", "/var/tmp", "/dev/shm", "/run", "/run/lock", "/root", "/home"}


def _markers() -> dict[str, tuple[str, str]]:
    """Two lines of each top-level definition of the stand-ins file, and the reference's marker, halved."""
    lines = (REFERENCE.parents[1] / "grader" / "day13" / "standins.py").read_text().splitlines()
    markers = {}
    for i, line in enumerate(lines):
        m = re.match(r"(?:def|class) (\w+)", line)
        if m:
            markers[m.group(1)] = line + "\n" + lines[i + 1]
    markers["reference"] = "# BEGIN SOLUTION (Task"
    return {name: (text[:len(text) // 2], text[len(text) // 2:]) for name, text in markers.items()}


@pytest.fixture(scope="module")
def walker():
    from grader.sandbox.confinement import prepare_scratch, read_only_paths, slot_uid
    from grader.sandbox.transport import SandboxTransport
    from grader.sandbox.zygote import Zygote

    # Room and time for the walk itself (a million objects); every other layer as in a grading run.
    config = dataclasses.replace(CONFIG, call_timeout=120.0, cpu_seconds=120, memory_bytes=2 << 30)
    kit = REFERENCE.parents[1]
    skip = sorted({p for p in read_only_paths() if not p.startswith("/proc") and os.path.isdir(p)} | {"/usr", "/lib"})
    source = (WALK.replace("@@MARKERS@@", repr(json.dumps(_markers())))
              .replace("@@SKIP@@", repr(json.dumps(skip)))
              .replace("@@KIT_PRIVATE@@", repr((str(kit / "grader" / "day13"), str(kit / "solutions"))))
              .replace("@@ROOTS@@", repr(json.dumps(sorted({f"/{e}" for e in os.listdir("/")} | SHARED))))
              .replace("@@FILES@@", repr(json.dumps([str(p) for p in sorted((kit / "grader" / "day13").glob("*.py"))]
                                                    + [str(p) for p in sorted((kit / "solutions" / "day13").glob("*.py"))]
                                                    + [p for p in read_only_paths() if os.path.isfile(p)]))))
    work = Path(tempfile.mkdtemp(prefix="day13-walk-"))
    os.chmod(work, 0o711)
    scratch = make_submission(work / "walker", {"walk.py": source}, reference=False)
    prepare_scratch(scratch, slot_uid(config, 0))
    zygote = Zygote(slots=1, config=config, lesson=DAY13)
    zygote.wait_ready()

    def walk(lent: dict) -> set[str]:
        with SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config) as t:
            header = {"op": "function", "module": "walk", "name": "walk", "args": []}
            if lent:
                header["standins_source"] = lent
            answer, _ = t.call(header, {})
        message = (answer.get("error") or {}).get("message", "")
        assert message.startswith("FOUND "), answer
        return set(json.loads(message[len("FOUND "):]))

    yield walk, zygote.standins
    zygote.close()
    shutil.rmtree(work)


def test_a_child_lent_nothing_reaches_no_stand_in_and_no_reference(walker):
    walk, _ = walker
    assert walk({}) == set()


@pytest.mark.parametrize("name", ["scaled_dot_product_attention", "causal_mask", "StandInSelfAttention",
                                  "StandInAttention", "make", "positional_encoding"])
def test_a_child_lent_one_stand_in_reaches_it_and_what_it_calls_and_nothing_else(walker, name):
    from grader.sandbox import lending

    walk, lent = walker
    found = walk({name: lent.units[name]})
    _, closures = lending.cut((REFERENCE.parents[1] / "grader" / "day13" / "standins.py").read_text())
    reached = {f.split(":", 1)[1] for f in found}
    assert f"code:{name}" in found, found  # the walk sees what is there
    assert reached <= closures[name], (name, found)
    # Whatever it reached, the transport never gives this child a call of a graded name it implements,
    # unless that call needs the stand-in (lending.refuses).
    for graded in sorted(set().union(*(lent.implements.get(r, ()) for r in reached))):
        module, function = graded.split(".")
        header = {"op": "function" if function[0].islower() else "module", "module": module,
                  ("name" if function[0].islower() else "cls"): function}
        assert lent.refuses({name}, header) or name in lent.needed(header), (name, graded)
