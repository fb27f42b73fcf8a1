"""grader/day13/deliverable_checks.py, Day 13's deliverables as the checker judges them: every
rejection the heatmap, weights, analysis, diagram and README checks make, the reference set
accepted, the handout's fingerprints current, and no broken file ever crashes a check. The
checker's own machinery (safe reading, image and text helpers) is tested in
tests/engine/test_deliverables.py. Pure file checks, no torch."""
from __future__ import annotations

import ast
import base64
import io
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from grader.judging import deliverables
from grader.day13 import deliverable_checks as rules

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "day13"
ASSIGNMENT_README = ROOT / "assignments" / "day13" / "README.md"
DELIVERABLES = ("attention_heatmap.png", "attention_weights.npy", "analysis.md", "transformer_block.png", "README.md")
HANDOUT_CANDIDATES = (ROOT.parent / "shared" / "handout" / "day13-attention-transformers.txt",
                      Path("/work/shared/handout/day13-attention-transformers.txt"))

ANALYSIS_OK = """In head 3 of layer 5, the token 'it' attends most strongly to 'animal' (0.61).
'street' gets only 0.05 from 'it', so the model resolves the pronoun to the animal.
Most other tokens attend to their neighbours, e.g. 'cross' looks at 'didn't' with 0.33.
The [SEP] token soaks up the rest of the attention in most rows.
"""

README_OK = """# Query, Key and Value, as I understand them

Every token is turned into three vectors by three learned matrices, and each plays its own role.

The query of a token describes what that token is trying to find elsewhere in the sentence right now.

The key of a token is how it advertises itself, so queries can measure how well it fits their need;
the match is a dot product that gets scaled and pushed through a softmax over the row.

The value of a token is the information it actually hands over to anyone who attends to it,
and the output is the blend of all values weighted by that softmax row.
Separating keys from values means a token can be found for one reason and contribute another.
"""


def run_checks(folder) -> list[deliverables.Check]:
    return deliverables.run_checks(folder, rules.CHECKS)


def by_id(results):
    return {r.id: r for r in results}


def check(folder: Path, check_id: str):
    """One check alone (run_checks would decode every image each time)."""
    return dict(rules.CHECKS)[check_id](os.path.realpath(folder))


@pytest.fixture
def sub(tmp_path) -> Path:
    """A copy of the reference deliverables, to spoil one file at a time."""
    folder = tmp_path / "student"
    folder.mkdir()
    for name in DELIVERABLES:
        shutil.copy(REFERENCE / name, folder / name)
    return folder


