"""The deliverables checker: safe reading of a submission's files, image, text and fingerprint
checks, and the runner that turns a lesson's checks into a checklist.

Which files a lesson asks for, and what makes each one right, are the lesson's rules: a module in
the lesson's folder (declared in its lesson.toml, `[deliverables] checks`) that defines
`CHECKS = ((check id, check), ...)`, each check taking the submission folder and returning a
`Check`. The grader scores the lesson's `deliverables` component from `run_checks(folder, CHECKS)`.

Standalone on purpose: stdlib + numpy + Pillow only, no `grader.*` import, because the student
release ships this very file (tools/deliverables.py) with the lesson's rules beside it
(tools/deliverable_checks.py) as the student's `make check`.

A submission is untrusted input, so every read goes through `read_file()`: the name is matched
case-insensitively at the top level of the folder, a symlink is followed only when it stays inside
the folder, anything that is not a regular file is refused, and the size is checked before a byte
is read. Every check turns a broken file into a failed `Check` with a message, never an exception.

    python -m grader check SUBMISSION          # in the kit, with the lesson's checks
    python tools/deliverables.py SUBMISSION    # standalone (the student release)
"""
from __future__ import annotations

import argparse
import base64
import codecs
import hashlib
import importlib.util
import io
import os
import re
import stat
import struct
import sys
import unicodedata
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Size caps, checked with stat before reading: a submission can't make the checker read a huge file.
MAX_IMAGE_BYTES = 20 * 2**20
MAX_PIXELS = 50_000_000  # checked from the image header, before any pixel is decoded
# A JPEG's scans, counted from its markers before any pixel is decoded. Each scan makes the decoder read every
# block of the picture again, and a repeated scan costs the file a few bytes: 2,000 of them on a 4096x4096 picture
# took 22 s of CPU, and 20 MB hold ~600,000. Encoders write 1 (baseline) to about 20 (optimised progressive).
MAX_JPEG_SCANS = 100


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS markers) a JPEG file can hold at most: in entropy-coded data every 0xFF byte is
    followed by 0x00, so each FF DA is a scan's header (or a byte of metadata: the count is an upper bound)."""
    return data.count(b"\xff\xda")


def too_many_scans(data: bytes) -> bool:
    """Whether `data` is a JPEG stream of more than MAX_JPEG_SCANS scans. Asked of every picture, whatever Pillow
    calls it: a JPEG with an MPF segment is opened as "MPO" (a camera's stereo pair) and decoded by the same libjpeg."""
    return data[:2] == b"\xff\xd8" and jpeg_scans(data) > MAX_JPEG_SCANS


# What Pillow calls a picture it decodes with libjpeg, which draft() can decode at a reduced scale.
JPEG_FORMATS = ("JPEG", "MPO")
MAX_NPY_BYTES = 9 * 2**20  # a 1024 x 1024 float64 matrix plus its header
MAX_TEXT_BYTES = 256 * 2**10
MAX_SVG_TAGS = 200_000  # a drawn diagram has hundreds; matplotlib's busiest figures tens of thousands
MAX_PDF_INFLATED = 16 * 2**20  # total bytes inflated from PDF content streams

NGRAM = 8  # fingerprinted run length, in words of two or more characters
# A copied passage is a shared run of at least this many such words: one short sentence that
# happens to match ("Every row sums to 1 because of the softmax", 8 words) is not copying.
MIN_COPIED_WORDS = 10
_HASH_BYTES = 6
# Where the student release puts the lesson's rules, beside this file.
RELEASED_CHECKS = "deliverable_checks.py"


@dataclass(frozen=True)
class Check:
    """One deliverable check. `id` maps to the rubric entry `<deliverables component>.<id>`."""

    id: str
    passed: bool
    message: str  # when failed: what is wrong and how to fix it; when passed: a short confirmation
    title: str = ""


class Problem(Exception):
    """A deliverable is missing or broken; the text is shown to the student as is."""


# --------------------------------------------------------------------------- reading files safely


def _entries(root: str, limit: int = 10_000) -> list[os.DirEntry]:
    """The first `limit` entries of a folder, sorted by name: a folder of a million files costs little."""
    entries = []
    with os.scandir(root) as it:
        for entry in it:
            if len(entries) >= limit:
                break
            entries.append(entry)
    return sorted(entries, key=lambda e: e.name)


