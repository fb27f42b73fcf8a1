"""The layers around a student child, and the scratch folder it may write.

A child forked by the zygote (grader/sandbox/zygote.py) is still root and still holds the zygote's
file descriptors; confine() turns it into a process that can do nothing but answer calls on its
socket. In order:

    stdio to the child's output file, every other fd closed ─► private mount view (view_plan) ─►
    scratch as working folder and home ─► rlimits ─► uid drop ─► Landlock ─► seccomp ─► audit hook

plus its own network namespace, taken at the fork (own_network). Each layer that took is recorded
in `layers`, which the grader keeps with every result; without root the layers that need it are
skipped. The grader's side of the same layers: the scratch copy belongs to the slot's uid
(prepare_scratch) and sits on a tmpfs limited in bytes and in files and folders (mount_quota).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import shutil
import signal
import socket
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox import SandboxConfig

KIT_ROOT = Path(__file__).resolve().parents[2]

# Linux constants (include/uapi); same values on x86_64 and aarch64.
CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWIPC, CLONE_THREAD = 0x40000000, 0x00020000, 0x08000000, 0x00010000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 38, 22
SECCOMP_MODE_FILTER = 2
SYS_LANDLOCK = {"create": 444, "add_rule": 445, "restrict": 446}

# What a child's environment keeps of the zygote's (grader/sandbox/zygote.py sets these): locale and the libraries'
# thread and allocator settings.
CHILD_ENVIRONMENT = ("LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE",
                     "MALLOC_ARENA_MAX", "MPLBACKEND")

# Exit statuses the child uses for limits it hit (a student's os._exit could fake them, but only to
# describe its own failure differently).
EXIT_FILE_LIMIT, EXIT_CPU_LIMIT = 213, 214
EXIT_CHANNEL = 215  # the child's channel to the grader is no longer the one it was given (transport.serve)


def is_root() -> bool:
    return os.geteuid() == 0


def slot_uid(config: SandboxConfig, slot: int) -> int | None:
    return config.uid_base + slot if is_root() and "uid" in config.layers else None


def enterable_temp_dir() -> str:
    """The temporary folder, or a system one when the sandbox's unprivileged uid could not enter it
    (TMPDIR under a 0700 folder such as pytest's or /root's): scratch copies must be reachable."""
    base = os.path.realpath(tempfile.gettempdir())
    if not is_root() or closed_ancestor(os.path.join(base, "x")) is None:
        return base
    for candidate in ("/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and closed_ancestor(os.path.join(real, "x")) is None:
            return real
    raise RuntimeError(f"no temporary folder that the sandbox's unprivileged uid can enter ({base} is not): "
                       "set TMPDIR to a folder whose every parent is world-executable (chmod o+x)")


def prepare_scratch(path: Path, uid: int | None) -> None:
    """Give the scratch copy to the slot's uid (it is the only place the child may write)."""
    if uid is None:
        return
    # The parent only needs to be traversable, not listable, by the sandbox uid. A stack, not
    # os.walk (which recurses once per folder level): a deep tree costs no Python recursion.
    folders = [os.fspath(path)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):  # e.g. a path too long: that entry stays root's
                        os.lchown(entry.path, uid, uid)
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
        except OSError:
            continue
    os.lchown(path, uid, uid)
    os.chmod(path, 0o700)