def png_bytes(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def line_drawing(size=(1200, 1600)) -> Image.Image:
    """A sparse pen drawing on white paper: thin 1-pixel lines, like a scanned sketch."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for n in range(6):
        y = 100 + n * 240
        draw.rectangle((300, y, 900, y + 120), outline="black", width=1)
        draw.line((600, y + 120, 600, y + 240), fill="black", width=1)
    return image


# --------------------------------------------------------------------------- the reference set


def test_reference_set_passes_every_check():
    results = run_checks(REFERENCE)
    assert [r.id for r in results] == list(rules.CHECK_IDS)
    assert all(r.passed for r in results), [(r.id, r.message) for r in results if not r.passed]


def test_check_ids_are_the_rubric_entries_and_total_ten_points():
    rubric = tomllib.loads((ROOT / "grader" / "day13" / "rubric.toml").read_text(encoding="utf-8"))
    tables = rubric["deliverables"]
    assert set(tables) == set(rules.CHECK_IDS)
    assert sum(t["points"] for t in tables.values()) == 10


def test_reference_analysis_quotes_weights_that_are_in_the_matrix():
    weights = np.load(REFERENCE / "attention_weights.npy")
    quoted = re.findall(r"(?<![\w.])(\d*\.\d+)", (REFERENCE / "analysis.md").read_text(encoding="utf-8"))
    assert quoted
    for number in quoted:
        places = len(number.split(".")[1])
        assert (np.round(weights, places) == float(number)).any(), f"{number} is not in attention_weights.npy"


# --------------------------------------------------------------------------- heatmap


def test_blank_png_is_rejected(sub):
    (sub / "attention_heatmap.png").write_bytes(png_bytes(Image.new("RGB", (400, 400), (68, 1, 84))))
    result = check(sub, "heatmap_png")
    assert not result.passed and "blank" in result.message


def test_two_colour_png_has_no_spread_of_values(sub):
    image = Image.new("RGB", (400, 400), "white")
    ImageDraw.Draw(image).rectangle((0, 0, 199, 399), fill="black")
    (sub / "attention_heatmap.png").write_bytes(png_bytes(image))
    assert not check(sub, "heatmap_png").passed


def test_text_file_renamed_png_is_rejected(sub):
    (sub / "attention_heatmap.png").write_text("my heatmap is in the notebook\n")
    result = check(sub, "heatmap_png")
    assert not result.passed and "text file" in result.message


def test_jpeg_renamed_png_is_rejected(sub):
    image = Image.open(REFERENCE / "attention_heatmap.png").convert("RGB")
    (sub / "attention_heatmap.png").write_bytes(png_bytes(image, "JPEG"))
    result = check(sub, "heatmap_png")
    assert not result.passed and "JPEG" in result.message


@pytest.mark.parametrize("keep", [0.3, 0.9, -12])
def test_truncated_png_is_rejected(sub, keep):
    data = (REFERENCE / "attention_heatmap.png").read_bytes()
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep  # -12: only the IEND chunk is gone
    (sub / "attention_heatmap.png").write_bytes(data[:cut])
    result = check(sub, "heatmap_png")
    assert not result.passed and "could not be opened" in result.message


def test_empty_heatmap_is_rejected(sub):
    (sub / "attention_heatmap.png").write_bytes(b"")
    result = check(sub, "heatmap_png")
    assert not result.passed and "empty" in result.message


def test_small_heatmap_is_rejected(sub):
    image = Image.open(REFERENCE / "attention_heatmap.png").resize((250, 200))
    (sub / "attention_heatmap.png").write_bytes(png_bytes(image))
    result = check(sub, "heatmap_png")
    assert not result.passed and "300x300" in result.message


def test_transparent_and_greyscale_heatmaps_are_accepted(sub):
    image = Image.open(REFERENCE / "attention_heatmap.png").convert("RGBA")
    (sub / "attention_heatmap.png").write_bytes(png_bytes(image))
    assert check(sub, "heatmap_png").passed
    (sub / "attention_heatmap.png").write_bytes(png_bytes(image.convert("L")))
    assert check(sub, "heatmap_png").passed


# --------------------------------------------------------------------------- weights


def save_npy(folder: Path, array) -> None:
    np.save(folder / "attention_weights.npy", array, allow_pickle=True)


def softmax_rows(T: int, seed: int = 0) -> np.ndarray:
    scores = np.random.default_rng(seed).normal(size=(T, T))
    return np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)


def test_rows_not_summing_to_one_are_rejected(sub):
    weights = softmax_rows(6)
    weights[2] *= 1.01
    save_npy(sub, weights)
    result = check(sub, "heatmap_weights")
    assert not result.passed and "row 2 sums to 1.0100" in result.message


def test_rows_within_tolerance_and_a_batch_of_one_are_accepted(sub):
    weights = softmax_rows(5).astype(np.float32)
    weights[0] *= 1 + 5e-4
    save_npy(sub, weights[None])  # (1, T, T), straight from forward
    result = check(sub, "heatmap_weights")
    assert result.passed, result.message


class _Payload:
    """Unpickling this opens (creates) a file: proof that the checker never unpickles."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickle_inside_npy_is_rejected_without_unpickling(sub, tmp_path):
    marker = tmp_path / "unpickled"
    array = np.empty((4, 4), dtype=object)
    array[...] = 0.25
    array[0, 0] = _Payload(str(marker))
    save_npy(sub, array)
    result = check(sub, "heatmap_weights")
    assert not result.passed and "pickle" in result.message
    assert not marker.exists()


def test_torch_save_is_told_to_use_np_save(sub):
    (sub / "attention_weights.npy").write_bytes(b"PK\x03\x04" + b"\x00" * 100)  # torch.save writes a zip
    result = check(sub, "heatmap_weights")
    assert not result.passed and "torch.save" in result.message and "np.save" in result.message


def test_raw_pickle_named_npy_is_rejected(sub, tmp_path):
    marker = tmp_path / "unpickled"
    (sub / "attention_weights.npy").write_bytes(pickle.dumps(_Payload(str(marker))))
    result = check(sub, "heatmap_weights")
    assert not result.passed and "not a .npy file" in result.message and "pickle" in result.message
    assert not marker.exists()


def test_npy_header_claiming_a_huge_shape_is_refused_before_loading(sub):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"
    header = header + " " * (118 - len(header)) + "\n"
    (sub / "attention_weights.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
                                                + header.encode() + b"\x00" * 64)
    result = check(sub, "heatmap_weights")
    assert not result.passed and "(100000, 100000)" in result.message


@pytest.mark.parametrize("weights, words", [
    (np.full((4, 5), 0.2), "square"),
    (np.full((3, 3), 1 / 3), "at least 4"),
    (np.array([[1.2, -0.2, 0, 0]] * 4), "negative"),
    (np.full((4, 4), np.nan), "NaN"),
    (np.full((4, 4), 0.25) + np.eye(4) * 0.5, "sums to"),
])
def test_bad_weight_matrices_are_rejected(sub, weights, words):
    save_npy(sub, weights)
    result = check(sub, "heatmap_weights")
    assert not result.passed and words in result.message


def test_weights_are_optional_but_not_free(sub):
    (sub / "attention_weights.npy").unlink()
    assert check(sub, "heatmap_weights").passed
    (sub / "attention_heatmap.png").unlink()
    assert not check(sub, "heatmap_weights").passed


# --------------------------------------------------------------------------- analysis


def write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def test_analysis_in_the_handouts_style_is_accepted(sub):
    write(sub, "analysis.md", ANALYSIS_OK)
    assert check(sub, "analysis").passed


def test_one_line_analysis_is_rejected(sub):
    write(sub, "analysis.md", ANALYSIS_OK.replace("\n", " ") + "\n")
    result = check(sub, "analysis")
    assert not result.passed and "1 line(s) of text" in result.message


def test_analysis_without_a_weight_is_rejected(sub):
    text = re.sub(r"\s*\(0\.61\)|with 0\.33|0\.05 ", "", ANALYSIS_OK).replace("gets only", "gets little")
    write(sub, "analysis.md", text)
    result = check(sub, "analysis")
    assert not result.passed and "no attention weight" in result.message


def test_analysis_without_quoted_tokens_is_rejected(sub):
    write(sub, "analysis.md", ANALYSIS_OK.replace("'", ""))
    result = check(sub, "analysis")
    assert not result.passed and "in quotes" in result.message


def test_analysis_needs_a_head_or_the_untrained_note(sub):
    text = ("The token 'sat' attends most to 'cat' (0.44).\n'on' looks at 'the' with 0.31.\n"
            "'mat' spreads its attention evenly.\nThe first token keeps 0.52 on itself.\n")
    write(sub, "analysis.md", text)
    result = check(sub, "analysis")
    assert not result.passed and "untrained" in result.message
    write(sub, "analysis.md", text + "My SelfAttention is untrained, so this pattern is arbitrary.\n")
    assert check(sub, "analysis").passed


@pytest.mark.parametrize("marked", ["**{}**", "*{}*", "__{}__"])
def test_tokens_named_in_bold_or_italics_are_named(sub, marked):
    # The contract asks which token attends to which; a held-out analysis wrote the tokens in Markdown's bold, and
    # was told "no token is named in quotes".
    text = re.sub(r"'(\w+)'", lambda m: marked.format(m.group(1)), ANALYSIS_OK.replace("'didn't'", "'did'"))
    assert "'" not in text
    write(sub, "analysis.md", text)
    result = check(sub, "analysis")
    assert result.passed, result.message


def test_an_analysis_in_spanish_names_its_layer_and_head(sub):
    # Held out: "capa 1, cabeza 1" and "pesos sin entrenar" were read as saying neither.
    text = ("En «el gato se sentó», «sentó» atiende sobre todo a «gato» (0,44).\n"
            "«el» reparte su atención con 0,31 en «gato».\nMiré la capa 1, cabeza 1.\n"
            "Con pesos sin entrenar el patrón sería arbitrario.\n")
    write(sub, "analysis.md", text)
    result = check(sub, "analysis")
    assert result.passed, result.message


@pytest.mark.parametrize("text", [
    # a heading, blank lines, curly quotes, a weight written .42, a percentage
    "# My analysis\n\nIn “it was too tired”, ‘it’ attends to ‘animal’ with .42.\n\n"
    "Head 2 of layer 1 was the clearest.\n“street” gets 7%.\nOther rows are flat.\n",
    # the heatmap embedded, a table of weights and a comment around four lines of text
    "![heatmap](attention_heatmap.png)\n\n| query | key | weight |\n|---|---|---|\n| sat | cat | 0.42 |\n"
    "<!-- draft -->\n'sat' attends most to 'cat'.\nThis is head 0 of my only layer.\n'on' is spread out.\n"
    "The rest is flat.\n",
    # double quotes, weight 1.0, random-weights note, Windows line endings
    'Random untrained weights: the pattern is arbitrary.\r\n"The" attends to "mat" with 1.0.\r\n'
    'Rows sum to one.\r\n"cat" is ignored.\r\n',
    # guillemets, a decimal comma, option B (own toy training) instead of a layer/head
    "J'ai entraîné le modèle (trained on a toy task).\n«sat» regarde «cat» avec 0,93.\n"
    "«on» regarde «sat».\nLe premier mot se regarde lui-même.\n",
])
def test_unusual_but_valid_analyses_are_accepted(sub, text):
    (sub / "analysis.md").unlink()
    write(sub, "Analysis.TXT", text)
    result = check(sub, "analysis")
    assert result.passed, result.message


def test_six_lines_are_too_many(sub):
    write(sub, "analysis.md", ANALYSIS_OK + "One more line.\nAnd another one.\n")
    result = check(sub, "analysis")
    assert not result.passed and "6 line(s) of text" in result.message


def test_apostrophes_are_not_quotes(sub):
    text = ("In head 1, it didn't attend to the model's first word much at all (0.12).\n"
            "It's spread out.\nThe rest is flat.\nNothing else stands out.\n")
    write(sub, "analysis.md", text)
    result = check(sub, "analysis")
    assert not result.passed and "in quotes" in result.message


# --------------------------------------------------------------------------- diagram


def test_missing_diagram_is_rejected(sub):
    (sub / "transformer_block.png").unlink()
    result = check(sub, "diagram")
    assert not result.passed and result.message.startswith("Missing")


def test_misplaced_diagram_gets_a_hint(sub):
    (sub / "figures").mkdir()
    (sub / "transformer_block.png").rename(sub / "figures" / "transformer_block.png")
    result = check(sub, "diagram")
    assert not result.passed and "figures/transformer_block.png" in result.message


def test_misplaced_weights_and_heatmap_get_a_hint(sub):
    # Found on a held-out zip with its pictures in figures/: every other check said where the file was; this one only
    # said to run `make heatmap`.
    (sub / "figures").mkdir()
    for name in ("attention_heatmap.png", "attention_weights.npy"):
        (sub / name).rename(sub / "figures" / name)
    result = check(sub, "heatmap_weights")
    assert not result.passed and "Found figures/attention_" in result.message, result.message


def test_blank_diagram_is_rejected(sub):
    (sub / "transformer_block.png").write_bytes(png_bytes(Image.new("RGB", (800, 1000), "white")))
    result = check(sub, "diagram")
    assert not result.passed and "blank" in result.message


def transparent_canvas(size=(800, 600), seed=0) -> Image.Image:
    """Fully transparent, with random colours under the zero alpha (what a viewer never shows)."""
    noise = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 4), dtype=np.uint8)
    noise[..., 3] = 0
    return Image.fromarray(noise, "RGBA")


