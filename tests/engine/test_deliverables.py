"""grader/judging/deliverables.py, the lesson-free checker: safe reading, the image, array, text, drawing and
fingerprint helpers, and the runner and its command line, on a toy lesson's checks defined here.
A lesson's own checks are tested with that lesson (tests/<lesson>/). Pure file checks, no torch."""
from __future__ import annotations

import ast
import io
import os
import pickle
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from grader.judging import deliverables
from grader.judging.deliverables import Check, Problem, run_checks

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- a toy lesson's checks


def _judge_notes(name: str, data: bytes) -> str:
    lines = deliverables.text_lines(deliverables.decode_text(name, data))
    if len(lines) < 2:
        raise Problem(deliverables.listed(name, [f"it has {len(lines)} line(s); write two or more."]))
    return f"{name}: {len(lines)} lines."


def check_notes(root: str) -> Check:
    return deliverables.judged("notes", "Notes", root, ("NOTES.md", "notes.txt"), "Write NOTES.md.",
                               deliverables.MAX_TEXT_BYTES, _judge_notes)


def _judge_picture(name: str, data: bytes) -> str:
    image = deliverables.decode_image(name, data, ("PNG",))
    ink, colours = deliverables.pixel_stats(image)
    if colours < 2 or ink < 0.001:
        raise Problem(f"{name} looks blank.")
    return f"{name}: a {image.size[0]}x{image.size[1]} PNG."


def check_picture(root: str) -> Check:
    return deliverables.judged("picture", "Picture", root, ("picture.png",), "Draw picture.png.",
                               deliverables.MAX_IMAGE_BYTES, _judge_picture)


TOY = (("notes", check_notes), ("picture", check_picture))


def png_bytes(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def drawing(size=(800, 600), box=(50, 40, 750, 580), width=3) -> Image.Image:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).rectangle(box, outline="black", width=width)
    return image


