"""Deliverables checker: the heatmap, the analysis, the diagram and the README (handout §5, §18).

Standalone on purpose: stdlib + numpy + Pillow only, no `grader.*` import, because the student
release ships this very file as the student's `make check`. The grader scores the `deliverables`
component from the same `run_checks()`.

A submission is untrusted input, so every read goes through `_read_file()`: the name is matched
case-insensitively at the top level of the folder, a symlink is followed only when it stays inside
the folder, anything that is not a regular file is refused, and the size is checked before a byte
is read. Every check turns a broken file into a failed `Check` with a message, never an exception.

    python -m grader check SUBMISSION          # in the kit
    python tools/deliverables.py SUBMISSION    # standalone (the student release)
    python grader/deliverables.py --build-fingerprints HANDOUT.txt   # refresh handout_ngrams.txt
"""
from __future__ import annotations

import argparse
import base64
import codecs
import functools
import hashlib
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
MAX_NPY_BYTES = 9 * 2**20  # a 1024 x 1024 float64 matrix plus its header
MAX_TOKENS = 1024
MAX_TEXT_BYTES = 256 * 2**10
MAX_SVG_BYTES = 5 * 2**20
MAX_SVG_TAGS = 200_000  # a drawn diagram has hundreds; matplotlib's busiest figures tens of thousands
MAX_PDF_BYTES = 20 * 2**20
MAX_PDF_INFLATED = 16 * 2**20  # total bytes inflated from PDF content streams

MIN_HEATMAP_SIDE = 300
MIN_DIAGRAM_SIDE = 100
# Not blank: at least this many colours, each on >= 0.05 % of the picture, and this share of
# pixels clearly unlike the background (a heatmap is a range of colours; a diagram a few lines).
HEATMAP_COLOURS, HEATMAP_INK = 3, 0.02
DIAGRAM_COLOURS, DIAGRAM_INK = 2, 0.0005
MIN_TOKENS = 4
ROW_SUM_TOLERANCE = 1e-3
ANALYSIS_LINES = (4, 5)
# The issue asks for "at least about 80 words"; a few words short is still a real explanation.
MIN_README_WORDS = 75
NGRAM = 8  # fingerprinted run length, in words of two or more characters
# A copied passage is a shared run of at least this many such words: one short sentence that
# happens to match ("Every row sums to 1 because of the softmax", 8 words) is not copying.
MIN_COPIED_WORDS = 10
FINGERPRINTS = Path(__file__).with_name("handout_ngrams.txt")
_HASH_BYTES = 6

# Accepted names (matched case-insensitively), in order of preference (assignments/day13/CONTRACT.md, "The other deliverables").
HEATMAP_NAMES = ("attention_heatmap.png",)
WEIGHTS_NAMES = ("attention_weights.npy",)
ANALYSIS_NAMES = ("analysis.md", "analysis.txt")
DIAGRAM_NAMES = tuple(f"transformer_block.{ext}" for ext in ("png", "jpg", "jpeg", "svg", "pdf"))
README_NAMES = ("readme.md", "readme.markdown", "readme.txt", "readme")


@dataclass(frozen=True)
class Check:
    """One deliverable check. `id` maps to the rubric entry `deliverables.<id>`."""

    id: str
    passed: bool
    message: str  # when failed: what is wrong and how to fix it; when passed: a short confirmation
    title: str = ""


class _Problem(Exception):
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


def _find(root: str, names: tuple[str, ...]) -> list[str]:
    """Top-level entries whose lower-cased name is one of `names`, in the order of `names`."""
    by_name: dict[str, list[str]] = {}
    for entry in _entries(root):
        by_name.setdefault(entry.name.lower(), []).append(entry.name)
    return [name for wanted in names for name in sorted(by_name.get(wanted, []))]


def _misplaced(root: str, names: tuple[str, ...]) -> str:
    """A hint when the file exists one folder down (a common mistake), else ''."""
    wanted = set(names)
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


def _missing(root: str, names: tuple[str, ...], how: str) -> _Problem:
    others = sorted({n.rsplit(".", 1)[-1] for n in names[1:] if "." in n})
    label = names[0].replace("readme", "README") + (f" (or .{', .'.join(others)})" if others else "")
    return _Problem(f"Missing: no {label} at the top level of the folder.{_misplaced(root, names)} {how}")


def _inside(root: str, target: str) -> bool:
    try:
        return os.path.commonpath([root, target]) == root
    except ValueError:  # different drives: certainly not inside
        return False