def test_a_drawing_on_a_transparent_background_is_judged_as_shown_on_white(sub):
    canvas = transparent_canvas()
    (sub / "transformer_block.png").write_bytes(png_bytes(canvas))
    result = check(sub, "diagram")
    assert not result.passed and "blank" in result.message  # the colours under alpha 0 do not count
    ImageDraw.Draw(canvas).rectangle((100, 100, 700, 500), outline=(0, 0, 0, 255), width=3)
    (sub / "transformer_block.png").write_bytes(png_bytes(canvas))
    result = check(sub, "diagram")
    assert result.passed, result.message


def test_a_diagram_drawn_only_at_the_bottom_is_decoded_whole_and_accepted(sub):
    image = Image.new("RGB", (800, 600), "white")
    ImageDraw.Draw(image).rectangle((50, 480, 750, 580), outline="black", width=3)
    (sub / "transformer_block.png").write_bytes(png_bytes(image))
    assert check(sub, "diagram").passed


@pytest.mark.parametrize("convert", [lambda im: im.convert("P"), lambda im: im.convert("I;16"),
                                     lambda im: im.convert("L")])
def test_pngs_the_shortcut_does_not_read_are_judged_whole(sub, convert):
    image = Image.new("RGB", (800, 600), "white")
    ImageDraw.Draw(image).rectangle((50, 40, 750, 580), outline="black", width=3)
    (sub / "transformer_block.png").write_bytes(png_bytes(convert(image)))
    assert check(sub, "diagram").passed
    (sub / "transformer_block.png").write_bytes(png_bytes(convert(Image.new("RGB", (800, 600), "white"))))
    assert "blank" in check(sub, "diagram").message