def colour_field(size=(640, 480), cells=6) -> Image.Image:
    """A heatmap-like picture: a grid of cells, each its own colour, over the whole area."""
    y, x = np.mgrid[0:size[1], 0:size[0]]
    row, col = y * cells // size[1], x * cells // size[0]
    pixels = np.stack([col * 255 // cells, row * 255 // cells, (row + col) * 255 // (2 * cells)], axis=-1)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


@pytest.fixture
def sub(tmp_path) -> Path:
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "NOTES.md").write_text("# Notes\n\nFirst line.\nSecond line.\n", encoding="utf-8")
    (folder / "picture.png").write_bytes(png_bytes(drawing()))
    return folder


def by_id(results) -> dict[str, Check]:
    return {r.id: r for r in results}


# --------------------------------------------------------------------------- the runner


def test_the_checks_run_in_their_order_and_pass_on_good_files(sub):
    results = run_checks(sub, TOY)
    assert [r.id for r in results] == ["notes", "picture"]
    assert all(r.passed for r in results), results
    assert results[0].message == "NOTES.md: 2 lines." and results[0].title == "Notes"


def test_a_check_that_crashes_or_runs_out_of_memory_fails_alone_with_a_message(sub):
    def crashes(root):
        raise ValueError("boom")

    def needs_memory(root):
        raise MemoryError

    results = by_id(run_checks(sub, (("crash", crashes), ("memory", needs_memory), *TOY)))
    assert not results["crash"].passed and "checker bug" in results["crash"].message
    assert "ValueError: boom" in results["crash"].message
    assert not results["memory"].passed and "more memory" in results["memory"].message
    assert results["notes"].passed and results["picture"].passed


def test_a_missing_folder_fails_every_check_with_a_message(tmp_path):
    results = run_checks(tmp_path / "nope", TOY)
    assert [r.id for r in results] == ["notes", "picture"] and not any(r.passed for r in results)
    assert "not a folder" in results[0].message


def test_a_missing_file_is_named_with_its_other_accepted_names_and_found_one_folder_down(sub):
    (sub / "NOTES.md").rename(sub / "notes.txt")
    assert check_notes(os.fspath(sub)).passed  # any accepted name
    (sub / "docs").mkdir()
    (sub / "notes.txt").rename(sub / "docs" / "Notes.TXT")
    result = check_notes(os.fspath(sub))
    assert not result.passed
    assert result.message.startswith("Missing: no NOTES.md (or .txt) at the top level of the folder.")
    assert "Found docs/Notes.TXT: move it to the top level" in result.message and "Write NOTES.md." in result.message


def test_names_match_ignoring_case(sub):
    (sub / "NOTES.md").rename(sub / "notes.MD")
    (sub / "picture.png").rename(sub / "Picture.PNG")
    assert all(r.passed for r in run_checks(sub, TOY))


def test_a_broken_extra_candidate_costs_nothing(sub):
    (sub / "notes.txt").write_bytes(b"\x00\x01 binary")
    assert check_notes(os.fspath(sub)).passed


# --------------------------------------------------------------------------- reading files safely


def test_a_symlink_out_of_the_folder_is_not_followed_and_one_inside_is(sub, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("secret\nlines\n", encoding="utf-8")
    (sub / "NOTES.md").unlink()
    (sub / "NOTES.md").symlink_to(outside)
    result = check_notes(os.fspath(sub))
    assert not result.passed and "outside the submission folder" in result.message
    (sub / "NOTES.md").unlink()
    (sub / "drafts").mkdir()
    (sub / "drafts" / "n.md").write_text("one\ntwo\n", encoding="utf-8")
    (sub / "NOTES.md").symlink_to(Path("drafts") / "n.md")
    assert check_notes(os.fspath(sub)).passed


def test_a_huge_file_is_refused_without_being_read(sub, monkeypatch):
    reads = []
    real_read = os.read

    def spy(fd, n):
        reads.append(os.fstat(fd).st_ino)
        return real_read(fd, n)

    monkeypatch.setattr(deliverables.os, "read", spy)
    assert check_notes(os.fspath(sub)).passed and (sub / "NOTES.md").stat().st_ino in reads  # the spy sees reads
    huge = sub / "picture.png"
    huge.unlink()
    with open(huge, "wb") as f:
        f.truncate(4 * 2**30)  # sparse: 4 GB on paper, nothing on disk
    result = check_picture(os.fspath(sub))
    assert not result.passed and "the limit is 20 MB" in result.message
    assert huge.stat().st_ino not in reads


def test_a_fifo_or_a_folder_under_an_accepted_name_neither_blocks_nor_crashes(sub):
    (sub / "NOTES.md").unlink()
    os.mkfifo(sub / "NOTES.md")
    (sub / "picture.png").unlink()
    (sub / "picture.png").mkdir()
    results = by_id(run_checks(sub, TOY))
    assert "not a regular file" in results["notes"].message
    assert "not a regular file" in results["picture"].message


def test_an_empty_file_is_named_as_such(sub):
    (sub / "NOTES.md").write_bytes(b"")
    assert "is empty (0 bytes)" in check_notes(os.fspath(sub)).message


@pytest.mark.parametrize("data, kind", [
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "a PNG image"), (b"%PDF-1.4", "a PDF document"),
    (b"PK\x03\x04rest", "a zip archive"), (pickle.dumps([1, 2]), "a Python pickle"),
    (b"<svg xmlns='x'/>", "an SVG/XML file"), ("caf\u00e9 " * 600, "a text file"), (b"\x00\x01\x02", "binary"),
])
def test_sniff_says_what_a_file_really_is(data, kind):
    data = data.encode("utf-8") if isinstance(data, str) else data
    assert kind in deliverables.sniff(data)


# --------------------------------------------------------------------------- images


def test_an_image_with_a_huge_declared_size_is_refused_from_its_header():
    data = png_bytes(Image.new("1", (9000, 9000)))  # 81 megapixels of a 1-bit image: a few kB as PNG
    with pytest.raises(Problem, match="megapixels"):
        deliverables.decode_image("big.png", data, ("PNG",))


@pytest.mark.parametrize("keep", [0.3, 0.9])
def test_a_damaged_image_is_a_problem_that_says_so(keep):
    data = png_bytes(colour_field())
    with pytest.raises(Problem, match="damaged or cut short"):
        deliverables.decode_image("p.png", data[: int(len(data) * keep)], ("PNG",))
    with pytest.raises(Problem, match="it is a text file, not PNG"):
        deliverables.decode_image("p.png", b"my picture is in the notebook\n", ("PNG",))


def transparent_canvas(size=(800, 600), seed=0) -> Image.Image:
    """Fully transparent, with random colours under the zero alpha (what a viewer never shows)."""
    noise = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 4), dtype=np.uint8)
    noise[..., 3] = 0
    return Image.fromarray(noise, "RGBA")