def _read_file(root: str, name: str, cap: int) -> bytes:
    """The bytes of `root/name`, refusing links out of `root`, non-regular files and files over `cap`."""
    path = os.path.join(root, name)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if not _inside(root, target):
            raise _Problem(f"{name} is a symbolic link to {os.readlink(path)!r}, outside the submission folder; "
                           "the checker does not follow it. Replace the link with a copy of the file.")
        path = target
        st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _Problem(f"{name} is not a regular file (it is a folder or a device). Save the real file under this name.")
    if st.st_size == 0:
        raise _Problem(f"{name} is empty (0 bytes). Save it again and check that the save finished.")
    if st.st_size > cap:
        raise _Problem(f"{name} is {st.st_size / 2**20:.1f} MB; the limit is {cap / 2**20:.0f} MB. "
                       "Save a smaller version (fewer pixels, or a compressed format).")
    # O_NOFOLLOW: the file can't be swapped for a link between the checks above and the open;
    # O_NONBLOCK: a FIFO slipped in after the check can't block the open.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Problem(f"{name} is not a regular file. Save the real file under this name.")
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
        raise _Problem(f"{name} is larger than {cap / 2**20:.0f} MB. Save a smaller version.")
    return b"".join(chunks)


def _first_readable(root: str, names: tuple[str, ...], how: str, cap: int, judge) -> tuple[str, str]:
    """Judge every candidate file; return (name, confirmation) of the first that passes.

    Several candidates (say analysis.md and analysis.txt) pass if any of them passes: a student
    is never marked down for an extra file. Raises the first candidate's problem otherwise.
    """
    candidates = _find(root, names)
    if not candidates:
        raise _missing(root, names, how)
    problems = []
    for name in candidates:
        try:
            data = _read_file(root, name, cap)
        except OSError as error:
            problems.append(_Problem(f"{name} could not be read ({error.strerror}). Check the file's permissions "
                                     "and save it again."))
            continue
        except _Problem as problem:
            problems.append(problem)
            continue
        try:
            return name, judge(name, data)
        except _Problem as problem:
            problems.append(problem)
    raise problems[0]


def _sniff(data: bytes) -> str:
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


# --------------------------------------------------------------------------- images


def _decode_image(name: str, data: bytes, formats: tuple[str, ...], *, load: bool = True):
    """Open with Pillow and verify the structure; decode the pixels too unless load=False (then
    `_load_pixels` does it, if they are needed). Any failure is a _Problem."""
    from PIL import Image

    try:
        # MAX_PIXELS is below Pillow's own decompression-bomb limit, so the header check comes first.
        with Image.open(io.BytesIO(data), formats=list(formats)) as probe:
            width, height = probe.size
            if width * height > MAX_PIXELS:
                raise _Problem(f"{name} is {width}x{height} pixels; the limit is {MAX_PIXELS // 10**6} megapixels. "
                               "Save it at a lower resolution.")
            probe.verify()  # checks the structure and checksums without decoding pixels
        image = Image.open(io.BytesIO(data), formats=list(formats))
        if image.format == "JPEG":
            image.draft("RGB", (2048, 2048))  # decode big photos at a reduced scale
    except (_Problem, MemoryError):  # a memory limit is not a damaged file: run_checks says which
        raise
    except Exception as error:  # Pillow raises many types for broken files; all mean the same here
        raise _unreadable(name, data, formats, error) from None
    return _load_pixels(name, data, formats, image) if load else image


def _load_pixels(name: str, data: bytes, formats: tuple[str, ...], image):
    try:
        image.load()
    except MemoryError:
        raise
    except Exception as error:
        raise _unreadable(name, data, formats, error) from None
    return image


def _unreadable(name: str, data: bytes, formats: tuple[str, ...], error: Exception) -> _Problem:
    what = " or ".join(formats)
    kind = _sniff(data)
    if kind in ("a PNG image", "a JPEG image") and kind.split()[1] in formats:
        why = f"it starts like {kind} but is damaged or cut short ({type(error).__name__}: {str(error)[:80]})"
    else:
        why = f"it is {kind}, not {what}"
    return _Problem(f"{name} could not be opened as {what}: {why}. Export the image again "
                    "(e.g. plt.savefig) and check that it opens in an image viewer.")