def find(root: str, names: tuple[str, ...]) -> list[str]:
    """Top-level entries whose name is one of `names` (ignoring case), in the order of `names`."""
    by_name: dict[str, list[str]] = {}
    for entry in _entries(root):
        by_name.setdefault(entry.name.lower(), []).append(entry.name)
    return [name for wanted in names for name in sorted(by_name.get(wanted.lower(), []))]


def misplaced(root: str, names: tuple[str, ...]) -> str:
    """A hint when the file exists one folder down (a common mistake), else ''."""
    wanted = {name.lower() for name in names}
    for entry in _entries(root):
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            try:
                inner = [e.name for e in _entries(entry.path, limit=500)]
            except OSError:
                continue
            for name in inner:
                if name.lower() in wanted:
                    return f" Found {entry.name}/{name}: move it to the top level of the folder."
    return ""


def _missing(root: str, names: tuple[str, ...], how: str) -> Problem:
    others = sorted({n.rsplit(".", 1)[-1] for n in names[1:] if "." in n})
    label = names[0] + (f" (or .{', .'.join(others)})" if others else "")
    return Problem(f"Missing: no {label} at the top level of the folder.{misplaced(root, names)} {how}")


def _inside(root: str, target: str) -> bool:
    try:
        return os.path.commonpath([root, target]) == root
    except ValueError:  # different drives: certainly not inside
        return False


def read_file(root: str, name: str, cap: int) -> bytes:
    """The bytes of `root/name`, refusing links out of `root`, non-regular files and files over `cap`."""
    path = os.path.join(root, name)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if not _inside(root, target):
            raise Problem(f"{name} is a symbolic link to {os.readlink(path)!r}, outside the submission folder; "
                          "the checker does not follow it. Replace the link with a copy of the file.")
        path = target
        st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Problem(f"{name} is not a regular file (it is a folder or a device). Save the real file under this name.")
    if st.st_size == 0:
        raise Problem(f"{name} is empty (0 bytes). Save it again and check that the save finished.")
    if st.st_size > cap:
        raise Problem(f"{name} is {st.st_size / 2**20:.1f} MB; the limit is {cap / 2**20:.0f} MB. "
                      "Save a smaller version (fewer pixels, or a compressed format).")
    # O_NOFOLLOW: the file can't be swapped for a link between the checks above and the open;
    # O_NONBLOCK: a FIFO slipped in after the check can't block the open.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Problem(f"{name} is not a regular file. Save the real file under this name.")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > cap:
        raise Problem(f"{name} is larger than {cap / 2**20:.0f} MB. Save a smaller version.")
    return b"".join(chunks)


def _first_readable(root: str, names: tuple[str, ...], how: str, cap: int, judge) -> tuple[str, str]:
    """Judge every candidate file; return (name, confirmation) of the first that passes.

    Several candidates (say analysis.md and analysis.txt) pass if any of them passes: a student
    is never marked down for an extra file. Raises the first candidate's problem otherwise.
    """
    candidates = find(root, names)
    if not candidates:
        raise _missing(root, names, how)
    problems = []
    for name in candidates:
        try:
            data = read_file(root, name, cap)
        except OSError as error:
            problems.append(Problem(f"{name} could not be read ({error.strerror}). Check the file's permissions "
                                    "and save it again."))
            continue
        except Problem as problem:
            problems.append(problem)
            continue
        try:
            return name, judge(name, data)
        except Problem as problem:
            problems.append(problem)
    raise problems[0]


def judged(check_id: str, title: str, root: str, names, missing_hint: str, max_bytes: int, judge) -> Check:
    """The first readable file of `names` (accepted names, in order of preference, matched ignoring
    case; the first is the one a missing-file message names), judged by `judge(name, data)`: a
    passed Check with the judge's message, or a failed one saying what is missing or wrong (every
    problem is a Problem, never a crash)."""
    try:
        _, message = _first_readable(root, names, missing_hint, max_bytes, judge)
        return Check(check_id, True, message, title)
    except Problem as problem:
        return Check(check_id, False, str(problem), title)


