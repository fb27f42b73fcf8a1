"""What one sandboxed child leaves behind, no later child reads: its files, SysV IPC, POSIX message
queues, keys in the kernel's keyrings, abstract Unix sockets, files in /tmp and /dev/shm, what it printed.

Each channel is tried as a submission would, in two children: the first makes something, the second
(a fresh child of the same worker slot, so the same sandbox uid, or a child alive at the same time in
another slot) looks for it. The children here have no audit hook (the zygote installs none), so they
may use ctypes: each test proves the layer below the hook on its own, as if a student had got past it.
"""
import ctypes
import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, descendants, make_submission, processes_of, settled, uid_base_for_tests  # noqa: E402

from grader.lesson import load_lesson  # noqa: E402

from grader.sandbox import SandboxConfig  # noqa: E402
from grader.sandbox.confinement import is_root, prepare_scratch, slot_uid  # noqa: E402
from grader.sandbox.transport import SandboxTransport  # noqa: E402
from grader.sandbox.zygote import Zygote  # noqa: E402

LESSON = load_lesson(str(TOY))  # the zygote's lesson: any will do, the probes are the test's own modules

CONFIG = SandboxConfig(call_timeout=5.0, spawn_timeout=10, cpu_seconds=6, uid_base=uid_base_for_tests(8))
SLOTS = 2
SANDBOX_UIDS = range(CONFIG.uid_base, CONFIG.uid_base + SLOTS)
TAG = f"kit-channel-{os.getpid()}"
KEY = 0x0D13_0000 + os.getpid() % 0xFFFF  # a SysV key of this test run only

PROBE = f"""
import ctypes, ctypes.util, errno, os, socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEEP = []


def _result(value):
    return value if value >= 0 else -ctypes.get_errno()


def sysv_make():
    return _result(libc.shmget({KEY}, 4096, 0o1000 | 0o666))  # IPC_CREAT


def sysv_find():
    return _result(libc.shmget({KEY}, 0, 0))


def mqueue_make():
    return _result(libc.mq_open(b"/{TAG}", os.O_CREAT | os.O_RDWR, 0o666, None))


def mqueue_find():
    return _result(libc.mq_open(b"/{TAG}", os.O_RDWR))


SYS_ADD_KEY, SYS_REQUEST_KEY = {{"x86_64": (248, 249), "aarch64": (217, 218)}}[os.uname().machine]
USER_KEYRING = -4


def key_make():
    return _result(libc.syscall(SYS_ADD_KEY, b"user", b"{TAG}", b"secret", 6, USER_KEYRING))


def key_find():
    return _result(libc.syscall(SYS_REQUEST_KEY, b"user", b"{TAG}", None, 0))


def file_make(path):
    try:
        with open(path, "w") as f:
            f.write("kept")
        return 1
    except OSError as exc:
        return -exc.errno


def file_find(path):
    return 1 if os.path.exists(path) else 0


def printed_make():
    print("kept in the output file", flush=True)
    return 1


def printed_find():
    return 1 if b"kept in the output" in os.pread(1, 1 << 16, 0) else 0


def abstract_listen():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(b"\\0{TAG}")
        s.listen(1)
    except OSError as exc:
        return -exc.errno
    KEEP.append(s)
    return 1


def abstract_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(b"\\0{TAG}")
        return 1
    except OSError as exc:
        return -exc.errno
"""


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(slots=SLOTS, config=CONFIG, install=None, lesson=LESSON)  # no audit hook: ctypes stays usable
    z.wait_ready()
    yield z
    z.close()
    assert settled(lambda: descendants(os.getpid())) == []


@pytest.fixture
def child(zygote):
    """child(slot) -> a transport over a fresh copy of the probe submission."""
    opened = []
    work = Path(tempfile.mkdtemp(prefix="kit-test-channels-"))
    os.chmod(work, 0o711)

    def make(slot=0):
        scratch = make_submission(work / f"sub{len(opened)}", {"probe.py": PROBE}, reference=False)
        prepare_scratch(scratch, slot_uid(CONFIG, slot))
        t = SandboxTransport(zygote=zygote, slot=slot, scratch=scratch, config=CONFIG)
        opened.append(t)
        return t

    yield make
    for t in opened:
        t.close()
    shutil.rmtree(work)
    for leftover in (f"/tmp/{TAG}", f"/dev/shm/{TAG}", f"/var/tmp/{TAG}"):
        Path(leftover).unlink(missing_ok=True)
    _remove_segment()  # one a failing run left in the machine's own IPC namespace
    assert settled(lambda: processes_of(SANDBOX_UIDS)) == []