def _to_rgb(image):
    from PIL import Image

    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        span = float(pixels.max() - pixels.min()) or 1.0
        image = Image.fromarray(((pixels - pixels.min()) / span * 255).astype(np.uint8))
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _reduction(size: tuple[int, int]) -> int:
    """The box size that brings a picture down to <= 512 px a side."""
    return max(1, -(-max(size) // 512))


def _pixel_stats(image) -> tuple[float, int]:
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
    small = _to_rgb(image)
    return small.reduce(factor) if factor > 1 else small


def _drawn_in_the_top_quarter(data: bytes, size: tuple[int, int], min_colours: int, min_ink: float) -> bool:
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
    strip = _png_rows(data, size, rows) if rows else None
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


def _png_rows(data: bytes, size: tuple[int, int], rows: int):
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


# --------------------------------------------------------------------------- heatmap


def _judge_heatmap(name: str, data: bytes) -> str:
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise _Problem(f"{name} is not a PNG: it is {_sniff(data)}. Save the figure as PNG, e.g. "
                       "plt.savefig('attention_heatmap.png'), or run `make heatmap`.")
    image = _decode_image(name, data, ("PNG",), load=False)
    width, height = image.size
    if min(width, height) < MIN_HEATMAP_SIDE:
        raise _Problem(f"{name} is {width}x{height} pixels, too small to read the token labels; it must be at least "
                       f"{MIN_HEATMAP_SIDE}x{MIN_HEATMAP_SIDE}. Save with a larger figure or dpi, e.g. "
                       "plt.figure(figsize=(6, 5)) and plt.savefig(..., dpi=100).")
    if not _drawn_in_the_top_quarter(data, image.size, HEATMAP_COLOURS, HEATMAP_INK):
        ink, colours = _pixel_stats(_load_pixels(name, data, ("PNG",), image))
        if colours < HEATMAP_COLOURS or ink < HEATMAP_INK:
            raise _Problem(f"{name} looks blank: {colours} colour(s), and {ink:.1%} of it differs from the background. "
                           "A heatmap shows a range of weights: plot the T x T matrix with plt.imshow(weights, cmap='viridis') "
                           "and add plt.colorbar() before saving.")
    return f"{name}: a {width}x{height} PNG."


def _judged(check_id: str, title: str, root: str, names, missing_hint: str, max_bytes: int, judge) -> Check:
    """The first readable file of `names`, judged: a passed Check with the judge's message, or a
    failed one saying what is missing or wrong (every problem is a _Problem, never a crash)."""
    try:
        _, message = _first_readable(root, names, missing_hint, max_bytes, judge)
        return Check(check_id, True, message, title)
    except _Problem as problem:
        return Check(check_id, False, str(problem), title)


def check_heatmap(root: str) -> Check:
    title = "Attention heatmap (attention_heatmap.png)"
    return _judged("heatmap_png", title, root, HEATMAP_NAMES, "Run `make heatmap`, or save your plot of the attention "
                   "weights with plt.savefig('attention_heatmap.png') (handout §5).",
                   MAX_IMAGE_BYTES, _judge_heatmap)


def _npy_array(name: str, data: bytes) -> np.ndarray:
    """Load an .npy file after checking its header: numeric dtype, sane shape, matching byte count."""
    from numpy.lib import format as npy_format

    if not data.startswith(b"\x93NUMPY"):
        raise _Problem(f"{name} is not a .npy file: it is {_sniff(data)}. Save the matrix with "
                       "np.save('attention_weights.npy', weights) (torch.save and pickle write other formats), "
                       "or run `make heatmap`.")
    stream = io.BytesIO(data)
    try:
        version = npy_format.read_magic(stream)
        read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(stream)
    except Exception as error:
        raise _Problem(f"{name} has a damaged .npy header ({str(error)[:80]}). Save it again with np.save.") from None
    if dtype.hasobject or dtype.names is not None or dtype.kind not in "fiub":
        raise _Problem(f"{name} holds {dtype} data (Python objects, i.e. a pickle, or a record type); the checker "
                       "only loads plain numbers. Save a float array: np.save('attention_weights.npy', "
                       "weights.detach().numpy().astype('float32')).")
    if len(shape) > 4 or any(side > MAX_TOKENS for side in shape):
        raise _Problem(f"{name} has shape {shape}; expected a T x T matrix with T <= {MAX_TOKENS}.")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - stream.tell() != expected:
        raise _Problem(f"{name} is cut short or padded: its header promises {expected} bytes of data, the file has "
                       f"{len(data) - stream.tell()}. Save it again with np.save.")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:
        raise _Problem(f"{name} could not be loaded ({type(error).__name__}: {str(error)[:80]}). Save it again with np.save.") from None


def _judge_weights(name: str, data: bytes) -> str:
    weights = _npy_array(name, data)
    while weights.ndim > 2 and weights.shape[0] == 1:  # (1, T, T) straight from a batch of one is fine
        weights = weights[0]
    if weights.ndim != 2 or weights.shape[0] != weights.shape[1]:
        raise _Problem(f"{name} has shape {weights.shape}; the heatmap's matrix is square (T x T). Save one "
                       "sentence's weights, e.g. weights[0] for a batch, or one head of one layer.")
    T = weights.shape[0]
    if T < MIN_TOKENS:
        raise _Problem(f"{name} covers {T} token(s); use a sentence of at least {MIN_TOKENS} tokens.")
    weights = weights.astype(np.float64)
    if not np.isfinite(weights).all():
        raise _Problem(f"{name} contains NaN or inf. A row whose every key is masked gives NaN: plot a sentence "
                       "without fully masked rows.")
    if weights.min() < 0:
        row, col = np.unravel_index(weights.argmin(), weights.shape)
        raise _Problem(f"{name} has a negative weight {weights[row, col]:.4g} at row {row}, column {col}; attention "
                       "weights come out of a softmax, so they are >= 0. Save the softmax output, not the scores.")
    sums = weights.sum(axis=1)  # (T,)
    worst = int(np.abs(sums - 1).argmax())
    if abs(sums[worst] - 1) > ROW_SUM_TOLERANCE:
        raise _Problem(f"{name}: row {worst} sums to {sums[worst]:.4f}, not 1 (tolerance {ROW_SUM_TOLERANCE}). "
                       "Each row is a softmax over the keys: softmax along the last dimension (dim=-1), and save "
                       "the weights, not the scores or the output.")
    return f"{name}: a {T}x{T} matrix, every row sums to 1."


def check_weights(root: str) -> Check:
    title = "Attention weights (attention_weights.npy, optional)"
    if not _find(root, WEIGHTS_NAMES):
        if _find(root, HEATMAP_NAMES):
            return Check("heatmap_weights", True, "attention_weights.npy not included (optional): nothing to check. "
                         "`make heatmap` saves it next to the heatmap.", title)
        return Check("heatmap_weights", False, "No heatmap and no attention_weights.npy. Run `make heatmap`: it saves both.",
                     title)
    return _judged("heatmap_weights", title, root, WEIGHTS_NAMES, "", MAX_NPY_BYTES, _judge_weights)


# --------------------------------------------------------------------------- text


def _text(name: str, data: bytes) -> str:
    if b"\x00" in data:
        raise _Problem(f"{name} is not a text file (it is {_sniff(data)}). Write it as plain text or Markdown.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")  # an editor's legacy encoding: still the student's words
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # Blank lines hold nothing a check reads, but the patterns below that allow spaces and newlines
    # at a line start (^\s*) would rescan a long run of them from every line in it: with the run
    # reduced to one empty line, every text check is linear in the text.
    return _BLANK_RUN.sub("\n\n", _SPACES_LINE.sub("", text))


_SPACES_LINE = re.compile(r"^[^\S\n]+$", re.MULTILINE)
_BLANK_RUN = re.compile(r"\n{3,}")


# Lines that are layout, not analysis: headings, rules, table rows, an embedded image, a comment.
_NOT_A_LINE = re.compile(r"^\s{0,3}(#{1,6}(\s|$)|([-*_]\s*){3,}$|={3,}$)|^\s*(\||!\[[^\]]*\]\([^)]*\)\s*$|<!--)")
_FENCED = re.compile(r"^\s*(```|~~~).*?(^\s*\1[^\n]*$|\Z)", re.DOTALL | re.MULTILINE)
# A token in quotes: straight or curly, single or double, or `code`. An apostrophe inside a word
# (didn't, model's) is not an opening quote, hence the look-behind.
_QUOTED = re.compile(r"""(?<![\w])(?:"[^"\n]{1,40}"|'[^'\s][^'\n]{0,39}'|“[^”\n]{1,40}”|‘[^’\n]{1,40}’|`[^`\n]{1,40}`"""
                     r"""|«[^»\n]{1,40}»|„[^“”\n]{1,40}[“”]|‚[^‘’\n]{1,40}[‘’])""")
_DECIMAL = re.compile(r"(?<![\w.,])(\d*\.\d+|[01],\d+)(?![\w.,]*\d)|(?<![\w.])(\d{1,3}(?:\.\d+)?)\s?%")
_WHERE = re.compile(r"\b(layer|head|heads|layers)\b|\bL\d+\s*H\d+\b", re.IGNORECASE)
# Where the weights came from: untrained/random (the §5 note), or the student's own toy training or
# hand-set Q/K (option B), which is as good as naming a layer and head.
_ARBITRARY = re.compile(r"\b(untrained|not trained|without training|before training|no training|random(ly)?|arbitrary|"
                        r"meaningless|no meaning|not meaningful|initiali[sz]ed|not learn(ed|t)|trained|hand-?set)\b",
                        re.IGNORECASE)


def _weights_quoted(text: str) -> list[str]:
    """Numbers that read as attention weights: a decimal in [0, 1] (0.42, .42, 1.0) or a percentage."""
    found = []
    for match in _DECIMAL.finditer(text):
        if match.group(1) is not None:
            if 0 <= float(match.group(1).replace(",", ".")) <= 1:  # 0,42 is a decimal comma
                found.append(match.group(1))
        elif 0 <= float(match.group(2)) <= 100:
            found.append(match.group(0))
    return found


def _listed(name: str, problems: list[str]) -> str:
    """One problem on one line; several as a list, one per line."""
    if len(problems) == 1:
        return f"{name}: {problems[0]}"
    return f"{name} needs {len(problems)} fixes:\n" + "\n".join(f"- {p}" for p in problems)


def _judge_analysis(name: str, data: bytes) -> str:
    text = _text(name, data)
    lines = [line for line in _FENCED.sub("", text).split("\n") if line.strip() and not _NOT_A_LINE.match(line)]
    problems = []
    low, high = ANALYSIS_LINES
    if not low <= len(lines) <= high:
        problems.append(f"it has {len(lines)} line(s) of text (blank lines, headings, tables and images not counted); "
                        f"the handout asks for {low}-{high} "
                        "lines: one line per observation, no hard line-wrapping inside a sentence.")
    if not _QUOTED.search(text):
        problems.append("no token is named in quotes: name the tokens you discuss, e.g. 'sat' attends to 'cat'.")
    if not _weights_quoted(text):
        problems.append("no attention weight is quoted: give at least one number from your heatmap between 0 and 1, "
                        "e.g. 'sat' attends to 'cat' with weight 0.42.")
    if not (_WHERE.search(text) or _ARBITRARY.search(text)):
        problems.append("say which layer/head you looked at (e.g. 'head 3 of layer 5'), or, for your own untrained "
                        "SelfAttention, that random weights make the pattern arbitrary (handout §5).")
    if problems:
        raise _Problem(_listed(name, problems))
    return f"{name}: {len(lines)} lines, tokens and weights quoted."


def check_analysis(root: str) -> Check:
    title = "Sentence analysis (analysis.md, 4-5 lines)"
    return _judged("analysis", title, root, ANALYSIS_NAMES, "Write 4-5 lines about one sentence's heatmap in analysis.md "
                   "(handout §5).", MAX_TEXT_BYTES, _judge_analysis)


# --------------------------------------------------------------------------- diagram


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


def _judge_svg(name: str, data: bytes) -> str:
    # No defusedxml here, so no entity may be declared at all: an ENTITY or an internal DTD subset
    # is refused before parsing. A plain <!DOCTYPE svg PUBLIC ...> line (matplotlib and many editors
    # write one) is harmless: expat never fetches the external DTD.
    if _declares_entities(data):
        raise _Problem(f"{name} declares XML entities (a DOCTYPE with [...] or <!ENTITY>), which the checker does "
                       "not process. Export the SVG again as plain SVG, or save a PNG.")
    if data.count(b"<") > MAX_SVG_TAGS:  # parsing that many (nested) elements takes seconds and ~0.5 GB
        raise _Problem(f"{name} has more than {MAX_SVG_TAGS:,} elements, far more than a diagram of the block "
                       "needs. Simplify the drawing, or save it as a PNG.")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as error:
        raise _Problem(f"{name} is not valid SVG/XML ({error}). Export it again, or save a PNG instead.") from None
    if root.tag.rsplit("}", 1)[-1].lower() != "svg":
        raise _Problem(f"{name} is XML but not SVG (its root is <{root.tag}>). Export an SVG or a PNG.")
    drawn = sum(1 for element in root.iter() if isinstance(element.tag, str)
                and element.tag.rsplit("}", 1)[-1].lower() in _SVG_DRAWING)
    if drawn < 2:
        raise _Problem(f"{name} looks blank: {drawn} drawing element(s). Draw the block: attention, add & norm, "
                       "feed-forward, with the shapes.")
    return f"{name}: an SVG with {drawn} drawing elements."


_PDF_STREAM = re.compile(rb"stream\r?\n")
_PDF_MARKS = re.compile(rb"(?<=\s)(re|l|c|v|y|Tj|TJ|Do|sh|BI)(?=\s)")


def _pdf_marks(data: bytes) -> int:
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


def _judge_pdf(name: str, data: bytes) -> str:
    if not data[:1024].lstrip().startswith(b"%PDF-"):
        raise _Problem(f"{name} is not a PDF: it is {_sniff(data)}. Export the diagram as PDF or PNG.")
    if b"%%EOF" not in data[-2048:]:
        raise _Problem(f"{name} is cut short (no %%EOF at the end). Export the PDF again.")
    marks = _pdf_marks(data)
    scanned = re.search(rb"/Subtype\s*/Image", data) is not None  # a scan or photo placed on the page
    if (marks < 4 and not scanned) or len(data) < 1500:
        raise _Problem(f"{name} looks blank ({len(data)} bytes, {marks} drawing operations). Draw the block: attention, "
                       "add & norm, feed-forward, with the shapes.")
    what = "an embedded image" if scanned and marks < 4 else f"{marks} drawing operations"
    return f"{name}: a PDF with {what} (structure checked; not rendered)."


def _judge_raster_diagram(name: str, data: bytes) -> str:
    image = _decode_image(name, data, ("PNG", "JPEG"), load=False)
    width, height = image.size
    if min(width, height) < MIN_DIAGRAM_SIDE:
        raise _Problem(f"{name} is {width}x{height} pixels, too small to read; save it at least "
                       f"{MIN_DIAGRAM_SIDE} pixels on each side.")
    if data.startswith(b"\x89PNG") and _drawn_in_the_top_quarter(data, image.size, DIAGRAM_COLOURS, DIAGRAM_INK):
        return f"{name}: a {width}x{height} PNG image."
    ink, colours = _pixel_stats(_load_pixels(name, data, ("PNG", "JPEG"), image))
    if colours < DIAGRAM_COLOURS or ink < DIAGRAM_INK:
        raise _Problem(f"{name} looks blank (almost all one colour). Draw the block: attention, add & norm, "
                       "feed-forward, with the shapes; a clear photo of a paper drawing is fine.")
    kind = "PNG" if data.startswith(b"\x89PNG") else "JPEG"
    return f"{name}: a {width}x{height} {kind} image."


def _judge_diagram(name: str, data: bytes) -> str:
    ext = name.rsplit(".", 1)[-1].lower()
    if ext == "svg":
        return _judge_svg(name, data)
    if ext == "pdf":
        return _judge_pdf(name, data)
    return _judge_raster_diagram(name, data)


def check_diagram(root: str) -> Check:
    title = "Transformer block diagram (transformer_block.png/.jpg/.svg/.pdf)"
    return _judged("diagram", title, root, DIAGRAM_NAMES, "Draw the Transformer block (attention, add & norm, "
                   "feed-forward, with the shapes: handout §12) and save it as transformer_block.png "
                   "(a photo of a paper drawing is fine as .jpg).", MAX_IMAGE_BYTES, _judge_diagram)


# --------------------------------------------------------------------------- README


_CODE = re.compile(r"^\s*(```|~~~).*?(^\s*\1[^\n]*$|\Z)|`[^`\n]*`|<!--.*?-->", re.DOTALL | re.MULTILINE)
_TERMS = {
    "Query": re.compile(r"\b(quer(y|ies)|Q)\b", re.IGNORECASE),
    "Key": re.compile(r"\b(keys?|K)\b", re.IGNORECASE),
    "Value": re.compile(r"\b(values?|V)\b", re.IGNORECASE),
}
_SINGLE_LETTER = {"Query": "Q", "Key": "K", "Value": "V"}
_ANY_TERM = re.compile(r"\b(quer(y|ies)|keys?|values?|[QKV])\b", re.IGNORECASE)


def _prose(text: str) -> str:
    """The README without code blocks, inline code and HTML comments: code is not prose."""
    # An "<!--" after the last "-->" starts no comment; left as it is, each would make the pattern
    # scan to the end of the text for a "-->" (quadratic in a text of many of them).
    last = text.rfind("-->")
    text = text[:last + 1] + text[last + 1:].replace("<!--", "<! --") if last >= 0 else text.replace("<!--", "<! --")
    return _CODE.sub(" ", text)


_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s+(.*)$", re.MULTILINE)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n|\n\s*[-*+]\s|\n\s*\d+[.)]\s", text) if s.strip()]