def sniff(data: bytes) -> str:
    """What a file really is, for messages like 'this is a text file, not a PNG'."""
    head = data[:64]
    kinds = [(b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
             (b"%PDF-", "a PDF document"), (b"PK\x03\x04", "a zip archive (e.g. .docx or .key)"),
             (b"\x93NUMPY", "a NumPy .npy file"), (b"\x80", "a Python pickle"), (b"BM", "a BMP image")]
    for magic, kind in kinds:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"mif1", b"msf1", b"avif"):
        return "a HEIC/AVIF photo (export it as JPEG or PNG)"
    if head.lstrip().lower().startswith((b"<?xml", b"<svg")):
        return "an SVG/XML file"
    try:
        # Incremental: a multi-byte character cut at byte 2048 is not a decoding error.
        text = codecs.getincrementaldecoder("utf-8")().decode(data[:2048], final=False)
        return "a text file" if "\x00" not in text else "an unknown binary file"
    except UnicodeDecodeError:
        return "an unknown binary file"


def listed(name: str, problems: list[str]) -> str:
    """One problem on one line; several as a list, one per line."""
    if len(problems) == 1:
        return f"{name}: {problems[0]}"
    return f"{name} needs {len(problems)} fixes:\n" + "\n".join(f"- {p}" for p in problems)


# --------------------------------------------------------------------------- images


def decode_image(name: str, data: bytes, formats: tuple[str, ...], *, load: bool = True):
    """Open with Pillow and verify the structure; decode the pixels too unless load=False (then
    `load_pixels` does it, if they are needed). Any failure is a Problem."""
    from PIL import Image

    try:
        # MAX_PIXELS is below Pillow's own decompression-bomb limit, so the header check comes first.
        with Image.open(io.BytesIO(data), formats=list(formats)) as probe:
            width, height = probe.size
            if width * height > MAX_PIXELS:
                raise Problem(f"{name} is {width}x{height} pixels; the limit is {MAX_PIXELS // 10**6} megapixels. "
                              "Save it at a lower resolution.")
            if too_many_scans(data):
                raise Problem(f"{name} is a JPEG of {jpeg_scans(data):,} scans (an ordinary one has at most about 20), "
                              "which takes minutes to decode. Save it again as an ordinary JPEG, or as PNG.")
            probe.verify()  # checks the structure and checksums without decoding pixels
        image = Image.open(io.BytesIO(data), formats=list(formats))
        if image.format in JPEG_FORMATS:
            image.draft("RGB", (2048, 2048))  # decode big photos at a reduced scale
    except (Problem, MemoryError):  # a memory limit is not a damaged file: run_checks says which
        raise
    except Exception as error:  # Pillow raises many types for broken files; all mean the same here
        raise _unreadable(name, data, formats, error) from None
    return load_pixels(name, data, formats, image) if load else image


def load_pixels(name: str, data: bytes, formats: tuple[str, ...], image):
    try:
        image.load()
    except MemoryError:
        raise
    except Exception as error:
        raise _unreadable(name, data, formats, error) from None
    return image


def _unreadable(name: str, data: bytes, formats: tuple[str, ...], error: Exception) -> Problem:
    what = " or ".join(formats)
    kind = sniff(data)
    if kind in ("a PNG image", "a JPEG image") and kind.split()[1] in formats:
        why = f"it starts like {kind} but is damaged or cut short ({type(error).__name__}: {str(error)[:80]})"
    else:
        why = f"it is {kind}, not {what}"
    return Problem(f"{name} could not be opened as {what}: {why}. Export the image again "
                   "(e.g. plt.savefig) and check that it opens in an image viewer.")


def to_rgb(image):
    from PIL import Image

    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        span = float(pixels.max() - pixels.min()) or 1.0
        image = Image.fromarray(((pixels - pixels.min()) / span * 255).astype(np.uint8))
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image if image.mode == "RGBA" else image.convert("RGBA")
        if _opaque(rgba):
            # Opaque (plt.savefig's default): compositing on white would change no pixel (checked on
            # every 8-bit colour), and it is most of the time a picture's fingerprint takes.
            return rgba.convert("RGB")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def to_grey(image):
    """`to_rgb(image).convert("L")`, the same bytes, in one conversion instead of two for an opaque RGBA picture:
    grey is a weighted sum of red, green and blue, which dropping an alpha of 255 leaves as they are."""
    if image.mode == "RGBA" and _opaque(image):
        return image.convert("L")
    return to_rgb(image).convert("L")


def _opaque(rgba) -> bool:
    return rgba.getchannel("A").getextrema() == (255, 255)