def test_thin_pen_drawing_photographed_as_jpeg_is_accepted(sub):
    (sub / "transformer_block.png").unlink()
    (sub / "Transformer_Block.JPG").write_bytes(png_bytes(line_drawing(), "JPEG"))
    result = check(sub, "diagram")
    assert result.passed, result.message


@pytest.fixture(scope="module")
def vector_diagrams(tmp_path_factory) -> dict[str, Path]:
    """The reference diagram as SVG and PDF, plus blank ones, drawn by the reference script."""
    sys.path.insert(0, str(REFERENCE))
    try:
        import make_deliverables
    finally:
        sys.path.remove(str(REFERENCE))
    import matplotlib.pyplot as plt

    folder = tmp_path_factory.mktemp("vector")
    paths = {}
    for ext in ("svg", "pdf"):
        paths[ext] = folder / f"drawn.{ext}"
        make_deliverables.draw_block_diagram(paths[ext])
        paths[f"blank_{ext}"] = folder / f"blank.{ext}"
        figure = plt.figure()
        figure.savefig(paths[f"blank_{ext}"])
        plt.close(figure)
    return paths


def use_diagram(sub: Path, name: str, data: bytes) -> None:
    (sub / "transformer_block.png").unlink()
    (sub / name).write_bytes(data)


