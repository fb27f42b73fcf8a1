"""`make test` with the libraries already imported: a warm checker for one folder.

Importing a library such as torch takes a second or two each run, longer than the visible tests take. The first
`make test` starts a small server for this folder that imports those libraries (never your code, never the tests)
and then waits. Every run after that is a process forked from it: a fresh copy that imports your files, the
conftest and the tests as `python -m pytest` would, and writes to your terminal. Nothing of one run reaches the
next. The server ends after IDLE_SECONDS without a run, when this folder is gone, or when a library it imported
changed on disk (the next run then starts a new one).

    python tests/_feedback/warm.py --preload torch -- [pytest options]   what `make test` runs
    python tests/_feedback/warm.py --stop                                end this folder's server now

With WARM=0 in the environment, under CI, or where fork and passing a terminal to another process are not
available (only Linux is used), pytest runs in this process instead, exactly as `python -m pytest` would.
"""
from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import NoReturn

IDLE_SECONDS = 15 * 60
START_SECONDS = 180  # a first import of torch on a busy machine
_HEADER = struct.Struct("!I")


def main(argv: list[str]) -> int:
    options, pytest_args = _split(argv)
    if options.get("serve"):
        return _serve(options["serve"], options["preload"], options["folder"])
    folder = os.getcwd()
    path = _socket_path(folder, options["preload"])
    if options.get("stop"):
        if path and os.path.exists(path):
            os.unlink(path)  # the server sees its socket gone and ends within a second
        return 0
    if path is None or not _wanted():
        _run_here(pytest_args)
    for _attempt in range(2):
        connection = _connect(path) or _start(path, options["preload"], folder)
        if connection is None:
            break
        status = _ask(connection, pytest_args, folder)
        if status is not None:
            return status
    _run_here(pytest_args)  # the server could not start or went stale twice: run as plain pytest does


def _split(argv: list[str]) -> tuple[dict, list[str]]:
    """This runner's own options come before `--`; everything after it is pytest's."""
    options: dict = {"preload": []}
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    pairs, theirs = iter(own), []
    for word in pairs:
        if word == "--preload":
            options["preload"] += [name for name in next(pairs, "").split(",") if name]
        elif word in ("--serve", "--folder"):
            options[word[2:]] = next(pairs, "")
        elif word == "--stop":
            options["stop"] = True
        else:
            theirs.append(word)  # not ours: pytest's, as if after `--`
    return options, theirs + rest


def _wanted() -> bool:
    if os.environ.get("WARM", "1") == "0" or os.environ.get("CI"):
        return False  # asked not to, or a CI job: one run, nothing left behind
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


def _run_here(pytest_args: list[str]) -> NoReturn:
    """`python -m pytest ARGS` in this very process (exec), so nothing differs from running it by hand."""
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_args])


def _socket_path(folder: str, preload: list[str]) -> str | None:
    """One server per folder, Python, libraries asked for and version of this file; in a folder only this user
    can enter, or None (then no server is used)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    if len(base) > 60:  # a socket's path holds at most 107 bytes
        base = "/tmp"
    home = os.path.join(base, f"kit-warm-{os.getuid()}")
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        info = os.lstat(home)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not os.path.isdir(home):
        return None  # someone else's folder, or one others can write in: do not trust a socket there
    me = os.stat(os.path.abspath(__file__))
    key = "\0".join([os.path.realpath(folder), sys.executable, ",".join(preload), str(me.st_mtime_ns)])
    return os.path.join(home, hashlib.sha256(key.encode()).hexdigest()[:20] + ".sock")


def _connect(path: str) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        return connection
    except OSError:
        connection.close()
        return None


def _start(path: str, preload: list[str], folder: str) -> socket.socket | None:
    """Start this folder's server and wait until it listens (it imports the libraries first)."""
    command = [sys.executable, os.path.abspath(__file__), "--serve", path, "--folder", folder]
    if preload:
        command += ["--preload", ",".join(preload)]
    with open(path[:-len(".sock")] + ".log", "ab") as log:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=folder,
                                  start_new_session=True, close_fds=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        connection = _connect(path)
        if connection is not None:
            return connection
        time.sleep(0.02)
    if server.poll() is None:
        server.kill()
    return None


