"""Submission discovery and scratch copies: folders, .zip files and .ipynb notebooks.

Nothing here runs student code. A scratch copy holds regular files only: a symlink is never
followed out of a submission (it is skipped and the skip is noted), file count and size are
capped, zip entries that climb out of the copy or would inflate past the caps are refused, and
a path deeper or longer than the caps is skipped with a note. A notebook becomes importable as
the contract modules, each running only its own part's cells (grader/intake/sections.py), so it
is graded like .py files.

Every name here was chosen by a student: it is data wherever it goes. A row name is a plain
file name made from it; two entries whose row names would collide both get a suffix made from
their own name (never one at the other's expense) and both are flagged; notes show names with
escapes for what is not printable text; generated code holds a name only as a string literal.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from grader.running.helper_process import WALL_FACTOR
from grader.intake.magics import FUTURE_FLAGS, neutralise_magics, plain_file_name, written_file
from grader.results.storage import CLASS_FILES  # the class files beside the row folders: no row is named like one


def not_written_by_notebooks(lesson) -> tuple[str, ...]:
    """The files a notebook's `%%writefile` may not write: the contract's modules, which the notebook's cells
    stand for, then (last) the module the intake makes of those cells. The students' CI refuses the same (the
    release writes these names into tools/ci_feedback.py)."""
    return (*sorted(f"{module}.py" for module in lesson.modules), f"{lesson.notebook_module}.py")


SKIPPED_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "__MACOSX", ".venv", "venv", "node_modules"}


@dataclass(frozen=True)
class IntakeLimits:
    max_files: int = 500
    max_file_bytes: int = 20 << 20
    max_total_bytes: int = 60 << 20
    max_zip_ratio: int = 200  # uncompressed / compressed, for entries over 1 MB
    # The released assignment is flat; a student's own folders add a level or two. Deeper or longer
    # paths are skipped (with a note) before anything is created, so the scratch copy stays far from
    # the kernel's limits (255 bytes a name, 4096 a path) and no walk over it recurses deeply.
    max_depth: int = 16  # folder levels below the submission's top
    max_path_chars: int = 240  # characters of a path inside the submission


DEFAULT_LIMITS = IntakeLimits()


@dataclass(frozen=True)
class Submission:
    name: str  # the row name: sanitised, unique
    source: Path  # the folder, .zip or .ipynb as found
    kind: str  # "folder" | "zip" | "notebook" | "symlink"
    flags: tuple[str, ...] = ()  # why the row name is not the entry's own name, in words


@dataclass
class Intake:
    """What happened while making a scratch copy (notes go into the result, in words)."""

    notes: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    notebook: str | None = None  # the notebook the contract modules were generated from
    unsaid: int = 0  # notes past MAX_NOTES, counted instead of kept

    def note(self, text: str) -> None:
        # A zip of 100,000 entries each too deep would otherwise make a feedback page of 100,000 lines.
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self.unsaid += 1


MAX_NOTES = 40  # notes kept per submission's copy; the rest are counted in one closing note


def discover(folder: Path) -> list[Submission]:
    """One entry per sub-folder, .zip or .ipynb of `folder`, in a stable (sorted) order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder of submissions; pass the folder that holds "
                                 "one sub-folder, .zip or .ipynb per student")
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        # Hidden entries and the junk of archivers (__MACOSX) are nobody's; `_final.zip` is a student's.
        if entry.name.startswith(".") or entry.name in SKIPPED_DIRS:
            continue
        if entry.is_symlink():
            found.append((entry.name, Path(entry.path), "symlink"))
        elif entry.is_dir(follow_symlinks=False):
            found.append((entry.name, Path(entry.path), "folder"))
        elif entry.is_file(follow_symlinks=False) and entry.name.lower().endswith(".zip"):
            found.append((entry.name[:-4], Path(entry.path), "zip"))
        elif entry.is_file(follow_symlinks=False) and entry.name.lower().endswith(".ipynb"):
            found.append((entry.name[:-6], Path(entry.path), "notebook"))
    named = row_names([(raw, path.name, _label(path.name, kind)) for raw, path, kind in found])
    return [Submission(name=name, source=path, kind=kind, flags=flags)
            for (_, path, kind), (name, flags) in zip(found, named)]


# Files a class folder holds beside its submissions: collect's record of the collection.
CLASS_FOLDER_FILES = {"collected.csv"}


def not_taken(folder: Path) -> list[str]:
    """The files of `folder` that `discover` takes for no submission (a .tar.gz, a loose .py...): a hand-in
    in a form the grader does not read, which the instructor should hear about rather than lose silently."""
    return sorted(entry.name for entry in os.scandir(folder)
                  if entry.is_file(follow_symlinks=False) and not entry.name.startswith(".")
                  and not entry.name.lower().endswith((".zip", ".ipynb")) and entry.name not in CLASS_FOLDER_FILES)