def _reduction(size: tuple[int, int]) -> int:
    """The box size that brings a picture down to <= 512 px a side."""
    return max(1, -(-max(size) // 512))


def pixel_stats(image) -> tuple[float, int]:
    """(ink, colours): the share of pixels clearly unlike the background colour, and how many
    colours cover a visible share of the picture. Box-averaged down to <= 512 px a side (a 1-pixel
    pen line in a 1600-pixel scan still stands out), so noise in a photo of blank paper does not."""
    from PIL import Image, ImageChops

    small = _small_rgb(image, _reduction(image.size))
    rgb = np.asarray(small).reshape(-1, 3)  # (pixels, 3) uint8
    codes, counts = _colour_bins(rgb)
    # The mean colour of the most common code. Integer sums channel by channel: the same value as
    # rgb[mask].mean(axis=0) (float64 sums of integers this small are exact) at a tenth of the time.
    mask = codes == counts.argmax()
    mean = np.array([rgb[:, c][mask].sum(dtype=np.int64) for c in range(3)]) / np.count_nonzero(mask)
    background = tuple(int(c) for c in mean.round())
    diff = ImageChops.difference(small, Image.new("RGB", small.size, background))
    distance = ImageChops.lighter(ImageChops.lighter(*diff.split()[:2]), diff.split()[2])  # max over channels
    ink = sum(distance.histogram()[41:]) / len(codes)
    colours = int((counts >= max(1, 0.0005 * len(codes))).sum())
    return ink, colours


def _colour_bins(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pixel's colour bin (4 bits per channel) and the pixel count of each of the 4096 bins."""
    top = (rgb >> 4).astype(np.int32)
    codes = (top[:, 0] << 8) | (top[:, 1] << 4) | top[:, 2]  # the same codes as top @ [256, 16, 1], faster
    return codes, np.bincount(codes, minlength=4096)


def _small_rgb(image, factor: int):
    """The picture in RGB, box-averaged by `factor`, composited on white where transparent."""
    from PIL import Image, ImageChops

    if image.mode == "RGBA" and image.getchannel("A").getextrema()[0] == 255:
        image = image.convert("RGB")  # opaque, as matplotlib saves a figure: the alpha band says nothing
    if image.mode == "RGBA":
        # Premultiplied, compositing on white is C + (255 - alpha), and it commutes with box averaging,
        # so the premultiplied picture is reduced and composited as it is (~3x faster than reduce(),
        # which premultiplies, averages and divides back, then alpha_composite, which multiplies again).
        premultiplied = image.convert("RGBa")
        if factor > 1:
            premultiplied = premultiplied.reduce(factor)
        *colour, alpha = premultiplied.split()
        white = ImageChops.invert(alpha)
        return Image.merge("RGB", [ImageChops.add(band, white) for band in colour])
    if factor > 1 and image.mode in ("RGB", "L", "LA"):
        image = image.reduce(factor)  # before the conversion: cheaper on a small picture
        factor = 1
    small = to_rgb(image)
    return small.reduce(factor) if factor > 1 else small


def drawn_in_the_top_quarter(data: bytes, size: tuple[int, int], min_colours: int, min_ink: float) -> bool:
    """Whether the top quarter of a PNG alone proves the whole picture is not blank (then the rest
    is never decoded: decoding is most of a deliverables check). False means "not proven", not blank.

    The top rows, reduced with the whole picture's box size, are exactly the top of the whole
    reduced picture, so a colour's pixel count there is a lower bound of its count in the whole.
    Enough colours then means enough colours. For ink: two colours whose pixels differ by more than
    80 in one channel cannot both be within 40 of the background, whatever colour it turns out to
    be, so the smaller of the two counts is a lower bound of the ink."""
    width, height = size
    factor = _reduction(size)
    rows = height // 4 // factor * factor
    strip = png_rows(data, size, rows) if rows else None
    if strip is None:
        return False
    pixels = -(-width // factor) * -(-height // factor)  # of the whole reduced picture
    _, counts = _colour_bins(np.asarray(_small_rgb(strip, factor)).reshape(-1, 3))
    if int((counts >= max(1, 0.0005 * pixels)).sum()) < min_colours:
        return False
    big = np.nonzero(counts >= max(1, min_ink * pixels))[0]
    levels = np.stack([big >> 8, (big >> 4) & 15, big & 15], axis=1)  # (bins, 3) of 16 levels each
    # Bins 6 levels apart hold pixels at least 6 * 16 - 15 = 81 apart.
    return len(big) >= 2 and bool((levels.max(axis=0) - levels.min(axis=0) >= 6).any())


def png_rows(data: bytes, size: tuple[int, int], rows: int):
    """The first `rows` rows of an 8-bit RGB or RGBA PNG without interlacing, decoding only those;
    None for any other PNG (the caller then decodes the whole picture).

    `size` is what Pillow read from the header and the caller checked against MAX_PIXELS: the one
    trusted size. The PNG's own first chunk must say the same, and a second IHDR (which Pillow never
    reads) refuses the shortcut: nothing is ever allocated from a size that was not checked."""
    from PIL import Image

    header, compressed, at = None, [], 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IHDR":
            if header is not None or at != 8 or length != 13:
                return None
            header = struct.unpack(">IIBBBBB", data[at + 8:at + 21])
        elif kind == b"IDAT":
            compressed.append(data[at + 8:at + 8 + length])
        elif kind == b"IEND":
            break
        at += 12 + length
    if header is None or not compressed:
        return None
    width, height, depth, colour, _, _, interlace = header
    mode = {2: "RGB", 6: "RGBA"}.get(colour)
    if (width, height) != tuple(size) or depth != 8 or mode is None or interlace or not 0 < rows <= height:
        return None
    try:
        # Pillow's PNG ("zip") decoder stops once the rows asked for are complete.
        return Image.frombytes(mode, (width, rows), b"".join(compressed), "zip", mode)
    except Exception:
        return None


# --------------------------------------------------------------------------- arrays (.npy)


NPY_MAGIC = b"\x93NUMPY"


def npy_header(name: str, data: bytes) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, where the data starts) of an .npy file, read from its header without loading it."""
    from numpy.lib import format as npy_format

    stream = io.BytesIO(data)
    try:
        version = npy_format.read_magic(stream)
        read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    except Exception as error:
        raise Problem(f"{name} has a damaged .npy header ({str(error)[:80]}). Save it again with np.save.") from None
    return shape, dtype, stream.tell()


def plain_numbers(dtype: np.dtype) -> bool:
    """Whether an .npy dtype holds numbers only: no Python objects (a pickle) and no record type."""
    return not dtype.hasobject and dtype.names is None and dtype.kind in "fiub"


def npy_load(name: str, data: bytes, shape: tuple[int, ...], dtype: np.dtype, offset: int) -> np.ndarray:
    """The array, once its header's byte count matches the file: what np.load allocates is never
    more than the file holds (and the file was read under a cap). Never unpickles."""
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - offset != expected:
        raise Problem(f"{name} is cut short or padded: its header promises {expected} bytes of data, the file has "
                      f"{len(data) - offset}. Save it again with np.save.")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:
        raise Problem(f"{name} could not be loaded ({type(error).__name__}: {str(error)[:80]}). Save it again with np.save.") from None


# --------------------------------------------------------------------------- text


def decode_text(name: str, data: bytes) -> str:
    """A text file's words, whatever its encoding and line endings, with runs of blank lines reduced."""
    if b"\x00" in data:
        raise Problem(f"{name} is not a text file (it is {sniff(data)}). Write it as plain text or Markdown.")
    try:
        decoded = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        decoded = data.decode("cp1252", errors="replace")  # an editor's legacy encoding: still the student's words
    decoded = decoded.replace("\r\n", "\n").replace("\r", "\n")
    # Blank lines hold nothing a check reads, but the patterns that allow spaces and newlines at a
    # line start (^\s*) would rescan a long run of them from every line in it: with the run reduced
    # to one empty line, every text check is linear in the text.
    return _BLANK_RUN.sub("\n\n", _SPACES_LINE.sub("", decoded))


_SPACES_LINE = re.compile(r"^[^\S\n]+$", re.MULTILINE)
_BLANK_RUN = re.compile(r"\n{3,}")


# Lines that are layout, not writing: headings, rules, table rows, an embedded image, a comment.
_NOT_A_LINE = re.compile(r"^\s{0,3}(#{1,6}(\s|$)|([-*_]\s*){3,}$|={3,}$)|^\s*(\||!\[[^\]]*\]\([^)]*\)\s*$|<!--)")
_FENCED = re.compile(r"^\s*(```|~~~).*?(^\s*\1[^\n]*$|\Z)", re.DOTALL | re.MULTILINE)


def text_lines(text: str) -> list[str]:
    """The lines of writing in a Markdown text: no blank lines, code blocks, headings, rules, tables,
    embedded images or comments."""
    return [line for line in _FENCED.sub("", text).split("\n") if line.strip() and not _NOT_A_LINE.match(line)]


_CODE = re.compile(r"^\s*(```|~~~).*?(^\s*\1[^\n]*$|\Z)|`[^`\n]*`|<!--.*?-->", re.DOTALL | re.MULTILINE)


def prose(text: str) -> str:
    """A Markdown text without code blocks, inline code and HTML comments: code is not prose."""
    # An "<!--" after the last "-->" starts no comment; left as it is, each would make the pattern
    # scan to the end of the text for a "-->" (quadratic in a text of many of them).
    last = text.rfind("-->")
    text = text[:last + 1] + text[last + 1:].replace("<!--", "<! --") if last >= 0 else text.replace("<!--", "<! --")
    return _CODE.sub(" ", text)


HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s+(.*)$", re.MULTILINE)


def sentences(text: str) -> list[str]:
    """Sentences, paragraphs and list items."""
    return [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n|\n\s*[-*+]\s|\n\s*\d+[.)]\s", text) if s.strip()]


# --------------------------------------------------------------------------- vector drawings


_SVG_DRAWING = {"path", "rect", "line", "polyline", "polygon", "circle", "ellipse", "text", "image", "use"}


def _declares_entities(data: bytes) -> bool:
    """An <!ENTITY, or a DOCTYPE with an internal subset ("[" before its ">").

    One scan: DOCTYPEs that share the same next ">" share one look for "[" (a single pattern for
    both would scan to the end of the file from each of many DOCTYPEs that never close)."""
    if re.search(rb"<!\s*ENTITY", data, re.IGNORECASE):
        return True
    covered = -1
    for doctype in re.finditer(rb"<!\s*DOCTYPE", data, re.IGNORECASE):
        if doctype.start() < covered:
            continue  # its ">" is the one the previous DOCTYPE's look reached: already searched
        close = data.find(b">", doctype.end())
        covered = len(data) if close < 0 else close
        if data.find(b"[", doctype.end(), covered) >= 0:
            return True
    return False


def svg_drawing_elements(name: str, data: bytes, *, drawing: str = "a drawing") -> int:
    """How many drawing elements (paths, shapes, text, images) an SVG holds; a Problem when it is
    not plain SVG. `drawing` names what the file should show, for the message on a huge file."""
    # No defusedxml here, so no entity may be declared at all: an ENTITY or an internal DTD subset
    # is refused before parsing. A plain <!DOCTYPE svg PUBLIC ...> line (matplotlib and many editors
    # write one) is harmless: expat never fetches the external DTD.
    if _declares_entities(data):
        raise Problem(f"{name} declares XML entities (a DOCTYPE with [...] or <!ENTITY>), which the checker does "
                      "not process. Export the SVG again as plain SVG, or save a PNG.")
    if data.count(b"<") > MAX_SVG_TAGS:  # parsing that many (nested) elements takes seconds and ~0.5 GB
        raise Problem(f"{name} has more than {MAX_SVG_TAGS:,} elements, far more than {drawing} "
                      "needs. Simplify the drawing, or save it as a PNG.")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as error:
        raise Problem(f"{name} is not valid SVG/XML ({error}). Export it again, or save a PNG instead.") from None
    if root.tag.rsplit("}", 1)[-1].lower() != "svg":
        raise Problem(f"{name} is XML but not SVG (its root is <{root.tag}>). Export an SVG or a PNG.")
    return sum(1 for element in root.iter() if isinstance(element.tag, str)
               and element.tag.rsplit("}", 1)[-1].lower() in _SVG_DRAWING)


_PDF_STREAM = re.compile(rb"stream\r?\n")
_PDF_MARKS = re.compile(rb"(?<=\s)(re|l|c|v|y|Tj|TJ|Do|sh|BI)(?=\s)")


def pdf_marks(data: bytes) -> int:
    """Drawing operators (lines, curves, rectangles, text, images) in the content streams.

    No PDF renderer is assumed to be installed; the streams are inflated (capped) and scanned.
    """
    marks, inflated, start = 0, 0, 0
    for _ in range(2000):
        found = _PDF_STREAM.search(data, start)
        if not found:
            break
        end = data.find(b"endstream", found.end())
        if end < 0:
            break
        raw = data[found.end():end]
        start = end + 9
        try:
            body = zlib.decompressobj().decompress(raw, max(1, MAX_PDF_INFLATED - inflated))
        except zlib.error:
            body = raw  # not Flate-encoded (or another filter): scan as is
        inflated += len(body)
        marks += len(_PDF_MARKS.findall(body[:4 * 2**20]))
        if inflated >= MAX_PDF_INFLATED:
            break
    return marks


def pdf_has_image(data: bytes) -> bool:
    """Whether a PDF places an image (a scan or photo) on a page."""
    return re.search(rb"/Subtype\s*/Image", data) is not None


# --------------------------------------------------------------------------- fingerprints


def words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) for the copy check: NFKC, case-folded, letters/digits, two characters or more."""
    return [(m.group(0).casefold(), m.start(), m.end()) for m in re.finditer(r"[^\W_]{2,}", text)]


def fingerprint(gram: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(gram).encode(), digest_size=_HASH_BYTES).digest(), "big")


def handout_fingerprints(handout: str) -> list[int]:
    """Sorted fingerprints of the handout's word n-grams, leaving out n-grams that lie wholly inside
    double quotes: those are the handout's example sentences, which a student may quote."""
    text = unicodedata.normalize("NFKC", handout)
    quoted = [m.span() for m in re.finditer(r"“[^”]{1,400}”|\"[^\"\n]{1,400}\"", text)]
    found = words(text)

    def in_quotes(start: int, end: int) -> bool:
        return any(a <= start and end <= b for a, b in quoted)

    prints = set()
    for i in range(len(found) - NGRAM + 1):
        gram = found[i:i + NGRAM]
        if not in_quotes(gram[0][1], gram[-1][2]):
            prints.add(fingerprint([w for w, _, _ in gram]))
    return sorted(prints)


def text_fingerprints(text: str) -> list[int]:
    """Sorted fingerprints of every word n-gram of `text`."""
    found = [w for w, _, _ in words(unicodedata.normalize("NFKC", text))]
    return sorted({fingerprint(found[i:i + NGRAM]) for i in range(len(found) - NGRAM + 1)})


def write_fingerprints(handout_path: Path, out: Path, assignment_readme: Path, *, made_by: str) -> int:
    """Write `out`: the handout's n-grams (the copy check) and the assignment README's (the README a
    student finds in the folder, which is not their own). `made_by` is the command that rebuilds
    the file, for its header. Returns the number of handout fingerprints."""
    handout = Path(handout_path).read_text(encoding="utf-8")
    readme_path = Path(assignment_readme)
    readme = readme_path.read_text(encoding="utf-8") if readme_path.is_file() else ""
    sections = {"handout": handout_fingerprints(handout), "assignment-readme": text_fingerprints(readme)}
    lines = [f"# Fingerprints (blake2b-{_HASH_BYTES * 8} of word {NGRAM}-grams) for the README checks of the deliverables checker.",
             f"# Made by `{made_by}`; do not edit by hand.",
             f"# handout-sha256={hashlib.sha256(handout.encode()).hexdigest()[:16]}"]
    for section, prints in sections.items():
        blob = base64.b64encode(b"".join(p.to_bytes(_HASH_BYTES, "big") for p in prints)).decode()
        lines.append(f"@{section} count={len(prints)}")
        lines += [blob[i:i + 76] for i in range(0, len(blob), 76)]
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(sections["handout"])


def load_fingerprints(path: Path, section: str = "handout") -> set[int] | None:
    """One section of a fingerprints file, or None when the file is not there (the check that
    needs it is then skipped, and its message says so)."""
    # Read on every call (about 1 ms): no module keeps a lesson's data between calls.
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    chunks, current = [], None
    for line in lines:
        if line.startswith("@"):
            current = line[1:].split()[0]
        elif current == section and not line.startswith("#"):
            chunks.append(line.strip())
    raw = base64.b64decode("".join(chunks))
    return {int.from_bytes(raw[i:i + _HASH_BYTES], "big") for i in range(0, len(raw), _HASH_BYTES)}


def _matched_runs(found: list[tuple[str, int, int]], prints: set[int]) -> list[tuple[int, int]]:
    """(first word, last word) of each stretch of `found` covered by n-grams found in `prints`."""
    runs: list[tuple[int, int]] = []
    for i in range(len(found) - NGRAM + 1):
        if fingerprint([w for w, _, _ in found[i:i + NGRAM]]) in prints:
            if runs and i <= runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], i + NGRAM - 1)
            else:
                runs.append((i, i + NGRAM - 1))
    return runs