def _names(term: str, text: str) -> bool:
    return any(len(m.group(0)) > 1 or m.group(0) == _SINGLE_LETTER[term] for m in _TERMS[term].finditer(text))


def _explained_terms(prose: str) -> set[str]:
    """The terms among Query, Key and Value that the README explains.

    A body sentence explains a term when it names it and has at least four other words
    ("Value: what a token hands over" does, "Value: TODO" does not). A heading is not a sentence,
    but a heading naming one term ("## Value") lends it to the first paragraph under it when that
    paragraph has four words or more. A title naming all three explains none of them by itself.
    """
    explained = set()
    parts = _HEADING_LINE.split(prose)  # [body, heading, body, heading, body, ...]
    for n in range(0, len(parts), 2):
        body = parts[n]
        heading = parts[n - 1] if n else ""
        in_heading = [term for term in _TERMS if _names(term, heading)]
        first_paragraph = next((p for p in re.split(r"\n\s*\n", body) if p.strip()), "")
        body_words = [w for w in re.findall(r"[^\W_]+", first_paragraph) if not _ANY_TERM.fullmatch(w)]
        if len(in_heading) == 1 and len(body_words) >= 4:
            explained.add(in_heading[0])
        for sentence in _sentences(body):
            others = [w for w in re.findall(r"[^\W_]+", sentence) if not _ANY_TERM.fullmatch(w)]
            if len(others) >= 4:
                explained |= {term for term in _TERMS if _names(term, sentence)}
    return explained