def _ask(connection: socket.socket, pytest_args: list[str], folder: str) -> int | None:
    """Hand the server this run (arguments, folder, environment, terminal); its exit status, or None when the
    server was stale (it has ended: start another)."""
    # Ctrl-C as a pytest started here would take it: a process started with SIGINT ignored (a background job, a
    # launcher) keeps ignoring it, any other is interrupted. The run is told, since the server's own disposition is
    # whatever the client that started it happened to have.
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    request = json.dumps({"args": pytest_args, "cwd": folder, "env": dict(os.environ),
                          "interrupt": interruptible}).encode()
    streams = [_usable(fd) for fd in (0, 1, 2)]
    try:
        socket.send_fds(connection, [_HEADER.pack(len(request)) + request], streams)
    except OSError:
        return None
    interrupts = []

    def forward(signum, frame):  # Ctrl-C reaches the run, as it would reach a pytest started here
        interrupts.append(signum)
        try:
            connection.sendall(b"I" if len(interrupts) == 1 else b"K")
        except OSError:
            pass

    previous = signal.signal(signal.SIGINT, forward if interruptible else signal.SIG_IGN)
    try:
        reply = _read_line(connection)
    finally:
        signal.signal(signal.SIGINT, previous)
        connection.close()
    if not reply or reply.get("stale"):
        return None
    status = int(reply["status"])
    return 128 - status if status < 0 else status  # killed by signal N: the shell's 128 + N


def _usable(fd: int) -> int:
    try:
        os.fstat(fd)
        return fd
    except OSError:  # a closed stream: the run gets /dev/null there, as a child of this process would not
        return os.open(os.devnull, os.O_RDWR)


def _read_line(connection: socket.socket) -> dict | None:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = connection.recv(4096)
        except InterruptedError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


# -- the server ------------------------------------------------------------------------------------------------

def _serve(path: str, preload: list[str], folder: str) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    for name in ["pytest", *preload]:
        importlib.import_module(name)  # libraries only: a fork must import the student's files afresh
    # Out of the garbage collector's reach: pytest collects at the end of every run, and each run would otherwise
    # walk (and so copy) every object torch made, ~0.1 s. A run's own objects are collected as usual.
    gc.collect()
    gc.freeze()
    watched = _library_files(preload)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pending = f"{path}.{os.getpid()}"
    listener.bind(pending)
    listener.listen(16)
    os.rename(pending, path)  # clients see the path only once it answers
    inode = os.stat(path).st_ino
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a run's end wakes the loop at once
    runs: dict[int, socket.socket] = {}
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener, wake_read], [], [], 1.0)
        if wake_read in ready:
            os.read(wake_read, 512)
        _reap(runs)
        if listener in ready:
            connection, _ = listener.accept()
            last = time.monotonic()
            if _changed(watched):  # stop listening first, so the client's next try starts a new server
                _close(listener, path, inode)
                _reply(connection, {"stale": True})
                break
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_read, wake_write):
                    os.close(fd)
                listener.close()
                _run(connection)
            runs[pid] = connection
        elif not runs and (time.monotonic() - last > IDLE_SECONDS or not os.path.isdir(folder)
                           or _inode(path) != inode):
            break
    _close(listener, path, inode)
    for connection in runs.values():
        connection.close()
    return 0


def _close(listener: socket.socket, path: str, inode: int) -> None:
    if _inode(path) == inode:  # a newer server may have taken the path: leave its socket alone
        os.unlink(path)
    listener.close()


def _library_files(preload: list[str]) -> dict[str, int]:
    """The files of the imported libraries whose change (a reinstall, an upgrade) makes this server stale."""
    tops = {"pytest", "_pytest", "pluggy", *(name.split(".")[0] for name in preload)}
    files = {}
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if where and name in tops:
            files[where] = os.stat(where).st_mtime_ns
    return files


def _changed(watched: dict[str, int]) -> bool:
    for where, stamp in watched.items():
        try:
            if os.stat(where).st_mtime_ns != stamp:
                return True
        except OSError:
            return True
    return False


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _reap(runs: dict[int, socket.socket]) -> None:
    while runs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = runs.pop(pid, None)
        if connection is not None:
            _reply(connection, {"status": os.waitstatus_to_exitcode(status)})


def _reply(connection: socket.socket, message: dict) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the client went away (killed): nobody is waiting for this status
    connection.close()


def _run(connection: socket.socket) -> None:
    """In the fork: become the client's `python -m pytest` and exit with its status."""
    status = 1
    try:
        data, fds, _flags, _address = socket.recv_fds(connection, 1 << 16, 3)
        size = _HEADER.unpack(data[:_HEADER.size])[0]
        data = data[_HEADER.size:]
        while len(data) < size:
            chunk = connection.recv(1 << 16)
            if not chunk:
                os._exit(1)
            data += chunk
        request = json.loads(data)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler if request["interrupt"] else signal.SIG_IGN)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import pytest  # the server's, already imported

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
        sys.path.insert(0, request["cwd"])  # what `python -m` puts first
        threading.Thread(target=_watch, args=(connection,), daemon=True).start()
        status = int(pytest.main(request["args"]))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


def _watch(connection: socket.socket) -> None:
    """Ctrl-C in the client interrupts the run (twice: kills it); a client gone ends the run."""
    while True:
        try:
            data = connection.recv(1)
        except OSError:
            data = b""
        if data == b"I":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