def copied_passages(text: str, prints: set[int]) -> list[str]:
    """Passages of `text` (the student's own words, longest first) that repeat the fingerprinted
    text for MIN_COPIED_WORDS words or more."""
    text = unicodedata.normalize("NFKC", text)
    found = words(text)
    passages = [" ".join(text[found[a][1]:found[b][2]].split()) for a, b in _matched_runs(found, prints)
                if b - a + 1 >= MIN_COPIED_WORDS]
    return sorted(passages, key=len, reverse=True)


def without_passages(text: str, prints: set[int] | None) -> tuple[str, int]:
    """`text` minus the passages it shares with the fingerprinted text (say the instructions a
    student finds in the folder), and how many words were removed. A student who kept the
    instructions and added their own explanation is judged on their explanation alone."""
    if not prints:
        return text, 0
    text = unicodedata.normalize("NFKC", text)
    found = words(text)
    kept, last, removed = [], 0, 0
    for a, b in _matched_runs(found, prints):
        kept.append(text[last:found[a][1]])
        kept.append("\n\n")  # a removed passage also ends the sentence before it
        last = found[b][2]
        removed += b - a + 1
    kept.append(text[last:])
    return "".join(kept), removed


# --------------------------------------------------------------------------- entry points


def run_checks(directory, checks) -> list[Check]:
    """Every check of `checks` ((check id, check) pairs) on one submission folder, in their order.
    Never raises."""
    try:
        root = os.path.realpath(os.fspath(directory))
        if not os.path.isdir(root):
            raise Problem(f"{directory} is not a folder. Point the checker at the folder that holds your files.")
    except (Problem, OSError, TypeError, ValueError) as problem:
        return [Check(check_id, False, str(problem), check_id) for check_id, _ in checks]
    results = []
    for check_id, check in checks:
        try:
            results.append(check(root))
        except MemoryError:  # under a memory limit (a grading run sets one): a file built to need more
            results.append(Check(check_id, False, "checking this file needed more memory than the checker may "
                                 "use. Save a smaller, ordinary file (fewer pixels, plain text).", check_id))
        except Exception as error:  # a checker bug must cost neither the student nor the batch
            results.append(Check(check_id, False, f"the checker failed on this item ({type(error).__name__}: "
                                 f"{str(error)[:120]}). This is a checker bug: tell your instructor.", check_id))
    return results