def _words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) for the copy check: NFKC, case-folded, letters/digits, two characters or more."""
    return [(m.group(0).casefold(), m.start(), m.end()) for m in re.finditer(r"[^\W_]{2,}", text)]


def _fingerprint(words: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=_HASH_BYTES).digest(), "big")


def handout_fingerprints(handout: str) -> list[int]:
    """Sorted fingerprints of the handout's word n-grams, leaving out n-grams that lie wholly inside
    double quotes: those are the handout's example sentences ("The animal didn't cross the street
    because it was too tired"), which a student may quote."""
    text = unicodedata.normalize("NFKC", handout)
    quoted = [m.span() for m in re.finditer(r"“[^”]{1,400}”|\"[^\"\n]{1,400}\"", text)]
    words = _words(text)

    def in_quotes(start: int, end: int) -> bool:
        return any(a <= start and end <= b for a, b in quoted)

    prints = set()
    for i in range(len(words) - NGRAM + 1):
        gram = words[i:i + NGRAM]
        if not in_quotes(gram[0][1], gram[-1][2]):
            prints.add(_fingerprint([w for w, _, _ in gram]))
    return sorted(prints)


def text_fingerprints(text: str) -> list[int]:
    """Sorted fingerprints of every word n-gram of `text`."""
    words = [w for w, _, _ in _words(unicodedata.normalize("NFKC", text))]
    return sorted({_fingerprint(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)})