def mount_quota(folder: Path, config: SandboxConfig) -> bool:
    """Mount a tmpfs limited in bytes and in files and folders on `folder` (root only): scratch copies made
    inside it cannot fill the disk, nor the kernel's memory with empty folders."""
    if not (is_root() and "quota" in config.layers):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={config.scratch_quota_bytes},nr_inodes={config.scratch_inodes},mode=0711".encode()
    # noexec: a shared object a submission hands in or writes there cannot be mapped to run (native code would
    # run below every guard of the child's: the audit hook, the switched-off kernels).
    return libc.mount(b"tmpfs", str(folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0


def unmount_quota(folder: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(folder).encode(), 2)  # MNT_DETACH: never blocks on a busy mount


# Compiled modules: Python imports them as readily as source, but the scan, the similarity report and a person
# reviewing read source only. The child's import path refuses them (the executor's source-only hook), but that hook
# sits in sys.path_hooks, which the submission's own code can take out again: so they are not in its copy at all.
# The grader's copy keeps them, for the scan to name.
COMPILED = (".pyc", ".pyo", ".so", ".pyd")


def child_copy(submission: Path, uid: int | None) -> Path:
    """A fresh writable copy of `submission` (intake's copy, as handed in) for one child, beside it, without its
    compiled modules (COMPILED).

    Every child starts from what was handed in, and what it writes goes with its copy when it ends
    (discard_copy): nothing one child writes is read by a later one. Intake's copy stays the
    grader's (a child cannot read it, let alone change it), so the scan and the deliverables checks
    read what was handed in. Regular files and folders only (intake's copy has nothing else); a
    stack, not recursion, for any depth intake allowed."""
    dest = Path(tempfile.mkdtemp(prefix="c", dir=Path(submission).parent))
    try:
        folders = [(os.fspath(submission), os.fspath(dest))]
        while folders:
            source, target = folders.pop()
            with os.scandir(source) as entries:
                for entry in entries:
                    where = os.path.join(target, entry.name)
                    if entry.is_dir(follow_symlinks=False):
                        os.mkdir(where)
                        folders.append((entry.path, where))
                    elif entry.is_file(follow_symlinks=False) and not entry.name.lower().endswith(COMPILED):
                        shutil.copyfile(entry.path, where, follow_symlinks=False)
        prepare_scratch(dest, uid)
    except BaseException:
        remove_tree(dest)
        raise
    return dest


SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # folders every user may write in


def sweep_shared(uid: int | None) -> None:
    """Remove what `uid` (a worker slot's, used by nothing else) left at the top of the folders every
    user may write in, once its child is gone: where Landlock is missing they are the one place a
    child could leave something for the next child of its slot. Nothing is followed: an entry is
    judged by lstat, and a folder is removed by remove_tree."""
    if uid is None:
        return
    for folder in SHARED_FOLDERS:
        mine = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    # One entry at a time: another process may remove one between the listing and its lstat (/tmp
                    # is busy while a class is graded), which must not end the sweep of the whole folder.
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_uid == uid:
                            mine.append(entry.path)
        except OSError:
            continue
        for path in mine:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    remove_tree(Path(path))
                else:
                    os.unlink(path)


def discard_copy(copy: Path) -> int:
    """Remove a child's copy once the child is gone, whatever it left there; how many files and folders went.
    Never raises: what cannot go stays for the slot's tmpfs, or the run's folder, to take with it."""
    return _remove(Path(copy))[1]


def remove_tree(path: Path) -> bool:
    """Delete `path` and everything under it, whatever a student's process left there; True if all went."""
    return _remove(Path(path))[0]


def _remove(path: Path) -> tuple[bool, int]:
    """remove_tree, and how many entries (files and folders) went with it.

    Nothing is made on the filesystem being emptied (a child may have used up its every inode: a rename
    needs none) and nothing grows with the tree: no recursion, no path that grows with the depth, no list of
    the folders met. The folder is first renamed to a free name beside it (so its name is free at once) and
    becomes the holding folder; each folder met is moved up into it before it is emptied, so a tree 10,000
    levels deep is 10,000 shallow folders, and each is read as it is emptied, so a folder of a million
    entries is never held in memory. Folders a process made unreadable or read-only (chmod 000) get their
    owner's rights back first; the grader is that owner, or root."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return True, 1
    except FileNotFoundError:
        return True, 0
    except OSError:
        return False, 0
    try:
        holding = path.parent / _free_name(os.fspath(path.parent), ".discard-" + os.urandom(6).hex() + "-")
        _own(path)
        os.rename(path, holding)
        top = os.open(holding, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False, 0
    gone, names = 0, [0]
    try:
        while True:  # a pass over the holding folder; the folders moved up into it are met by a later one
            done = 0
            with os.scandir(top) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            files, moved = _empty(entry.name, top, names)
                            gone, done = gone + files, done + files + moved
                            os.rmdir(entry.name, dir_fd=top)
                        else:
                            os.unlink(entry.name, dir_fd=top)
                        gone, done = gone + 1, done + 1
            if not done:  # nothing left, or nothing more that can go
                break
    finally:
        os.close(top)
    try:
        os.rmdir(holding)
    except OSError:
        return False, gone
    return True, gone + 1


def _empty(name: str, top: int, names: list[int]) -> tuple[int, int]:
    """Unlink the files of the folder `name` in `top` and move its folders up into `top`: how many files went,
    and how many folders moved."""
    gone = moved = 0
    _own(name, top)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    try:
        while True:  # entries removed while a folder is read may make the reading miss some: read it again
            before = gone + moved
            with os.scandir(fd) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            _own(entry.name, fd)  # renaming a folder rewrites its "..": it must be writable
                            names[0] += 1
                            os.rename(entry.name, _free_name(top, str(names[0])), src_dir_fd=fd, dst_dir_fd=top)
                            moved += 1
                        else:
                            os.unlink(entry.name, dir_fd=fd)
                            gone += 1
            if gone + moved == before:
                return gone, moved
    finally:
        os.close(fd)


def _free_name(folder, name: str) -> str:
    """`name`, or `name` with a suffix, that names nothing in `folder` (a path or a folder's fd): a rename onto an
    empty folder would replace it."""
    candidate, n = name, 0
    while True:
        try:
            os.lstat(candidate, dir_fd=folder) if isinstance(folder, int) else os.lstat(os.path.join(folder, candidate))
        except FileNotFoundError:
            return candidate
        n += 1
        candidate = f"{name}.{n}"


def _own(name, dir_fd=None) -> None:
    """Give a folder its owner's full rights back (root needs none: it is never refused)."""
    if os.geteuid() != 0:
        with contextlib.suppress(OSError):
            os.chmod(name, 0o700, dir_fd=dir_fd)


# --------------------------------------------------------------------------- in the child


@dataclass(frozen=True)
class ChildPaths:
    """What confine() reads of this machine's paths: the same for every child of one zygote, so the zygote
    finds it once, before its first fork, instead of each child with a few hundred stat calls."""

    import_path: tuple[str, ...]  # sys.path without any kit (the child puts its scratch copy first)
    readable: tuple[str, ...]  # read_only_paths(): what Landlock lets a child read
    hides_kit: bool  # no readable folder holds the kit, so Landlock hides it

    @classmethod
    def find(cls) -> "ChildPaths":
        # No kit on the child's path: this one, nor another copy a venv's editable install (.pth) names.
        # Decided before the private view, which covers folders other users may not enter: a kit in one
        # of those would no longer look like a kit, stay on the path, and be unreadable to the child.
        readable = tuple(read_only_paths())
        return cls(import_path=tuple(p for p in sys.path if p and Path(p).resolve() != KIT_ROOT and not _is_a_kit(p)),
                   readable=readable, hides_kit=not any(_contains(p, KIT_ROOT) for p in readable))


def confine(*, scratch: str, uid: int | None, out_fd: int, keep_fd: int, config: SandboxConfig, libc,
            layers: dict, view: list, seccomp: bytes | None, arm, paths: ChildPaths | None = None) -> None:
    """Every layer, in order, in a child just forked by the zygote; what took goes into `layers`.

    `view` is the zygote's view_plan(), `seccomp` its precompiled filter (None: compiled here), `arm`
    what grader/running/forbidden.py's prepare() returned (it installs the audit hook, the last layer),
    `paths` the zygote's ChildPaths.find() (None: found here)."""
    paths = paths or ChildPaths.find()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(devnull)
    os.close(out_fd)
    # Fresh line-buffered streams on the redirected fds: nothing printed waits in a buffer.
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    # Python ignores SIGXFSZ, and as PID 1 of its namespace the child would ignore a default action
    # too: a handler makes writing past RLIMIT_FSIZE (or CPU past RLIMIT_CPU) end it, as a stated fault.
    signal.signal(signal.SIGXFSZ, lambda *_: os._exit(EXIT_FILE_LIMIT))
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(EXIT_CPU_LIMIT))
    # A session of its own: where the kernel groups the scheduler by session (autogroup, on by default), each child
    # then gets one share of the CPU however many threads it starts, and a child that spins 40 threads slows a
    # classmate's child graded beside it as one busy process would, not as forty.
    with contextlib.suppress(OSError):
        os.setsid()
    # Nothing but stdio and the call socket stays open (no zygote control socket, no stray fd).
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, 1 << 16)
    sys.path[:] = [scratch, *paths.import_path]
    if view and uid is not None:
        enter_view(libc, view)
    if uid is not None and not ("landlock" in config.layers and landlock_abi(libc) >= 1):
        shared_read_only(libc, scratch, entered=bool(view))
    os.chdir(scratch)
    # The zygote's few variables name the kit's folder and the grader's PATH (PYTHONPATH, PATH), and anything the
    # child can read can reach its feedback in an error message: only what the libraries read stays.
    kept = {k: os.environ[k] for k in CHILD_ENVIRONMENT if k in os.environ}
    os.environ.clear()
    # Libraries that cache or write temporary files (matplotlib, tempfile) find a writable home here.
    os.environ.update(kept, PATH="/usr/bin:/bin", HOME=scratch, TMPDIR=scratch,
                      MPLCONFIGDIR=os.path.join(scratch, ".config"))
    tempfile.tempdir = scratch  # tempfile read TMPDIR once, in the zygote, and would keep answering its /tmp
    layers["rlimits"] = "rlimits" in config.layers and _set_rlimits(config, uid)
    layers["uid"] = False
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        layers["uid"] = True
    # Re-armed after the uid change (which clears it): if the zygote dies, so do we.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    layers["landlock"] = "landlock" in config.layers and _landlock(libc, scratch, paths.readable) or 0
    if layers["landlock"]:
        # Landlock only allows: if the kit sits inside an allowed folder, its files stay readable.
        layers["landlock_hides_kit"] = paths.hides_kit
    # In its own PID namespace the child is PID 1, which the zygote's precompiled filter assumes.
    program = seccomp if layers["pidns"] else None
    layers["seccomp"] = "seccomp" in config.layers and _seccomp(libc, program)
    if arm is not None:
        arm(scratch)


def own_network(config: SandboxConfig, libc) -> bool:
    """Move this process into a network namespace of its own (no interface but a down loopback).
    It applies at once to whoever unshares it, so the child takes it itself, right after the fork."""
    return "netns" in config.layers and is_root() and libc.unshare(CLONE_NEWNET) == 0


def own_ipc(config: SandboxConfig, libc) -> bool:
    """Move this process into an IPC namespace of its own: SysV shared memory, semaphores and message
    queues, and POSIX message queues, that one child makes are gone with it, never found by the next
    child of its slot (the same uid). Taken by the child itself, right after the fork."""
    return "ipcns" in config.layers and is_root() and libc.unshare(CLONE_NEWIPC) == 0


# --------------------------------------------------------------------------- the layers


def _set_rlimits(config: SandboxConfig, uid) -> bool:
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, config.max_file_bytes),
        (resource.RLIMIT_NOFILE, config.max_open_files),
        (resource.RLIMIT_AS, inherited_mapping() + config.memory_bytes),
    ]
    if uid is not None:  # NPROC never binds root, and for a shared uid it counts other processes too
        limits.append((resource.RLIMIT_NPROC, config.max_processes))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    # The soft limit sends SIGXCPU (reported as a timeout); the hard limit one second later kills.
    resource.setrlimit(resource.RLIMIT_CPU, (config.cpu_seconds, config.cpu_seconds + 1))
    return True