def _symbols() -> tuple[str, str]:
    try:
        "✓✗".encode(sys.stdout.encoding or "ascii")
        return "✓", "✗"
    except (UnicodeEncodeError, LookupError):
        return "[ok]", "[!!]"


def main(*, submission, checks) -> int:
    """Print a checklist for one submission folder. Exit code 0 when every check passes, else 1."""
    ok, bad = _symbols()
    if not os.path.isdir(submission):
        hint = " Unzip it first and point the checker at the folder." if str(submission).lower().endswith(".zip") else ""
        print(f"{bad} {submission} is not a folder.{hint}")
        return 1
    results = run_checks(submission, checks)
    print(f"Deliverables in {submission}:")
    for result in results:
        title = result.title or result.id
        if result.passed:
            print(f"  {ok} {title}: {result.message}")
        else:
            print(f"  {bad} {title}")
            for line in result.message.splitlines():
                print(f"      {line}")
    failed = sum(not r.passed for r in results)
    print("All deliverables are in place." if not failed else
          f"{failed} of {len(results)} deliverable check(s) to fix (see above), then run the check again.")
    return 0 if not failed else 1


def load_checks(path) -> tuple:
    """The CHECKS of a lesson's rules file, loaded from its path (the student release keeps it beside
    this file); the file imports this checker as `deliverables`, so this file's folder must be on
    sys.path, as it is when a script in it runs."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: it holds the assignment's deliverable checks. Download the "
                                "assignment's tools folder again.")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module.CHECKS


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the deliverables of a submission folder.")
    parser.add_argument("submission", nargs="?", default=".", help="the folder to check (default: here)")
    parser.add_argument("--checks", metavar="FILE", default=str(Path(__file__).with_name(RELEASED_CHECKS)),
                        help=f"the assignment's checks (default: {RELEASED_CHECKS} beside this file)")
    args = parser.parse_args(argv)
    try:
        checks = load_checks(args.checks)
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    return main(submission=args.submission, checks=checks)


if __name__ == "__main__":
    # The checks import this file as `deliverables`: they get this module, not a second copy of it.
    sys.modules.setdefault("deliverables", sys.modules[__name__])
    sys.exit(_cli())