def _default_assignment_readme() -> Path:
    return Path(__file__).resolve().parent.parent / "assignments" / "day13" / "README.md"


def write_fingerprints(handout_path: Path, out: Path = FINGERPRINTS, assignment_readme: Path | None = None) -> int:
    """Write `out`: the handout's n-grams (the copy check) and the assignment README's (the README a
    student finds in the folder, which is not their own). Returns the number of handout fingerprints."""
    handout = Path(handout_path).read_text(encoding="utf-8")
    readme_path = Path(assignment_readme) if assignment_readme else _default_assignment_readme()
    readme = readme_path.read_text(encoding="utf-8") if readme_path.is_file() else ""
    sections = {"handout": handout_fingerprints(handout), "assignment-readme": text_fingerprints(readme)}
    lines = [f"# Fingerprints (blake2b-{_HASH_BYTES * 8} of word {NGRAM}-grams) for the README checks of grader/deliverables.py.",
             f"# Made by `python grader/deliverables.py --build-fingerprints {Path(handout_path).name}`; do not edit by hand.",
             f"# handout-sha256={hashlib.sha256(handout.encode()).hexdigest()[:16]}"]
    for section, prints in sections.items():
        blob = base64.b64encode(b"".join(p.to_bytes(_HASH_BYTES, "big") for p in prints)).decode()
        lines.append(f"@{section} count={len(prints)}")
        lines += [blob[i:i + 76] for i in range(0, len(blob), 76)]
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(sections["handout"])