def _remove_segment() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(KEY, 0, 0)
    if shmid >= 0:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


def ask(t, name, *args) -> int:
    header, _ = t.call({"op": "function", "module": "probe", "name": name, "args": list(args)}, {})
    assert header["error"] is None, header["error"]
    return header["outputs"][0]["value"]


@pytest.mark.parametrize("kind", ["sysv", "mqueue", "key"])
def test_kernel_ipc_made_by_one_child_is_gone_for_the_next(child, kind):
    first = child(slot=0)
    made = ask(first, f"{kind}_make")
    first.close()  # that child is gone; the next one of this slot has the same uid
    found = ask(child(slot=0), f"{kind}_find")
    assert found < 0, (kind, made, found)


@pytest.mark.skipif(not is_root(), reason="an unprivileged grader cannot take an IPC namespace")
@pytest.mark.parametrize("layer", ["ipcns", "seccomp"])
def test_each_layer_alone_closes_ipc(layer):
    # The IPC namespace without seccomp, and seccomp without the namespace: either one is enough.
    config = dataclasses.replace(CONFIG, layers=tuple(name for name in CONFIG.layers if name != layer))
    work = Path(tempfile.mkdtemp(prefix="kit-test-channels-"))
    os.chmod(work, 0o711)  # like run.py's scratch root: the sandbox uid may enter it (pytest's tmp_path it may not)
    try:
        with Zygote(slots=1, config=config, install=None, lesson=LESSON) as zygote:
            for kind in ("sysv", "mqueue"):
                found = []
                for step in ("make", "find"):
                    scratch = make_submission(work / f"{kind}-{step}", {"probe.py": PROBE}, reference=False)
                    with SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config) as t:
                        found.append(ask(t, f"{kind}_{step}"))
                assert found[1] < 0, (layer, kind, found)
    finally:
        _remove_segment()
        shutil.rmtree(work)


def test_each_child_works_in_its_own_copy_which_goes_with_it(child):
    t = child(slot=0)
    intake = t.scratch  # the submission as handed in: the grader's, never the child's
    assert ask(t, "file_make", "mine.txt") == 1 and ask(t, "file_find", "mine.txt") == 1
    assert ask(t, "file_make", str(intake / "planted.txt")) < 0
    t._stop_child()
    assert ask(t, "file_find", "mine.txt") == 0  # the next child starts from what was handed in
    t.close()
    assert [p.name for p in intake.parent.iterdir()] == [intake.name]  # every child's copy is gone
    assert sorted(p.name for p in intake.iterdir()) == ["probe.py"]


def test_what_one_child_printed_is_not_read_by_the_next(child):
    # stdout is a file the grader keeps per submission: a fresh child finds it empty.
    t = child(slot=0)
    assert ask(t, "printed_make") == 1 and ask(t, "printed_find") == 1  # the probe can read its own
    t._stop_child()  # the next call goes to a fresh child of the same submission
    assert ask(t, "printed_find") == 0


# The folder is the parameter, the file's name is this process's: parallel workers (pytest-xdist) must
# collect the same test ids, so no pid may appear in them.
@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm", "/var/tmp"])
def test_shared_temporary_folders_carry_nothing_to_the_next_child(child, folder):
    path = f"{folder}/{TAG}"
    first = child(slot=0)
    made = ask(first, "file_make", path)
    first.close()
    assert ask(child(slot=0), "file_find", path) == 0, (path, made)
    assert not os.path.exists(path), path  # nor does anything reach the machine's own folder


@pytest.mark.skipif(not is_root(), reason="without root every child is the grader's own uid")
def test_without_landlock_a_child_can_write_its_own_copy_and_nothing_in_the_shared_folders():
    # An older kernel has no Landlock. The slot's uid could write in /tmp, /var/tmp, /dev/shm and /run/lock, which
    # no quota bounds: red team s38r's thread of mkdir in /dev/shm took ~0.8 GB of the kernel's memory before the
    # sweep removed it, one such child per worker slot at a time. The child's own mount namespace has them read-only.
    config = dataclasses.replace(CONFIG, layers=tuple(name for name in CONFIG.layers if name != "landlock"))
    work = Path(tempfile.mkdtemp(prefix="kit-test-channels-"))
    os.chmod(work, 0o711)
    folders = [f for f in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock") if os.path.isdir(f)]
    try:
        with Zygote(slots=1, config=config, install=None, lesson=LESSON) as zygote:
            scratch = make_submission(work / "sub", {"probe.py": PROBE}, reference=False)
            with SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config) as t:
                made = {folder: ask(t, "file_make", f"{folder}/{TAG}") for folder in folders}
                own = ask(t, "file_make", f"./{TAG}")
                assert t.isolation.get("landlock") == 0, t.isolation
        assert own == 1  # its own copy stays writable
        assert all(result < 0 for result in made.values()), made
    finally:
        for folder in folders:
            Path(f"{folder}/{TAG}").unlink(missing_ok=True)
        shutil.rmtree(work)