def inherited_mapping() -> int:
    """The address space this process has mapped (VmSize), bytes. Right after the fork it is the
    zygote's: torch's libraries, mostly shared and never touched. A CUDA build maps ~3.2 GB of them
    where the CPU build maps ~0.64 GB, so the limit is this plus the budget: what the child may add."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


# -- The child's view of the machine. The child runs as an unprivileged uid: a file it cannot read is
# a module it cannot import, and torch imports some only when an op first needs them (a correct
# torch.broadcast_shapes loads torch.fx's symbolic shapes and sympy). A kit checked out under a folder
# other users cannot enter (mktemp -d, a 0700 home, a Python under /root) would turn that into lost
# points. So, as root, each child gets a private mount namespace in which a small empty tmpfs covers
# each such folder and only what the child must read (read_only_paths) is bound back at its own path:
# paths are unchanged, and nothing else of the private folder (the kit's grader/, hidden tests,
# solutions/) exists there, with or without Landlock. The start-up check (startup.probe_child) proves the
# result as the sandbox uid, in the sandbox, before anything is graded.


def _others_may_enter(folder: str) -> bool:
    try:
        return bool(os.stat(folder).st_mode & 0o001)
    except OSError:
        return False


def closed_ancestor(path: str) -> str | None:
    """The outermost folder above `path` that other users cannot enter, if any."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = os.path.join(*parts[:i])
        if not _others_may_enter(folder):
            return folder
    return None