def load_fingerprints(path: Path = FINGERPRINTS, section: str = "handout") -> set[int] | None:
    """One section of the shipped fingerprints, or None when the file is not there (that check is
    then skipped, and the message says so)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    # Parsed once per version of the file, not twice per README checked (~1 ms each).
    prints = _parse_fingerprints(os.fspath(path), section, st.st_mtime_ns, st.st_size)
    return None if prints is None else set(prints)


@functools.lru_cache(maxsize=8)
def _parse_fingerprints(path: str, section: str, mtime_ns: int, size: int) -> frozenset[int] | None:
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
    return frozenset(int.from_bytes(raw[i:i + _HASH_BYTES], "big") for i in range(0, len(raw), _HASH_BYTES))


def _matched_runs(words: list[tuple[str, int, int]], prints: set[int]) -> list[tuple[int, int]]:
    """(first word, last word) of each stretch of `words` covered by n-grams found in `prints`."""
    runs: list[tuple[int, int]] = []
    for i in range(len(words) - NGRAM + 1):
        if _fingerprint([w for w, _, _ in words[i:i + NGRAM]]) in prints:
            if runs and i <= runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], i + NGRAM - 1)
            else:
                runs.append((i, i + NGRAM - 1))
    return runs


def copied_passages(text: str, prints: set[int]) -> list[str]:
    """Passages of `text` (the student's own words, longest first) that repeat the handout for
    MIN_COPIED_WORDS words or more."""
    text = unicodedata.normalize("NFKC", text)
    words = _words(text)
    passages = [" ".join(text[words[a][1]:words[b][2]].split()) for a, b in _matched_runs(words, prints)
                if b - a + 1 >= MIN_COPIED_WORDS]
    return sorted(passages, key=len, reverse=True)


def _without_assignment_readme(text: str, prints: set[int] | None) -> tuple[str, int]:
    """`text` minus the passages it shares with the assignment's own README (the instructions a
    student finds in the folder), and how many words were removed. A student who kept the
    instructions and added their own explanation is judged on their explanation alone."""
    if not prints:
        return text, 0
    text = unicodedata.normalize("NFKC", text)
    words = _words(text)
    kept, last, removed = [], 0, 0
    for a, b in _matched_runs(words, prints):
        kept.append(text[last:words[a][1]])
        kept.append("\n\n")  # a removed passage also ends the sentence before it
        last = words[b][2]
        removed += b - a + 1
    kept.append(text[last:])
    return "".join(kept), removed


def _judge_readme(name: str, data: bytes) -> str:
    text, kept_instructions = _without_assignment_readme(_text(name, data), load_fingerprints(section="assignment-readme"))
    prose = _prose(text)
    problems = []
    n_words = len([w for w in prose.split() if re.search(r"[^\W_]", w)])
    if kept_instructions and n_words < MIN_README_WORDS // 3:
        raise _Problem(f"{name} is still the assignment's README (the instructions). Replace it with your own: "
                       "Query, Key and Value explained in your own words, about 80 words or more.")
    explained = _explained_terms(prose)
    unexplained = [term for term in _TERMS if term not in explained]
    if unexplained:
        listed = ", ".join(unexplained[:-1]) + (" and " if len(unexplained) > 1 else "") + unexplained[-1]
        problems.append(f"{listed} {'is' if len(unexplained) == 1 else 'are'} not explained: for each "
                        "of Query, Key and Value write a sentence or two, in your own words, on what it is for "
                        "(what a token looks for, what it offers to be matched, what it passes on).")
    if n_words < MIN_README_WORDS:
        problems.append(f"it has {n_words} words of prose (code blocks not counted); write at least about 80.")
    prints = load_fingerprints()
    copied = copied_passages(prose, prints) if prints else []
    if copied:
        shown = copied[0] if len(copied[0]) <= 240 else copied[0][:240] + "…"
        more = f" (and {len(copied) - 1} more passage(s))" if len(copied) > 1 else ""
        problems.append(f"it repeats the handout word for word: \"{shown}\"{more}. Explain Q, K and V in your own "
                        "words; quoting the handout's example sentences is fine.")
    kept = (f" ({kept_instructions} words of the assignment's own README, the instructions, were left out: "
            "only your own text counts)") if kept_instructions else ""
    if problems:
        raise _Problem(_listed(name, problems) + kept)
    note = "" if prints is not None else " (copy check skipped: handout_ngrams.txt is not next to the checker)"
    return f"{name}: Query, Key and Value explained in {n_words} words of your own{kept}{note}."


def check_readme(root: str) -> Check:
    title = "README: Query, Key and Value in your own words"
    return _judged("readme", title, root, README_NAMES, "Write README.md explaining Query, Key and Value in your own "
                   "words (about 80 words or more).", MAX_TEXT_BYTES, _judge_readme)


# --------------------------------------------------------------------------- entry points

# (rubric id, check); the ids are stable: grader/day13/rubric.toml scores `deliverables.<id>`.
CHECKS = (("heatmap_png", check_heatmap), ("heatmap_weights", check_weights), ("analysis", check_analysis),
          ("diagram", check_diagram), ("readme", check_readme))
CHECK_IDS = tuple(check_id for check_id, _ in CHECKS)


def run_checks(directory) -> list[Check]:
    """Every deliverable check on one submission folder, in a fixed order. Never raises."""
    try:
        root = os.path.realpath(os.fspath(directory))
        if not os.path.isdir(root):
            raise _Problem(f"{directory} is not a folder. Point the checker at the folder that holds your files.")
    except (_Problem, OSError, TypeError, ValueError) as problem:
        return [Check(check_id, False, str(problem), check_id) for check_id in CHECK_IDS]
    results = []
    for check_id, check in CHECKS:
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


def main(*, submission) -> int:
    """Print a checklist for one submission folder. Exit code 0 when every check passes, else 1."""
    ok, bad = _symbols()
    if not os.path.isdir(submission):
        hint = " Unzip it first and point the checker at the folder." if str(submission).lower().endswith(".zip") else ""
        print(f"{bad} {submission} is not a folder.{hint}")
        return 1
    results = run_checks(submission)
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


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the Day 13 deliverables of a submission folder.")
    parser.add_argument("submission", nargs="?", default=".", help="the folder to check (default: here)")
    parser.add_argument("--build-fingerprints", metavar="HANDOUT", help="rewrite handout_ngrams.txt from the handout")
    parser.add_argument("--assignment-readme", metavar="README", default=None,
                        help="with --build-fingerprints: the student folder's README (default: assignments/day13/README.md)")
    args = parser.parse_args(argv)
    if args.build_fingerprints:
        count = write_fingerprints(Path(args.build_fingerprints), assignment_readme=args.assignment_readme)
        print(f"wrote {FINGERPRINTS} ({count} fingerprints)")
        return 0
    return main(submission=args.submission)


if __name__ == "__main__":
    sys.exit(_cli())