@pytest.mark.parametrize("ext", ["svg", "pdf"])
def test_vector_diagrams_are_accepted(sub, vector_diagrams, ext):
    use_diagram(sub, f"transformer_block.{ext}", vector_diagrams[ext].read_bytes())
    result = check(sub, "diagram")
    assert result.passed, result.message


@pytest.mark.parametrize("ext", ["svg", "pdf"])
def test_blank_vector_diagrams_are_rejected(sub, vector_diagrams, ext):
    use_diagram(sub, f"transformer_block.{ext}", vector_diagrams[f"blank_{ext}"].read_bytes())
    result = check(sub, "diagram")
    assert not result.passed and "blank" in result.message


def test_an_svg_holding_a_photo_of_the_drawing_is_a_drawing(sub):
    # A scan or photo placed in an SVG is one <image> element: it was "blank", where the same photo placed in a PDF
    # passes (held out).
    from PIL import Image, ImageDraw

    photo = Image.new("RGB", (400, 300), "white")
    pen = ImageDraw.Draw(photo)
    for i, label in enumerate(("attention", "add & norm", "feed-forward", "add & norm")):
        pen.rectangle([60, 20 + 70 * i, 340, 70 + 70 * i], outline="black", width=3)
        pen.text((80, 35 + 70 * i), label, fill="black")
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG")
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="400" '
           f'height="300"><image width="400" height="300" xlink:href="data:image/jpeg;base64,'
           f'{base64.b64encode(buffer.getvalue()).decode()}"/></svg>')
    use_diagram(sub, "transformer_block.svg", svg.encode())
    result = check(sub, "diagram")
    assert result.passed, result.message
    (sub / "transformer_block.svg").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg"><image href="photo.jpg"/></svg>')
    assert not check(sub, "diagram").passed  # a picture that is not in the file is no drawing