@pytest.mark.parametrize("size", [(300, 300), (750, 950), (1600, 1200)])
def test_pixel_statistics_of_a_translucent_picture_equal_those_of_it_composited_on_white(size):
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 4), dtype=np.uint8)
    pixels[..., 3] = np.linspace(0, 255, size[0], dtype=np.uint8)  # alpha from clear to opaque
    pixels[: size[1] // 3] = (255, 255, 255, 0)  # a clear band: white once composited
    image = Image.fromarray(pixels, "RGBA")
    on_white = Image.alpha_composite(Image.new("RGBA", size, "white"), image).convert("RGB")
    ink, colours = deliverables.pixel_stats(image)
    ink_white, colours_white = deliverables.pixel_stats(on_white)
    # Averaging and compositing commute exactly; only integer rounding may differ (by one level).
    assert abs(ink - ink_white) < 2e-3 and abs(colours - colours_white) <= max(2, colours_white // 50)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "PA"])
def test_a_picture_with_an_alpha_channel_becomes_what_compositing_it_on_white_gives(mode):
    """to_rgb takes a shortcut for an opaque picture (most of a similarity fingerprint's time): it must give
    the pixels compositing gives, on every 8-bit colour; a picture with one clear pixel is still composited."""
    every = np.arange(1 << 24, dtype=np.uint32)  # each 8-bit colour once
    rgb = np.stack([(every >> 16) & 255, (every >> 8) & 255, every & 255], axis=1).astype(np.uint8)
    pixels = np.concatenate([rgb, np.full((1 << 24, 1), 255, np.uint8)], axis=1).reshape(4096, 4096, 4)
    opaque = Image.fromarray(pixels, "RGBA")
    if mode == "LA":
        opaque = opaque.convert("LA")
    elif mode == "PA":
        opaque = Image.fromarray(pixels[:64, :64], "RGBA").convert("PA")  # a palette holds 256 colours

    def on_white(image):
        return Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA")).convert("RGB")

    assert np.array_equal(np.asarray(deliverables.to_rgb(opaque)), np.asarray(on_white(opaque)))
    cleared = opaque.copy()
    cleared.putpixel((1, 0), (0, 0) if mode != "RGBA" else (0, 0, 0, 0))
    shown = np.asarray(deliverables.to_rgb(cleared))
    assert tuple(shown[0, 1]) == (255, 255, 255) and np.array_equal(shown, np.asarray(on_white(cleared)))


def test_the_colours_under_a_transparent_background_do_not_count():
    ink, _ = deliverables.pixel_stats(transparent_canvas())
    assert ink == 0


def sample_pictures() -> dict[str, Image.Image]:
    """Pictures near and far from the blank thresholds, content at the top, at the bottom or nowhere."""
    rng = np.random.default_rng(7)
    pictures = {"colour field": colour_field(),
                "line drawing": drawing(box=(50, 20, 750, 580), width=2),
                "blank": Image.new("RGB", (800, 600), "white"),
                "faint noise": Image.fromarray((250 + rng.integers(0, 6, (600, 800, 3))).astype(np.uint8)),
                "transparent": transparent_canvas()}
    for where, box in (("top", (50, 20, 750, 120)), ("bottom", (50, 480, 750, 580))):
        for width in (1, 3, 40):
            pictures[f"{where} frame {width}px"] = drawing(box=box, width=width)
    grey = Image.new("RGB", (800, 600), (128, 128, 128))  # two colours only 40 apart: no ink at all
    ImageDraw.Draw(grey).rectangle((480, 0, 799, 599), fill=(168, 168, 168))
    pictures["close greys"] = grey
    halves = Image.new("RGB", (800, 600), "white")  # exactly two colours: ink, but too few for a heatmap
    ImageDraw.Draw(halves).rectangle((0, 0, 399, 599), fill="black")
    pictures["black and white halves"] = halves
    colours = Image.new("RGBA", (640, 640), (255, 255, 255, 0))
    for i in range(8):
        ImageDraw.Draw(colours).rectangle((80 * i, 0, 80 * i + 79, 639), fill=(30 * i, 255 - 30 * i, 128, 255))
    pictures["colour stripes on transparent"] = colours
    return pictures


@pytest.mark.parametrize("colours, ink, usual", [(3, 0.02, "colour field"), (2, 0.0005, "line drawing")])
def test_the_top_quarter_shortcut_never_passes_a_picture_the_whole_picture_would_fail(colours, ink, usual):
    proven = []
    for label, picture in sample_pictures().items():
        data = png_bytes(picture)
        if deliverables.drawn_in_the_top_quarter(data, picture.size, colours, ink):
            whole_ink, whole_colours = deliverables.pixel_stats(Image.open(io.BytesIO(data)))
            assert whole_colours >= colours and whole_ink >= ink, label
            proven.append(label)
    assert usual in proven  # the usual case takes the shortcut
    assert not {"blank", "faint noise", "transparent", "close greys"} & set(proven)


def test_the_shortcut_reads_only_plain_pngs_whose_header_it_trusts():
    data = bytearray(png_bytes(colour_field()))
    size = Image.open(io.BytesIO(bytes(data))).size
    assert deliverables.png_rows(bytes(data), size, 10) is not None
    assert deliverables.png_rows(bytes(data), (size[0] * 1000, size[1]), 10) is None  # disagrees with the header
    data[28] = 1  # IHDR's interlace byte (Pillow cannot write an interlaced PNG), with its CRC redone
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    assert deliverables.png_rows(bytes(data), size, 10) is None
    palette = png_bytes(colour_field().convert("P"))
    assert deliverables.png_rows(palette, size, 10) is None


# --------------------------------------------------------------------------- arrays


class _Payload:
    """Unpickling this opens (creates) a file: proof that nothing here unpickles."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def test_an_object_array_is_seen_from_its_header_and_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"
    array = np.empty((4, 4), dtype=object)
    array[...] = 0.25
    array[0, 0] = _Payload(str(marker))
    shape, dtype, _ = deliverables.npy_header("w.npy", npy(array))
    assert shape == (4, 4) and not deliverables.plain_numbers(dtype)
    assert not marker.exists()


def test_a_header_promising_more_data_than_the_file_holds_is_refused_before_loading():
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"
    header = header + " " * (118 - len(header)) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\x00" * 64
    shape, dtype, offset = deliverables.npy_header("w.npy", data)
    assert shape == (100000, 100000) and deliverables.plain_numbers(dtype)
    with pytest.raises(Problem, match="cut short or padded"):
        deliverables.npy_load("w.npy", data, shape, dtype, offset)


def test_a_plain_array_loads_and_a_damaged_header_is_a_problem():
    data = npy(np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(deliverables.npy_load("w.npy", data, *deliverables.npy_header("w.npy", data)),
                                  np.eye(3))
    with pytest.raises(Problem, match="damaged .npy header"):
        deliverables.npy_header("w.npy", b"\x93NUMPY\x01\x00\xff\xff{")


# --------------------------------------------------------------------------- text


def test_text_is_decoded_whatever_the_encoding_and_line_endings():
    assert deliverables.decode_text("a.md", "caf\u00e9\r\nline\r\n".encode("cp1252")) == "caf\u00e9\nline\n"
    assert deliverables.decode_text("a.md", "\ufeffhello\rworld".encode("utf-8")) == "hello\nworld"
    assert deliverables.decode_text("a.md", "a\n \n\n\t\n\n\nb".encode()) == "a\n\nb"  # blank runs reduced
    with pytest.raises(Problem, match="not a text file"):
        deliverables.decode_text("a.md", b"PK\x03\x04\x00\x00")


def test_text_lines_leave_out_layout_and_code():
    text = ("# Title\n\n| a | b |\n|---|---|\n![pic](p.png)\n<!-- note -->\n---\nOne line.\n```\ncode\n```\n"
            "Two lines.\n")
    assert deliverables.text_lines(text) == ["One line.", "Two lines."]


def test_prose_drops_code_and_comments_and_an_unclosed_comment_is_no_comment():
    assert deliverables.prose("Words `code` more\n```\nblock\n```\n<!-- hidden -->end").split() == \
        ["Words", "more", "end"]
    assert "kept" in deliverables.prose("--> <!-- kept")
    assert deliverables.sentences("One. Two\n- three\n1. four\n\nfive") == ["One.", "Two", "three", "four", "five"]


# --------------------------------------------------------------------------- vector drawings


def test_an_svg_with_entities_is_refused_unexpanded():
    bomb = (b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
            b'<svg xmlns="http://www.w3.org/2000/svg"><text>&b;</text><rect width="5" height="5"/></svg>')
    with pytest.raises(Problem, match="entities"):
        deliverables.svg_drawing_elements("d.svg", bomb)


@pytest.mark.parametrize("data, words", [
    (b"<svg><rect></svg>", "not valid SVG"),
    (b"<html><body>diagram</body></html>", "not SVG"),
    (b"<svg>" + b"<g>" * (deliverables.MAX_SVG_TAGS + 1), "far more than a sketch needs"),
])
def test_broken_or_huge_svg_is_a_problem(data, words):
    with pytest.raises(Problem, match=words):
        deliverables.svg_drawing_elements("d.svg", data, drawing="a sketch")


def test_svg_drawing_elements_are_counted_with_or_without_a_namespace():
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><g><rect/><path d="M0 0"/></g><text>x</text></svg>'
    assert deliverables.svg_drawing_elements("d.svg", svg) == 3
    assert deliverables.svg_drawing_elements("d.svg", b"<svg><g/></svg>") == 0


def test_pdf_drawing_operators_are_counted_in_compressed_streams():
    content = zlib.compress(b"0 0 m 10 10 l S 5 5 20 20 re f BT (x) Tj ET\n")
    pdf = b"%PDF-1.4\n1 0 obj << /Filter /FlateDecode >>\nstream\n" + content + b"\nendstream\n%%EOF\n"
    assert deliverables.pdf_marks(pdf) == 3
    assert not deliverables.pdf_has_image(pdf) and deliverables.pdf_has_image(b"<< /Subtype /Image >>")


# --------------------------------------------------------------------------- fingerprints

SOURCE = ("Attention lets every token look at every other token and decide how much of each one it "
          "should borrow, weighting the borrowed information by a learned and normalised score. "
          "\"This quoted example sentence may be repeated by anyone without being copying at all.\"")


def test_a_long_shared_passage_is_found_and_a_short_one_is_not():
    prints = set(deliverables.handout_fingerprints(SOURCE))
    copied = deliverables.copied_passages("In my words: " + SOURCE.split(".")[0] + ". The end.", prints)
    assert copied and copied[0].startswith("Attention lets every token")
    assert deliverables.copied_passages("Attention lets every token look at every other token.", prints) == []
    quoted = "This quoted example sentence may be repeated by anyone without being copying at all."
    assert deliverables.copied_passages(quoted, prints) == []  # inside quotes in the source


def test_passages_of_the_instructions_are_removed_and_counted():
    prints = set(deliverables.text_fingerprints(SOURCE))
    kept, removed = deliverables.without_passages("Mine first. " + SOURCE + " Mine after.", prints)
    assert removed >= 30 and "Mine first." in kept and "Mine after." in kept and "borrow" not in kept
    assert deliverables.without_passages("anything", None) == ("anything", 0)


def test_fingerprints_are_written_and_read_back_by_section(tmp_path):
    handout, readme, out = tmp_path / "h.txt", tmp_path / "README.md", tmp_path / "prints.txt"
    handout.write_text(SOURCE, encoding="utf-8")
    readme.write_text("Follow the instructions in this folder and hand in every file on time please.\n",
                      encoding="utf-8")
    count = deliverables.write_fingerprints(handout, out, readme, made_by="make prints")
    assert count == len(deliverables.handout_fingerprints(SOURCE)) > 0
    assert "Made by `make prints`" in out.read_text(encoding="utf-8")
    assert deliverables.load_fingerprints(out) == set(deliverables.handout_fingerprints(SOURCE))
    assert deliverables.load_fingerprints(out, "assignment-readme") == \
        set(deliverables.text_fingerprints(readme.read_text(encoding="utf-8")))
    assert deliverables.load_fingerprints(tmp_path / "absent.txt") is None


# --------------------------------------------------------------------------- entry points


def test_main_prints_a_checklist_and_an_exit_code(sub, capsys):
    assert deliverables.main(submission=str(sub), checks=TOY) == 0
    assert capsys.readouterr().out.count("✓") == 2
    (sub / "NOTES.md").write_text("Too short.\n")
    assert deliverables.main(submission=str(sub), checks=TOY) == 1
    out = capsys.readouterr().out
    assert "✓ Picture" in out and "✗ Notes" in out and "1 line(s)" in out
    assert "1 of 2 deliverable check(s) to fix" in out


def test_main_on_a_zip_says_to_unzip(tmp_path, capsys):
    assert deliverables.main(submission=str(tmp_path / "alice.zip"), checks=TOY) == 1
    assert "Unzip it first" in capsys.readouterr().out


def test_the_checker_needs_only_the_standard_library_numpy_and_pillow():
    tree = ast.parse((ROOT / "grader" / "judging" / "deliverables.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) <= {"numpy", "PIL"}


TOY_CHECKS_FILE = textwrap.dedent('''
    import deliverables as kit

    def check_notes(root):
        return kit.judged("notes", "Notes", root, ("NOTES.md",), "Write NOTES.md.", kit.MAX_TEXT_BYTES,
                          lambda name, data: f"{name}: {len(kit.text_lines(kit.decode_text(name, data)))} lines.")

    CHECKS = (("notes", check_notes),)
''')


def test_a_copy_runs_alone_with_the_checks_beside_it(sub, tmp_path):
    """As the release ships it: the checker and a lesson's checks file in one folder, nothing else."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "deliverables.py").write_bytes((ROOT / "grader" / "judging" / "deliverables.py").read_bytes())
    run = [sys.executable, str(tools / "deliverables.py"), str(sub)]
    done = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "deliverable_checks.py is missing" in done.stderr
    (tools / deliverables.RELEASED_CHECKS).write_text(TOY_CHECKS_FILE, encoding="utf-8")
    done = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and "✓ Notes: NOTES.md: 2 lines." in done.stdout, done.stdout + done.stderr
    (sub / "NOTES.md").unlink()
    done = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1 and "Missing: no NOTES.md" in done.stdout, done.stdout + done.stderr