def row_names(entries: list[tuple[str, str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """(row name, flags) for each (stem, entry name, label) of one class folder, in the same order.

    A row name is the sanitised stem. Stems whose row names would be equal (ignoring case, so the
    output folders do not collide on a case-insensitive filesystem either) are a collision: an
    entry whose stem is already a plain name keeps it if it is the only one, every other gets a
    suffix made from its own entry name, so which entry gets which row never depends on the order
    or the presence of the others. A name that sanitising changed is flagged; so is a collision,
    on every entry in it. Every flag starts with "row name ": the class report lists those rows.
    """
    plain = [sanitise(stem) for stem, _, _ in entries]
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(plain):
        groups.setdefault(name.lower(), []).append(i)
    names: list[str | None] = [None] * len(entries)
    flags: list[list[str]] = [[] for _ in entries]
    for key, members in groups.items():
        unchanged = [i for i in members if entries[i][0] == plain[i]]
        keeper = unchanged[0] if len(unchanged) == 1 and key not in CLASS_FILES else None
        for i in members:
            names[i] = plain[i] if i == keeper or (len(members) == 1 and key not in CLASS_FILES) \
                else f"{plain[i]}-{_digest(entries[i][1])}"
    taken = {n.lower() for n in names if n}
    # A suffixed name that another entry already has as its plain name: a longer suffix.
    for i, name in enumerate(names):
        if name != plain[i] and sum(n.lower() == name.lower() for n in names) > 1:
            longer = f"{plain[i]}-{_digest(entries[i][1], 16)}"
            names[i] = unique_name(longer, taken - {name.lower()})
            taken.add(names[i].lower())
    labels = [label for _, _, label in entries]
    for key, members in groups.items():
        if len(members) > 1:
            # Said to this entry's own student too, so it names no classmate; the class report lists them.
            for i in members:
                others = f"{len(members) - 1} other submission{'s' if len(members) > 2 else ''}"
                kept = " (this one keeps it: its name was already plain)" if names[i] == plain[i] else ""
                flags[i].append(f"row name {names[i]}: {labels[i]!r} and {others} would all be named "
                                f"{plain[i]}; each has its own row{kept}")
        elif key in CLASS_FILES:
            i = members[0]
            flags[i].append(f"row name {names[i]}: {labels[i]!r} is named like a class file of the output folder")
    for i, (stem, _, _) in enumerate(entries):
        if stem != plain[i] and len(groups[plain[i].lower()]) == 1:
            flags[i].append(f"row name {names[i]}: the submitted name {labels[i]!r} is not a plain file name")
    return [(name, tuple(flag)) for name, flag in zip(names, flags)]


def _digest(text: str, length: int = 6) -> str:
    return hashlib.sha256(os.fsencode(text)).hexdigest()[:length]


def source_label(sub: Submission) -> str:
    """The entry a row came from, as text: the file name, or the folder name with a trailing /."""
    return _label(sub.source.name, sub.kind)


def _label(entry: str, kind: str) -> str:
    return printable(entry) + ("/" if kind == "folder" else "")


def printable(name: str) -> str:
    """A name as text any file, page or terminal can hold: a byte that was not UTF-8 (which
    os.fsdecode keeps as a lone surrogate) and a control or format character become escapes."""
    out = []
    for ch in name:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


def shown(path: str, limit: int = 120) -> str:
    """A path for a note: printable, and shortened in the middle when long."""
    text = printable(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 3:]} ({len(text)} characters)"


def sanitise(raw: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-")[:80]
    return name or "submission"


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`... whichever is first not in `taken` (compared ignoring case)."""
    lower = {t.lower() for t in taken}
    candidate, k = name, 2
    while candidate.lower() in lower:
        candidate, k = f"{name}-{k}", k + 1
    return candidate


def materialise(sub: Submission, dest: Path, *, limits: IntakeLimits = DEFAULT_LIMITS,
                convert_notebook: bool = True, lesson) -> Intake:
    """Copy `sub` into the empty folder `dest` (regular files only) and return what happened.
    `convert_notebook=False` leaves a notebook as it is (a reader that wants its cells, not modules;
    it may pass `lesson=None`); otherwise a notebook becomes the contract modules of `lesson` (the
    lesson value)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    intake = Intake()
    if sub.kind == "symlink":
        intake.note(f"{printable(sub.source.name)} is a symlink; the engine never follows a symlink out of a "
                            "submission, so nothing was graded")
    elif sub.kind == "folder":
        _copy_tree(sub.source, dest, intake, limits)
    elif sub.kind == "zip":
        _extract_zip(sub.source, dest, intake, limits)
    elif sub.kind == "notebook":
        _copy_file(sub.source, dest / sub.source.name, intake, limits)
    if convert_notebook:
        _maybe_convert_notebook(dest, intake, lesson)
    if intake.unsaid:
        intake.notes.append(f"... and {intake.unsaid} more like these (only the first {MAX_NOTES} are listed)")
    return intake


# --------------------------------------------------------------------------- folders


def _copy_tree(src: Path, dest: Path, intake: Intake, limits: IntakeLimits, rel: str = "", depth: int = 0) -> None:
    try:
        entries = sorted(os.scandir(src), key=lambda e: e.name)
    except OSError as exc:
        intake.note(f"could not read {shown(rel) or '.'}: {exc.strerror}")
        return
    for entry in entries:
        path = f"{rel}{entry.name}"
        if entry.is_symlink():
            target = os.readlink(entry.path)
            intake.note(f"skipped symlink {shown(path)} -> {shown(target)} (symlinks are never followed)")
        elif entry.is_dir(follow_symlinks=False):
            if entry.name in SKIPPED_DIRS or _over_caps(path, depth + 1, intake, limits, "folder "):
                continue
            (dest / entry.name).mkdir(exist_ok=True)
            _copy_tree(Path(entry.path), dest / entry.name, intake, limits, rel=path + "/", depth=depth + 1)
        elif entry.is_file(follow_symlinks=False):
            if not _over_caps(path, depth, intake, limits):
                _copy_file(Path(entry.path), dest / entry.name, intake, limits, rel=path)
        else:
            intake.note(f"skipped {shown(path)}: not a regular file")


def _over_caps(path: str, depth: int, intake: Intake, limits: IntakeLimits, what: str = "") -> bool:
    """Note and refuse a path `depth` folder levels deep that is deeper or longer than the caps."""
    if depth > limits.max_depth:
        intake.note(f"skipped {what}{shown(path)}: more than {limits.max_depth} levels deep")
        return True
    if len(path) > limits.max_path_chars or any(len(os.fsencode(part)) > 255 for part in path.split("/")):
        intake.note(f"skipped {what}{shown(path)}: its path is too long (over {limits.max_path_chars} "
                            "characters, or a name over 255 bytes)")
        return True
    return False


def _copy_file(src: Path, dest: Path, intake: Intake, limits: IntakeLimits, rel: str | None = None) -> None:
    rel = rel or src.name
    if not _room_for(intake, limits, os.lstat(src).st_size, rel):
        return
    # O_NOFOLLOW: a file swapped for a symlink after the scan is refused, not followed.
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        intake.note(f"skipped {shown(rel)}: {exc.strerror}")
        return
    with os.fdopen(fd, "rb") as fin:
        changed = os.fstat(fin.fileno()).st_mtime_ns
        _store(fin, dest, limits.max_file_bytes, intake, _too_large(rel, limits))
    _keep_mtime(dest, changed)


def _keep_mtime(dest: Path, mtime_ns: int) -> None:
    """The copy keeps when its original last changed: of several edited notebooks, the newest is graded."""
    with contextlib.suppress(OSError):
        if dest.is_file() and not dest.is_symlink():
            os.utime(dest, ns=(mtime_ns, mtime_ns))


def _too_large(rel: str, limits: IntakeLimits) -> str:
    text = f"skipped {shown(rel)}: larger than {limits.max_file_bytes >> 20} MB"
    if rel.lower().endswith(".ipynb"):  # its outputs (pictures) make it so: the code is a few KB
        text += f"; {CLEAR_OUTPUTS}"
    return text


CLEAR_OUTPUTS = ("clear the cells' outputs (Jupyter: Edit > Clear Outputs of All Cells), save, and hand it in "
                 "again: outputs are never graded")


def _room_for(intake: Intake, limits: IntakeLimits, size: int, rel: str) -> bool:
    if intake.files >= limits.max_files:
        if intake.files == limits.max_files:
            intake.note(f"more than {limits.max_files} files: the rest were not copied")
            intake.files += 1  # note once
        return False
    if size > limits.max_file_bytes:
        intake.note(_too_large(rel, limits))
        return False
    if intake.bytes + size > limits.max_total_bytes:
        intake.note(f"skipped {shown(rel)}: the submission is over {limits.max_total_bytes >> 20} MB in total")
        return False
    return True


def _store(fin, dest: Path, cap: int, intake: Intake, refusal: str) -> None:
    """Copy at most `cap` bytes of `fin` to `dest` and count the file; past the cap, remove the
    partial copy and note `refusal` instead (a lying size header cannot inflate past the cap)."""
    total = 0
    with open(dest, "wb") as fout:
        while chunk := fin.read(1 << 20):
            total += len(chunk)
            if total > cap:
                break
            fout.write(chunk)
    if total > cap:
        dest.unlink()
        intake.note(refusal)
        return
    intake.files += 1
    intake.bytes += total


# --------------------------------------------------------------------------- zips


def _extract_zip(src: Path, dest: Path, intake: Intake, limits: IntakeLimits) -> None:
    try:
        archive = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError) as exc:
        intake.note(f"{printable(src.name)} is not a readable zip file ({exc}); nothing was graded")
        return
    with archive:
        # Each entry's path is read once (_entry_path); ignoring, unwrapping and every check use that path.
        members = [(m, path) for m in archive.infolist() for path in [_entry_path(m)]
                   if not path.endswith("/") and not _ignored(path)]
        declared = sum(m.file_size for m, _ in members)
        if declared > limits.max_total_bytes:
            intake.note(f"{printable(src.name)} would unpack to {declared >> 20} MB, over the "
                                f"{limits.max_total_bytes >> 20} MB cap (a zip bomb?); nothing was extracted")
            return
        top = _single_top_folder([path for _, path in members])
        for member, path in members:
            _extract_member(archive, member, path, top, dest, intake, limits)


def _entry_path(member: zipfile.ZipInfo) -> str:
    """The path a zip entry means, "/" between its names: "\\" read as a separator, a leading "./", "."
    names and repeated separators dropped, a trailing "/" kept (a folder entry). Nothing is resolved
    or made safe here: "..", a drive ("C:") or a leading "/" stay, for _extract_member to refuse.

    Zips made on Windows by Compress-Archive (PowerShell 5.1) hold hw13\\README.md; Info-ZIP's unzip and
    libarchive read "\\" there as a separator, and so does the intake. It does so whatever system the
    entry says made it (ZipInfo.create_system, 0 for MS-DOS/Windows): that byte is the archiver's word,
    not evidence of how names were written, and a name with a "\\" in it was refused before, so no zip
    that was graded reads differently; a submission's names must be importable or readable names in
    any case, and after the translation every check still applies."""
    name = member.filename.replace("\\", "/")
    path = str(PurePosixPath(name))  # "./a//b/./c" -> "a/b/c"; "/a" and "//a" keep their root
    return ("" if path == "." else path) + ("/" if name.endswith("/") else "")


def _ignored(path: str) -> bool:
    """Whether an entry (its _entry_path) is an archiver's or an editor's, not the student's."""
    parts = PurePosixPath(path).parts
    return any(p in SKIPPED_DIRS for p in parts) or PurePosixPath(path).name == ".DS_Store"


def _single_top_folder(paths: list[str]) -> str:
    """The one folder every entry (its _entry_path) is in, to unwrap, or "". A root ("/"), ".." or a
    drive ("C:") is never that folder: unwrapping it would turn a path that leaves the submission into
    one that does not, so such entries are kept as they are and refused."""
    parts = [PurePosixPath(p).parts for p in paths]
    tops = {p[0] for p in parts if p}
    if len(tops) != 1 or not all(len(p) > 1 for p in parts):
        return ""
    top = tops.pop()
    return "" if top.startswith("/") or top == ".." or ":" in top else top


def _extract_member(archive, member, path, top, dest, intake, limits) -> None:
    """Extract `member`, whose path is `path` (_entry_path), under `dest`, less the folder `top` every
    entry is in ("" for none). Notes name the entry as the zip holds it."""
    name = member.filename
    mode = member.external_attr >> 16
    if stat.S_ISLNK(mode):
        intake.note(f"skipped symlink {shown(name)} in the zip (symlinks are never followed)")
        return
    parts = PurePosixPath(path).parts
    if top and parts[:1] == (top,):
        parts = parts[1:]
    rel = "/".join(parts)
    # After _entry_path no "\\" is left (it was read as a separator); the test stays, should that change.
    if ("\\" in rel or not parts or path.startswith("/") or ".." in parts or ":" in parts[0]):
        intake.note(f"refused zip entry {shown(name)}: its path leaves the submission")
        return
    if _over_caps(rel, len(parts) - 1, intake, limits, "zip entry "):
        return
    if member.compress_size and member.file_size > (1 << 20) and \
            member.file_size / member.compress_size > limits.max_zip_ratio:
        intake.note(f"refused zip entry {shown(name)}: compressed {member.file_size // member.compress_size}:1 "
                            "(a zip bomb?)")
        return
    if not _room_for(intake, limits, member.file_size, rel):
        return
    target = dest.joinpath(*parts)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():  # dest holds what this function made: no symlink to follow
            raise IsADirectoryError(target)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        # a/b.py after a file a, or a after a/b.py ("\\" or "/"): no folder holds both. The first one stays.
        intake.note(f"refused zip entry {shown(name)}: another entry of the zip has a file where this one "
                    "needs a folder, or a folder where it needs a file")
        return
    # Read at most the cap, whatever the header declared: a lying header cannot inflate past it.
    with archive.open(member) as fin:
        _store(fin, target, min(limits.max_file_bytes, limits.max_total_bytes - intake.bytes), intake,
               f"refused zip entry {shown(name)}: it unpacks past the size cap")
    with contextlib.suppress(ValueError, OverflowError):
        _keep_mtime(target, int(datetime(*member.date_time).timestamp() * 1e9))


# --------------------------------------------------------------------------- notebooks



def _maybe_convert_notebook(dest: Path, intake: Intake, lesson) -> None:
    """Decide what of a submission with a notebook is the student's work, and make the contract
    modules from that notebook when it is the notebook.

    Whatever its name, a notebook whose code differs from the released template is the student's;
    of several, the most recently changed one is graded and the others are named in a note. Edited
    contract .py files beside a notebook are graded instead of it, with a note. The released stubs
    left untouched beside an edited notebook carry no work and are dropped; when nothing differs from
    the released files, the stubs are graded, and a note says so."""
    notebooks = sorted(p for p in dest.iterdir() if p.suffix.lower() == ".ipynb" and p.is_file())
    if not notebooks:
        return  # no notebook: nothing to do, and no import of the release's modules (nbformat: ~1 s per worker)
    from grader.release.stubs import stub_texts_of  # reads the reference: grader side only, never the child

    stubs = {name: _stub_digest(text) for name, text in stub_texts_of(lesson.solutions).items()}
    present = [dest / f"{m}.py" for m in lesson.modules if (dest / f"{m}.py").is_file()]
    untouched = [p for p in present if _file_digest(p) == stubs.get(p.name)]
    edited = [n for n in notebooks if not _is_template(n, lesson)]
    by_recency = sorted(edited, key=lambda n: (-n.stat().st_mtime_ns, n.name != lesson.notebook, n.name))
    if len(untouched) < len(present):  # the student's own .py files
        if edited:
            intake.note(f"graded your .py files; the notebook{'s' if len(edited) > 1 else ''} "
                        f"{_names(by_recency)} {'were' if len(edited) > 1 else 'was'} not graded (edited "
                        ".py files beside a notebook are what is graded)")
        return
    if not edited:
        if present:
            intake.note(f"nothing here differs from the released files ({_names(notebooks)} and "
                        f"{_names(present)} are as released): graded the .py stubs")
            return
        intake.note(f"{_names(notebooks)} {'are' if len(notebooks) > 1 else 'is'} the released notebook "
                    "with no code of yours: nothing of yours was graded")
    chosen = by_recency[0] if edited else notebooks[0]
    for path in untouched:
        path.unlink()
    if untouched:
        intake.note(f"{', '.join(p.name for p in untouched)} were the untouched stubs: the notebook was graded instead")
    label = printable(chosen.name)
    from grader.release.notebook import is_test_cell

    try:
        sources = notebook_code_cells(chosen, lesson=lesson, magics=True)
    except Exception as exc:  # nbformat raises several kinds for a damaged file
        intake.note(f"could not read the notebook {label} ({type(exc).__name__}: {exc})"[:300])
        return
    # The released test cells run tests and define nothing: in the sandbox they would only cost time. Each cell kept
    # keeps its number among the notebook's code cells, which feedback names it by.
    kept = [(n, source) for n, source in enumerate(sources, 1)
            if not is_test_cell(neutralise_magics(source), lesson=lesson)]
    # The %%writefile files first: a cell's `from helper import *` binds what the helper it wrote defines.
    _write_notebook_files(dest, [source for _, source in kept], intake, lesson)
    # `%run NAME.py` brings NAME's names in when the folder holds NAME.py now (the student's, or one a %%writefile
    # cell wrote); a file only the student's machine had is neutralised, as every magic was. The contract modules are
    # made of the notebook below, so no module runs itself.
    present = frozenset(path.stem for path in dest.glob("*.py"))
    cells, numbers = [neutralise_magics(source, runnable=present) for _, source in kept], [n for n, _ in kept]
    try:
        parts, future = _parts_of_cells(cells, numbers, intake, lesson, modules=_own_modules(dest, lesson))
    except (NotebookTooLarge, ValueError) as exc:
        intake.note(f"could not grade the notebook {label}: {exc}"[:400])
        return
    (dest / f"{lesson.notebook_module}.py").write_text(
        notebook_module_source(label, cells, numbers=numbers, parts=parts, future=future), encoding="utf-8")
    for module in lesson.modules:
        (dest / f"{module}.py").write_text(contract_module_source(label, module, lesson=lesson), encoding="utf-8")
    intake.notebook = label
    others = [n for n in notebooks if n != chosen]
    if others and len(edited) > 1:
        intake.note(f"several edited notebooks: graded {label}, the most recently changed; not graded: "
                    f"{_names([n for n in by_recency if n != chosen])}")
    elif others:
        intake.note(f"graded {label}; {_names(others)} {'are' if len(others) > 1 else 'is'} the released "
                    "notebook with no code of yours")


def _write_notebook_files(dest: Path, sources: list[str], intake: Intake, lesson) -> None:
    """The files the notebook's `%%writefile` cells write when it runs, written in cell order beside the modules made
    of it (a later cell may import one), as Jupyter writes them beside the notebook. Never over those modules."""
    made = not_written_by_notebooks(lesson)
    for source in sources:
        found = written_file(source)
        if found is None:
            continue
        name, append, text = found
        if not plain_file_name(name) or name in made:
            intake.note(f"the notebook's cell `%%writefile {shown(name)}` was not run: a notebook may write files "
                        f"inside its own folder, other than {', '.join(made[:-1])}")
            continue
        try:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
            with os.fdopen(os.open(dest / name, flags, 0o644), "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            intake.note(f"the notebook's cell `%%writefile {shown(name)}` could not write it: {exc.strerror}")


def _own_modules(dest: Path, lesson, cap: int = 1 << 20) -> dict[str, str]:
    """The source of each module of the notebook's own beside it (a %%writefile file, one handed in), by name, up to
    `cap` bytes in all: what a cell's star import of one binds (grader/intake/sections.py)."""
    made, found, total = set(not_written_by_notebooks(lesson)), {}, 0
    for path in sorted(dest.glob("*.py")):
        if path.name in made or not path.is_file() or path.is_symlink():
            continue
        size = path.stat().st_size
        if total + size > cap:
            break
        found[path.stem] = path.read_text(encoding="utf-8", errors="replace")
        total += size
    return found


def _parts_of_cells(cells: list[str], numbers: list[int], intake: Intake, lesson,
                    modules: dict[str, str] | None = None) -> tuple[dict, dict]:
    """(part -> the places in `cells` of those its module runs, place -> the `__future__` flags that cell sets), as
    grader/intake/sections.py cuts the notebook into the lesson's parts: parsed in a process of its own, limited as
    reading the notebook is (a cell is the student's to make expensive to parse). A cell too large or too deep to
    parse there runs only in the part whose cells it follows, and a note says so; NotebookTooLarge when the whole
    notebook is over the limits."""
    takes = {module: [name] for module, (_, name) in lesson.sibling_imports.items()}
    request = json.dumps({"cells": cells, "part_of": lesson.module_of, "takes": takes,
                          "modules": modules or {}}).encode()
    status, out, err = _limited("sections.py", [], request, notebook_limits(lesson),
                                doing="telling which part each code cell belongs to",
                                advice="split its largest cells, and keep data in files the code reads, not in cells")
    if status != 0:
        raise ValueError((err.decode("utf-8", "replace").strip().splitlines() or [f"exit status {status}"])[-1][:200])
    answer = json.loads(out)
    parts = {module: [int(i) for i in answer["parts"].get(module, ())] for module in lesson.modules}
    for i in answer["unread"]:
        intake.note(f"code cell {numbers[i]} is too large or too deeply nested for the grader to tell which part it "
                    "belongs to: only the part whose cells it follows runs it (split it into smaller cells)")
    return parts, {int(i): int(flags) for i, flags in answer["future"].items()}


def _names(paths) -> str:
    return ", ".join(printable(p.name) for p in paths)


def _text_digest(text: str) -> str:
    # Line endings may change on a student's machine; the content is what counts.
    return hashlib.sha256(text.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def _stub_digest(text: str) -> str:
    """What a stub's text holds as code, whatever blank lines or spaces at a line's end an editor added or took away:
    held-out s57, a stub touched by one blank line beside a correct notebook was graded instead of it (10/100)."""
    lines = (line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return _text_digest("\n".join(line for line in lines if line))


def _file_digest(path: Path) -> str | None:
    try:
        if path.stat().st_size > (1 << 20):
            return None  # no stub is that long
        return _stub_digest(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _code_digest(cells: list[str]) -> str:
    return _text_digest("\n\n".join(c.replace("\r\n", "\n") for c in cells))


def _template_digest(lesson) -> str:
    """The released notebook's code, as notebook_code_cells reads a student's (grader.release.notebook
    builds it), for `lesson`; built once per lesson value."""
    def build() -> str:
        from grader.release import notebook

        built = notebook.build(student=True, lesson=lesson)
        return _code_digest([neutralise_magics(c.source) for c in built.cells if c.cell_type == "code"])

    return lesson.derived("intake.template_digest", build)


def _is_template(path: Path, lesson) -> bool:
    """Whether a notebook's code is the released notebook's (outputs, metadata and name aside)."""
    try:
        return _code_digest(notebook_code_cells(path, lesson=lesson)) == _template_digest(lesson)
    except Exception:  # damaged or over the limits: not the template; reading it again says why
        return False


class NotebookTooLarge(ValueError):
    """A notebook over the lesson's [notebooks] limits: read no further, grade nothing from it."""


def notebook_limits(lesson) -> dict:
    """The lesson's [notebooks] limits (limits.toml): what reading one notebook may cost the grader."""
    return lesson.limits.get("notebooks", {})


def notebook_code_cells(path: Path, *, lesson, magics: bool = False) -> list[str]:
    """The code cells' text, magics neutralised (kept as written with `magics`). A notebook is graded by its code: its outputs, attachments
    and metadata are dropped while it is read (grader/intake/nbstrip.py, in a process limited to the lesson's
    [notebooks] memory and time), and the limits on what a notebook may cost apply to what is left. A
    file over intake's per-file limit is not read at all. Version 4 notebooks (every Jupyter since 2015)
    are read as plain JSON, linear in their size: nbformat's validation took 80 s on a 13 MB notebook of
    300,000 cells. Older versions go through nbformat's converter, after the same stripping."""
    limits = notebook_limits(lesson)
    max_bytes, max_cells = limits.get("bytes", 8 << 20), limits.get("cells", 5000)
    data = json.loads(_stripped_notebook(Path(path), max_bytes, limits))
    if not isinstance(data, dict) or not isinstance(data.get("nbformat"), int):
        raise ValueError("not a Jupyter notebook (no nbformat version)")
    if data["nbformat"] >= 4:
        cells = data.get("cells")
    else:
        import nbformat

        cells = nbformat.convert(nbformat.from_dict(data), 4).cells
    if not isinstance(cells, list):
        raise ValueError("the notebook has no list of cells")
    if len(cells) > max_cells:
        raise NotebookTooLarge(f"{len(cells)} cells, over the limit of {max_cells}")
    code = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(part for part in source if isinstance(part, str))
        if isinstance(source, str):
            code.append(source if magics else neutralise_magics(source))
    return code


def _stripped_notebook(path: Path, max_bytes: int, limits: dict) -> str:
    """The notebook's JSON text with its outputs, attachments and metadata dropped (grader/intake/nbstrip.py)."""
    max_read = DEFAULT_LIMITS.max_file_bytes
    size = path.stat().st_size
    if size > max_read:
        raise NotebookTooLarge(f"{size} bytes, over the limit of {max_read}: {CLEAR_OUTPUTS}")
    status, out, err = _limited("nbstrip.py", [str(max_read), str(max_bytes)], os.fsencode(path), limits,
                                doing="reading it", advice=CLEAR_OUTPUTS)
    if status == 3:
        raise NotebookTooLarge(f"over {max_read} bytes: {CLEAR_OUTPUTS}")
    if status == 4:
        raise NotebookTooLarge(f"its code, outputs aside, is over the limit of {max_bytes} bytes")
    if status != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {status}"]
        raise ValueError(last[0][:200])
    return out.decode("ascii")


def _limited(script: str, args: list[str], data: bytes, limits: dict, *, doing: str,
             advice: str) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of grader/intake/`script` run as `python -I -S` on `data` (its stdin), in a
    process limited to the lesson's [notebooks] `memory_bytes` and CPU `seconds` (`limits`): a notebook is the
    student's file. NotebookTooLarge, saying what `doing` took and then `advice`, when it ran out of either."""
    memory, seconds = int(limits.get("memory_bytes", 1 << 30)), float(limits.get("seconds", 30))
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).with_name(script)), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # Set from outside (no preexec_fn: the caller may have threads); the helper reads nothing before
        # it is sent its input.
        resource.prlimit(proc.pid, resource.RLIMIT_AS, (memory, memory))
        resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
        # CPU time, not wall time (helper_process): on a busy machine a notebook it can read is still read.
        # Wall time bounds a reader that waits rather than works.
        cpu = max(1, math.ceil(seconds))
        resource.prlimit(proc.pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
        out, err = proc.communicate(data, timeout=seconds * WALL_FACTOR)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise NotebookTooLarge(f"{doing} took more than {seconds * WALL_FACTOR:g} s: {advice}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # RLIMIT_CPU's soft, then hard, limit
        raise NotebookTooLarge(f"{doing} took more than {cpu} s of CPU time: {advice}")
    last = err.decode("utf-8", "replace").strip().splitlines()[-1:]
    if proc.returncode != 0 and last and "MemoryError" in last[0]:
        raise NotebookTooLarge(f"{doing} needs more than {memory >> 20} MB: {advice}")
    return proc.returncode, out, err


def notebook_module_source(notebook_name: str, cells: list[str], numbers: list[int] | None = None,
                           parts: dict[str, list[int]] | None = None, future: dict[int, int] | None = None) -> str:
    """The notebook's cells and a function that runs a part's cells, each under try/except, in a namespace. `numbers`:
    each cell's number among the notebook's code cells (default 1, 2, ...), as errors name it. `parts`: part -> the
    places in `cells` of those its module runs (grader/intake/sections.py; a part not named runs every cell).
    `future`: place -> the `__future__` flags that cell sets, which hold for the later cells of every part.

    The notebook's name is the student's: it appears only as a string literal (repr), never as text
    pasted into the source, where a quote in it would end the string and change the code."""
    parts = {str(part): [int(i) for i in places] for part, places in (parts or {}).items()}
    future = {int(place): int(flags) for place, flags in (future or {}).items()}
    return (
        '"""Generated from the notebook named in NOTEBOOK: its code cells, and those each part runs. A cell that\n'
        'raises is recorded and skipped, so one bad cell does not lose the definitions of later ones."""\n'
        "import linecache as _linecache\n"
        "import traceback as _traceback\n\n"
        f"NOTEBOOK = {notebook_name!r}\n"
        f"CELLS = {json.dumps(cells, ensure_ascii=True, indent=0)}\n"
        f"NUMBERS = {json.dumps(numbers or list(range(1, len(cells) + 1)))}\n"
        "# Each part's cells (places in CELLS), so that a cell of one part never runs in another's process.\n"
        f"PARTS = {json.dumps(parts)}\n"
        "# A cell's `from __future__ import ...` holds for the cells after it, as in a kernel (magics.compile_cell),\n"
        "# in every part: the flags each such cell sets, by its place.\n"
        f"FUTURE = {future!r}\n"
        f"_FUTURE = {FUTURE_FLAGS}  # the flags those imports can set (the child runs this Python)\n\n\n"
        "def _display(*objects, **options):\n"
        "    pass  # a kernel's display() shows its objects; graded, nothing is shown\n\n\n"
        "def _given(taken):\n"
        "    # The names the part takes from a sibling; none when the sibling cannot be imported (the cells' own stand).\n"
        "    try:\n"
        "        return dict(taken()) if taken is not None else {}\n"
        "    except ImportError:\n"
        "        return {}\n\n\n"
        "def run_cells(namespace, part=None, taken=None):\n"
        "    # `taken()` gives what the part's module takes from a sibling, as its .py file's import would: bound before\n"
        "    # the cells and again after each, so what a cell captures as it runs (a class attribute) is the same.\n"
        "    errors = namespace.setdefault('_CELL_ERRORS', [])\n"
        "    namespace.setdefault('display', _display)  # a builtin in every Jupyter kernel\n"
        "    given = _given(taken)\n"
        "    namespace.update(given)\n"
        "    chosen = set(PARTS.get(part, range(len(CELLS))))\n"
        "    flags = 0\n"
        "    for place, (i, source) in enumerate(zip(NUMBERS, CELLS)):\n"
        "        if place not in chosen:\n"
        "            flags |= FUTURE.get(place, 0) & _FUTURE\n"
        "            continue\n"
        "        name = f'{NOTEBOOK} cell {i}'\n"
        "        # A traceback shows the cell's own line, as it shows a file's (a kernel does the same for its cells).\n"
        "        _linecache.cache[name] = (len(source), None, source.splitlines(True), name)\n"
        "        try:\n"
        "            code = compile(source, name, 'exec', flags, True)\n"
        "            flags |= code.co_flags & _FUTURE\n"
        "            exec(code, namespace)\n"
        "        except BaseException as exc:  # SystemExit too: a later cell may define what is graded\n"
        "            errors.append((i, _traceback.format_exception_only(type(exc), exc)[-1].strip()))\n"
        "        for key, value in given.items():\n"
        "            # Another name for what the cell bound to a taken name (`attend = <that function>`) is the same\n"
        "            # object as a .py file's: the stand-in too.\n"
        "            own = namespace.get(key)\n"
        "            if own is not value and own is not None:\n"
        "                for other, held in list(namespace.items()):\n"
        "                    if held is own:\n"
        "                        namespace[other] = value\n"
        "        namespace.update(given)\n"
    )


def contract_module_source(notebook_name: str, module: str, *, lesson) -> str:
    """A contract module made of the notebook's cells that `module` needs (grader/intake/sections.py), run in this
    module's own namespace, so that no other part's cell runs where this part is graded.

    The name a contract file takes from a sibling (the lesson's [sibling_imports], as in the reference) is imported
    from the sibling module before the cells run, as the .py file's import is: graded, the grader's stand-in, which a
    class body or a default value then holds as it would in the .py file."""
    notebook_module = lesson.notebook_module
    text = (f"# Generated from a notebook ({notebook_module}.NOTEBOOK): the code cells this part needs.\n"
            f"from {notebook_module} import run_cells as _run_cells\n\n\n")
    if module not in lesson.sibling_imports:
        return text + f"_run_cells(globals(), {module!r})\n"
    sibling, name = lesson.sibling_imports[module]
    return text + ("def _taken():\n"
                   f"    from {sibling} import {name}  # as {module}.py would\n"
                   f"    return {{{name!r}: {name}}}\n\n\n"
                   f"_run_cells(globals(), {module!r}, _taken)\n")


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