def test_svg_with_entities_is_refused_unexpanded(sub):
    bomb = ('<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
            '<svg xmlns="http://www.w3.org/2000/svg"><text>&b;</text><rect width="5" height="5"/></svg>')
    use_diagram(sub, "transformer_block.svg", bomb.encode())
    result = check(sub, "diagram")
    assert not result.passed and "entities" in result.message


@pytest.mark.parametrize("data, words", [
    (b"<svg><rect></svg>", "not valid SVG"),
    (b"<html><body>diagram</body></html>", "not SVG"),
])
def test_broken_svg_is_rejected(sub, data, words):
    use_diagram(sub, "transformer_block.svg", data)
    result = check(sub, "diagram")
    assert not result.passed and words in result.message


def test_truncated_or_fake_pdf_is_rejected(sub, vector_diagrams):
    data = vector_diagrams["pdf"].read_bytes()
    use_diagram(sub, "transformer_block.pdf", data[: len(data) // 2])
    assert "cut short" in check(sub, "diagram").message
    (sub / "transformer_block.pdf").write_text("see the PNG")
    assert "not a PDF" in check(sub, "diagram").message


def test_scanned_drawing_saved_as_pdf_is_accepted(sub, tmp_path):
    scan = tmp_path / "scan.pdf"
    line_drawing().save(scan)  # Pillow writes one page holding the picture as an image XObject
    use_diagram(sub, "transformer_block.pdf", scan.read_bytes())
    result = check(sub, "diagram")
    assert result.passed and "embedded image" in result.message


def test_any_valid_candidate_passes(sub):
    (sub / "transformer_block.jpg").write_text("not an image")  # a broken extra file costs nothing
    assert check(sub, "diagram").passed


# --------------------------------------------------------------------------- README


def handout_text() -> str:
    for path in HANDOUT_CANDIDATES:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    pytest.skip("the handout is not in this workspace (../shared/handout)")


def test_own_words_readme_is_accepted(sub):
    write(sub, "README.md", README_OK)
    result = check(sub, "readme")
    assert result.passed, result.message


def test_copied_readme_is_rejected_and_the_passage_quoted(sub):
    copied = ("Each token creates a query, compares it to all tokens’ keys to get weights, and takes a "
              "weighted average of their values.")
    assert copied in handout_text()
    write(sub, "README.md", README_OK + "\nIn one line: " + copied + "\n")
    result = check(sub, "readme")
    assert not result.passed and "word for word" in result.message
    assert "compares it to all tokens’ keys to get weights" in result.message


def test_copy_check_finds_a_passage_lifted_from_anywhere_in_the_handout():
    prints = deliverables.load_fingerprints(rules.FINGERPRINTS)
    words = handout_text().split()
    rng = random.Random(0)
    for _ in range(20):
        start = rng.randrange(len(words) - 30)
        passage = " ".join(words[start:start + 30])
        # A passage made only of short or quoted tokens can be shorter than 8 counted words.
        if len(deliverables.words(passage)) >= 20 and '"' not in passage and "“" not in passage:
            assert deliverables.copied_passages(f"My words first. {passage} My words after.", prints), passage


def test_one_short_matching_sentence_is_not_copying(sub):
    sentence = "Every row sums to 1 because of the softmax."
    assert sentence in handout_text()
    write(sub, "README.md", README_OK + "\n" + sentence + "\n")
    result = check(sub, "readme")
    assert result.passed, result.message


def test_quoting_the_handouts_example_sentence_or_code_is_not_copying(sub):
    text = (README_OK + "\nFor example in “The animal didn’t cross the street because it was too tired” the "
            "query of it should match the key of animal.\n\n```python\n"
            "self.W_q = nn.Linear(d_model, d_k, bias = False)\n"
            "scores = Q @ K.transpose( - 2, - 1) / math.sqrt(self.d_k) # (B, T, T)\n```\n")
    write(sub, "README.md", text)
    result = check(sub, "readme")
    assert result.passed, result.message


def test_readme_with_no_explanation_of_value_is_rejected(sub):
    text = re.sub(r"The value of a token.*?another\.\n", "", README_OK, flags=re.DOTALL)
    text += "\n## Value\n\nTODO\n\nI spent a long time thinking about how the query and the key interact in practice.\n"
    write(sub, "README.md", text)
    result = check(sub, "readme")
    assert not result.passed and "Value is not explained" in result.message


def test_terse_bullet_readme_is_accepted(sub):
    text = ("# Q, K, V\n\n- **Query**: what a token is searching for.\n- **Key**: how a token can be found.\n"
            "- **Value**: what a token hands over.\n\n" + "I wrote these notes after implementing attention. " * 8)
    write(sub, "README.md", text)
    result = check(sub, "readme")
    assert result.passed, result.message


def test_readme_with_one_heading_per_term_is_accepted(sub):
    text = ("# My README\n\n## Query\nIt is what the current token is trying to find.\n\n## Key\n"
            "Each token's label, compared with the queries by a dot product.\n\n## Value\n"
            "The content that actually gets mixed into the output.\n\n"
            + "Attention blends the values with softmax weights, one row per token. " * 5)
    write(sub, "README.md", text)
    result = check(sub, "readme")
    assert result.passed, result.message


def test_short_readme_is_rejected(sub):
    write(sub, "README.md", "Query: what a token is looking for in the others.\nKey: how a token describes "
                            "itself to the others.\nValue: what a token passes on when it is attended to.\n")
    result = check(sub, "readme")
    assert not result.passed and "words of prose" in result.message


REBUILD = ("run `python -m grader.day13.deliverable_checks --build-fingerprints "
           "../shared/handout/day13-attention-transformers.txt` and commit grader/day13/handout_ngrams.txt")


def test_shipped_fingerprints_match_the_handout(tmp_path):
    text = handout_text()
    handout = tmp_path / "day13-attention-transformers.txt"
    handout.write_text(text, encoding="utf-8")
    rebuilt = tmp_path / "handout_ngrams.txt"
    rules.build_fingerprints(handout, rebuilt)
    assert deliverables.load_fingerprints(rebuilt) == deliverables.load_fingerprints(rules.FINGERPRINTS), \
        f"stale: {REBUILD}"
    assert deliverables.load_fingerprints(rebuilt, "assignment-readme") == \
        deliverables.load_fingerprints(rules.FINGERPRINTS, "assignment-readme"), f"stale: {REBUILD}"


def test_shipped_fingerprints_still_recognise_the_assignment_readme():
    # Not equality: a small later edit of the instructions must not break the build, and the
    # check only needs to recognise most of them.
    current = set(deliverables.text_fingerprints(ASSIGNMENT_README.read_text(encoding="utf-8")))
    shipped = deliverables.load_fingerprints(rules.FINGERPRINTS, section="assignment-readme")
    assert len(current & shipped) >= 0.9 * len(current), f"assignments/day13/README.md changed a lot: {REBUILD}"


def test_the_assignment_readme_left_in_place_is_not_the_students(sub):
    shutil.copy(ASSIGNMENT_README, sub / "README.md")
    result = check(sub, "readme")
    assert not result.passed and "still the assignment's README" in result.message


def test_instructions_kept_above_an_own_explanation_are_ignored(sub):
    write(sub, "README.md", ASSIGNMENT_README.read_text(encoding="utf-8") + "\n## My notes\n\n" + README_OK)
    result = check(sub, "readme")
    assert result.passed and "were left out" in result.message
    write(sub, "README.md", ASSIGNMENT_README.read_text(encoding="utf-8") + "\n## My notes\n\nQuery asks, key answers.\n")
    assert not check(sub, "readme").passed


def test_readme_copy_check_is_skipped_not_failed_without_fingerprints(sub, monkeypatch, tmp_path):
    monkeypatch.setattr(rules, "FINGERPRINTS", tmp_path / "absent.txt")
    result = check(sub, "readme")
    assert result.passed and "copy check skipped" in result.message


# --------------------------------------------------------------------------- robustness


def test_names_match_case_insensitively(sub):
    for name in DELIVERABLES:
        (sub / name).rename(sub / name.upper())
    assert all(r.passed for r in run_checks(sub))


def test_symlink_out_of_the_folder_is_not_followed(sub, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(sub / "attention_heatmap.png", outside / "heatmap.png")
    (sub / "attention_heatmap.png").symlink_to(outside / "heatmap.png")
    result = check(sub, "heatmap_png")
    assert not result.passed and "outside the submission folder" in result.message
    (sub / "README.md").unlink()
    (sub / "README.md").symlink_to("/etc/passwd")
    assert "outside the submission folder" in check(sub, "readme").message


def test_symlink_inside_the_folder_is_followed(sub):
    (sub / "figures").mkdir()
    shutil.move(sub / "transformer_block.png", sub / "figures" / "block.png")
    (sub / "transformer_block.png").symlink_to(Path("figures") / "block.png")
    assert check(sub, "diagram").passed


def test_fifo_and_folder_under_a_deliverable_name_do_not_block_or_crash(sub):
    (sub / "analysis.md").unlink()
    os.mkfifo(sub / "analysis.md")
    (sub / "README.md").unlink()
    (sub / "README.md").mkdir()
    results = by_id(run_checks(sub))
    assert "not a regular file" in results["analysis"].message
    assert "not a regular file" in results["readme"].message


def test_image_with_a_huge_declared_size_is_refused_from_its_header(sub):
    image = Image.new("1", (9000, 9000))  # 81 megapixels of a 1-bit image: a few kB as PNG
    (sub / "transformer_block.png").write_bytes(png_bytes(image))
    result = check(sub, "diagram")
    assert not result.passed and "megapixels" in result.message


def test_broken_files_never_crash_the_checker(sub):
    rng = random.Random(13)
    originals = {name: (REFERENCE / name).read_bytes() for name in DELIVERABLES}
    for trial in range(40):
        for name, data in originals.items():
            kind = trial % 4
            if kind == 0:
                spoiled = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            elif kind == 1:
                spoiled = data[: rng.randrange(1, len(data))]
            elif kind == 2:
                spoiled = bytearray(data)
                for _ in range(8):
                    spoiled[rng.randrange(len(spoiled))] = rng.randrange(256)
                spoiled = bytes(spoiled)
            else:
                spoiled = data[:16] + bytes(rng.randrange(256) for _ in range(64)) + data[80:]
            (sub / name).write_bytes(spoiled)
        results = run_checks(sub)
        assert [r.id for r in results] == list(rules.CHECK_IDS)
        assert all(isinstance(r.message, str) and r.message for r in results)
        assert not any("checker bug" in r.message for r in results), [r.message for r in results]


def test_a_missing_folder_fails_every_check_with_a_message(tmp_path):
    results = run_checks(tmp_path / "nope")
    assert len(results) == 5 and not any(r.passed for r in results)
    assert "not a folder" in results[0].message


# --------------------------------------------------------------------------- entry points


def test_main_prints_a_checklist_and_exit_code(sub, capsys):
    assert deliverables.main(submission=str(sub), checks=rules.CHECKS) == 0
    assert capsys.readouterr().out.count("✓") == 5
    (sub / "analysis.md").write_text("Too short.\n")
    assert deliverables.main(submission=str(sub), checks=rules.CHECKS) == 1
    out = capsys.readouterr().out
    assert out.count("✓") == 4 and "✗ Sentence analysis" in out and "1 line(s) of text" in out


def test_main_on_a_zip_says_to_unzip(tmp_path, capsys):
    assert deliverables.main(submission=str(tmp_path / "alice.zip"), checks=rules.CHECKS) == 1
    assert "Unzip it first" in capsys.readouterr().out


def test_the_checks_are_standalone_and_run_from_a_copy_beside_the_checker(sub, tmp_path):
    """As the release ships them: tools/deliverables.py runs tools/deliverable_checks.py, which reads
    the fingerprints beside it; nothing of the kit is importable."""
    tree = ast.parse(Path(rules.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) <= {"numpy", "PIL", "deliverables", "grader"}
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(ROOT / "grader" / "judging" / "deliverables.py", tools)
    shutil.copy(rules.__file__, tools / deliverables.RELEASED_CHECKS)
    shutil.copy(rules.FINGERPRINTS, tools)
    done = subprocess.run([sys.executable, str(tools / "deliverables.py"), str(sub)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "copy check skipped" not in done.stdout


def test_grader_cli_check_command(sub):
    (sub / "README.md").unlink()
    done = subprocess.run([sys.executable, "-m", "grader", "check", str(sub)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 1 and "Missing: no README.md" in done.stdout