def view_plan(paths: list[str] | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(folder to cover, [(path to bind back, its real source), ...]), ...] so that every one of
    `paths` (default: read_only_paths()) is reachable by a uid that may only enter folders open to
    all. Each path is bound back both where it is named and where it really is (a symlinked part)."""
    binds: dict[str, tuple[str, str]] = {}
    for path in paths if paths is not None else read_only_paths():
        real = os.path.realpath(path)
        for where in {os.path.abspath(path), real}:
            cover = closed_ancestor(where)
            if cover is not None:
                binds[where] = (cover, real)
    plan: dict[str, list[tuple[str, str]]] = {}
    for where in sorted(binds):
        cover, real = binds[where]
        outer = next((c for c in plan if _inside(cover, c)), None)
        if outer is None:
            plan[cover] = []
            outer = cover
        if not any(_inside(where, bound) for bound, _ in plan[outer]):  # a bind is recursive
            plan[outer].append((where, real))
    return [(cover, entries) for cover, entries in plan.items()]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def enter_view(libc, plan) -> None:
    """Apply view_plan() in a private mount namespace of this (root, single-threaded) child."""
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    # Private first: nothing mounted below may propagate back to the machine's namespace.
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Opened in the new namespace (a bind's source must be in it) and before a cover hides them.
    sources = [[os.open(real, os.O_PATH | os.O_CLOEXEC) for _, real in entries] for _, entries in plan]
    try:
        for (cover, entries), fds in zip(plan, sources):
            _mount(libc, "tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0711")
            for (where, _), fd in zip(entries, fds):
                parent = cover
                for part in Path(where).relative_to(cover).parts[:-1]:
                    parent = os.path.join(parent, part)
                    if not os.path.isdir(parent):
                        os.mkdir(parent)
                        os.chmod(parent, 0o711)  # enter, not list
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(where, exist_ok=True)
                else:
                    open(where, "a").close()
                # The source was opened before the cover hid it; its fd names it still.
                _mount(libc, f"/proc/self/fd/{fd}", where, None, MS_BIND | MS_REC)
    finally:
        for fds in sources:
            for fd in fds:
                os.close(fd)


def shared_read_only(libc, scratch: str, *, entered: bool) -> bool:
    """Without Landlock, the folders every user may write in (SHARED_FOLDERS) are read-only in this (root,
    single-threaded) child's own mount namespace, and its scratch copy stays writable. What the slot's uid could
    write there no quota bounds (a loop of mkdir in /dev/shm took ~0.8 GB of the kernel's memory in the child's
    20 s of CPU), and it would outlive the child until sweep_shared. `entered`: enter_view made the namespace.
    Where mounts are refused (a container without CAP_SYS_ADMIN), nothing changes and sweep_shared still removes
    what the uid left: False."""
    try:
        if not entered:
            if libc.unshare(CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
            _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the machine
        real = os.path.realpath(scratch)
        # A mount of its own first: a read-only bind of the folder above it then carries it as it is, writable.
        _mount(libc, real, real, None, MS_BIND | MS_REC)
    except OSError:
        return False
    done = True
    for folder in dict.fromkeys(os.path.realpath(f) for f in SHARED_FOLDERS):
        if not os.path.isdir(folder):
            continue
        try:
            kept = os.statvfs(folder).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)  # ST_* flags are the MS_* values
            _mount(libc, folder, folder, None, MS_BIND | MS_REC)
            _mount(libc, None, folder, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
        except OSError:
            done = False
    return done


def _mount(libc, source, target, fstype, flags, options=None) -> None:
    encode = lambda v: None if v is None else v.encode()  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


# -- Landlock (ABI >= 1; signal scoping from ABI 6). Linux uapi/linux/landlock.h.

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def landlock_abi(libc=None) -> int:
    libc = libc or ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(SYS_LANDLOCK["create"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


def _is_a_kit(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "grader", "sandbox", "confinement.py"))


def read_only_paths() -> list[str]:
    """What a child may read: the interpreter, the libraries, a minimal /etc, a few devices."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             "/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf",
             "/dev/urandom", "/dev/random", "/dev/zero", "/proc/self", "/proc/cpuinfo",
             "/sys/devices/system/cpu"}  # torch reads the CPU topology lazily
    paths.update(os.path.dirname(p) for p in sys.path if p.endswith("site-packages"))
    return sorted(p for p in paths if p and os.path.exists(p) and not _under(p, KIT_ROOT, allow=sys.prefix))