@pytest.mark.skipif(not is_root(), reason="without root every child is the grader's own uid")
def test_without_landlock_shared_folders_still_carry_nothing_to_the_next_child():
    # An older kernel has no Landlock: whatever the slot's uid could leave in /tmp or /dev/shm (they are read-only
    # in its own view; test above), the grader removes once its child is gone.
    config = dataclasses.replace(CONFIG, layers=tuple(name for name in CONFIG.layers if name != "landlock"))
    work = Path(tempfile.mkdtemp(prefix="kit-test-channels-"))
    os.chmod(work, 0o711)
    paths = [f"/tmp/{TAG}", f"/dev/shm/{TAG}"]
    try:
        with Zygote(slots=1, config=config, install=None, lesson=LESSON) as zygote:
            for path in paths:
                found = []
                for step in ("make", "find"):
                    scratch = make_submission(work / f"{len(path)}-{step}", {"probe.py": PROBE}, reference=False)
                    with SandboxTransport(zygote=zygote, slot=0, scratch=scratch, config=config) as t:
                        found.append(ask(t, f"file_{step}", path))
                assert found[1] == 0, (path, found)  # nothing there for the next child
    finally:
        for path in paths:
            Path(path).unlink(missing_ok=True)
        shutil.rmtree(work)


def test_an_abstract_socket_of_a_live_child_cannot_be_reached_from_another(child):
    listening = child(slot=0)
    made = ask(listening, "abstract_listen")
    other = child(slot=1)
    assert ask(other, "abstract_connect") < 0, made
    listening.close()


@pytest.mark.skipif(not is_root(), reason="an unprivileged grader cannot take a SysV namespace; seccomp is tested")
def test_the_child_records_its_own_ipc_namespace(child):
    t = child(slot=0)
    ask(t, "file_find", "/")
    assert t.isolation.get("ipcns") is True, t.isolation


@pytest.mark.skipif(not is_root(), reason="files of another uid are made by chown, as root")
def test_the_sweep_of_shared_folders_survives_an_entry_that_vanishes_while_it_looks(tmp_path, monkeypatch):
    # /tmp is busy while a class is graded (other runs, the suite's own workers): an entry removed between the
    # folder's listing and its lstat made the sweep give up on the whole folder, so a child without Landlock could
    # leave a file there for the next child of its slot (seen once in a clean-clone CI run).
    from grader.sandbox import confinement

    uid = 64999
    left = tmp_path / "left-by-the-child"
    left.write_text("for the next child")
    os.chown(left, uid, uid)
    gone = tmp_path / "removed-meanwhile"
    gone.write_text("")
    real_scandir = os.scandir

    class Listing:
        def __init__(self, folder):
            self.inner = real_scandir(folder)

        def __enter__(self):
            entries = list(self.inner)
            gone.unlink()  # after the listing, before any entry's stat
            return iter(sorted(entries, key=lambda e: e.name != gone.name))

        def __exit__(self, *exc):
            self.inner.close()

    monkeypatch.setattr(confinement, "SHARED_FOLDERS", (str(tmp_path),))
    monkeypatch.setattr(confinement.os, "scandir", Listing)
    confinement.sweep_shared(uid)
    assert not left.exists()


def test_where_mounts_are_refused_the_shared_folders_are_left_as_they_are():
    # A container without CAP_SYS_ADMIN refuses unshare(CLONE_NEWNS) and mount even to root: the child must still
    # start (sweep_shared removes what its uid leaves), not fail its setup.
    from grader.sandbox import confinement

    class Refusing:
        def unshare(self, flags):
            return -1

        def mount(self, *args):
            return -1

    assert confinement.shared_read_only(Refusing(), "/nonexistent-scratch", entered=False) is False
    assert confinement.shared_read_only(Refusing(), "/nonexistent-scratch", entered=True) is False