def _contains(folder: str, path: Path) -> bool:
    real = Path(folder).resolve()
    return real == path or real in path.parents


def _under(path: str, root: Path, allow: str) -> bool:
    # The venv may live inside the kit's folder; the kit's own sources (grader/, solutions/) may not be read.
    real = Path(path).resolve()
    return (real == root or root in real.parents) and not (Path(allow).resolve() == real or
                                                            Path(allow).resolve() in real.parents)


def _landlock(libc, scratch: str, readable) -> int:
    """Restrict the filesystem, TCP and signals: `readable` (read_only_paths()) may be read, `scratch` written.
    Returns the ABI used, 0 if unavailable."""
    abi = landlock_abi(libc)
    if abi < 1:
        return 0
    fs = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if abi >= 2:
        fs |= 1 << 13  # REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    attr = _RulesetAttr(fs, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)  # TCP bind+connect; signals
    size = ctypes.sizeof(attr) if abi >= 6 else 16
    ruleset = libc.syscall(SYS_LANDLOCK["create"], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        rules = [(p, read) for p in readable]
        rules += [(os.devnull, _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE), (scratch, fs)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FILE_ONLY
                rule = _PathBeneath(access & fs, fd)
                if libc.syscall(SYS_LANDLOCK["add_rule"], ruleset, 1, ctypes.byref(rule), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock rule for {path}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(SYS_LANDLOCK["restrict"], ruleset, 0) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def _seccomp_filter(me: int):
    """Deny new processes, exec, non-Unix sockets, ptrace, signals to others and the kernel's shared
    stores (IPC, keyrings). Threads still work."""
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    rules = [
        ("fork",), ("vfork",), ("execve",), ("execveat",), ("ptrace",), ("process_vm_readv",),
        ("process_vm_writev",), ("unshare",), ("setns",), ("mount",), ("umount2",), ("chroot",),
        ("pivot_root",), ("bpf",), ("perf_event_open",), ("userfaultfd",), ("kcmp",), ("tkill",),
        ("pidfd_open",), ("pidfd_send_signal",), ("pidfd_getfd",),
        # Channels to a later child, whatever namespaces this kernel gives: SysV IPC, POSIX message
        # queues, and keys kept in the kernel's keyrings (the user keyring outlives the process).
        ("shmget",), ("shmat",), ("shmctl",), ("semget",), ("semop",), ("semtimedop",), ("semctl",),
        ("msgget",), ("msgsnd",), ("msgrcv",), ("msgctl",), ("mq_open",), ("mq_unlink",), ("mq_timedsend",),
        ("mq_timedreceive",), ("mq_notify",), ("mq_getsetattr",), ("add_key",), ("request_key",), ("keyctl",),
        ("clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0)),  # a new process, not a thread
        ("socket", sc.Arg(0, sc.NE, socket.AF_UNIX)),
        ("kill", sc.Arg(0, sc.NE, me)),
        ("tgkill", sc.Arg(0, sc.NE, me)),
    ]
    for name, *args in rules:
        with contextlib.suppress(Exception):  # a syscall unknown on this architecture
            f.add_rule(deny, name, *args)
    # glibc falls back from clone3 to clone on ENOSYS, where the flags can be inspected.
    with contextlib.suppress(Exception):
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return f


def seccomp_program(me: int) -> bytes | None:
    """The filter compiled to BPF once (in the zygote), for a child whose pid will be `me`."""
    try:
        f = _seccomp_filter(me)
        with tempfile.TemporaryFile() as out:
            f.export_bpf(out)
            out.seek(0)
            return out.read()
    except Exception:
        return None


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(libc=None, program: bytes | None = None) -> bool:
    """Install the filter: a precompiled program when given (~0.1 ms), else compile it here (~10 ms)."""
    if program:
        libc = libc or ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))  # struct sock_filter is 8 bytes
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and \
                libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0:
            return True
    try:
        _seccomp_filter(os.getpid()).load()
    except Exception:
        return False
    return True
