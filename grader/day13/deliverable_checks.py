"""Day 13's deliverables: the attention heatmap, its weights, the analysis, the block diagram and the
README on Q, K and V (handout §5, §12, §18; assignments/day13/CONTRACT.md, "The other deliverables").

What each file must be is decided here; reading it safely and judging pictures, text and vector
drawings is the deliverables checker's (grader/judging/deliverables.py), which runs `CHECKS`. The student
release ships this file as tools/deliverable_checks.py beside the checker, with the handout's
fingerprints (handout_ngrams.txt, beside this file), so `make check` runs the grader's own checks.

    python -m grader.day13.deliverable_checks --build-fingerprints HANDOUT.txt   # refresh handout_ngrams.txt
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

if __package__:  # in the kit, grader/day13/
    from grader.judging import deliverables as kit
else:  # in the student release, tools/ beside the checker
    import deliverables as kit

Check, Problem = kit.Check, kit.Problem

MIN_HEATMAP_SIDE = 300
MIN_DIAGRAM_SIDE = 100
# Not blank: at least this many colours, each on >= 0.05 % of the picture, and this share of
# pixels clearly unlike the background (a heatmap is a range of colours; a diagram a few lines).
HEATMAP_COLOURS, HEATMAP_INK = 3, 0.02
DIAGRAM_COLOURS, DIAGRAM_INK = 2, 0.0005
MIN_TOKENS = 4
MAX_TOKENS = 1024
ROW_SUM_TOLERANCE = 1e-3
ANALYSIS_LINES = (4, 5)
# The issue asks for "at least about 80 words"; a few words short is still a real explanation.
MIN_README_WORDS = 75
# The handout's passages and the assignment README's, fingerprinted (the README's copy check).
FINGERPRINTS = Path(__file__).with_name("handout_ngrams.txt")

# What Day 13 asks for besides the code, declared once (CONTRACT.md, "The other deliverables"): what ->
# (kind, accepted names matched ignoring case, in order of preference). The checks below read it, and
# the engine through the lesson (grader.lesson.Lesson.deliverable_files): the review page shows the
# pictures and texts, the similarity report compares them.
FILES = {
    "heatmap": ("image", ("attention_heatmap.png",)),
    "weights": ("data", ("attention_weights.npy",)),
    "diagram": ("image", tuple(f"transformer_block.{ext}" for ext in ("png", "jpg", "jpeg", "svg", "pdf"))),
    "README": ("text", ("README.md", "README.markdown", "README.txt", "README")),
    "analysis": ("text", ("analysis.md", "analysis.txt")),
}
HEATMAP_NAMES, WEIGHTS_NAMES, DIAGRAM_NAMES, README_NAMES, ANALYSIS_NAMES = (names for _, names in FILES.values())


# --------------------------------------------------------------------------- heatmap


def _judge_heatmap(name: str, data: bytes) -> str:
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise Problem(f"{name} is not a PNG: it is {kit.sniff(data)}. Save the figure as PNG, e.g. "
                      "plt.savefig('attention_heatmap.png'), or run `make heatmap`.")
    image = kit.decode_image(name, data, ("PNG",), load=False)
    width, height = image.size
    if min(width, height) < MIN_HEATMAP_SIDE:
        raise Problem(f"{name} is {width}x{height} pixels, too small to read the token labels; it must be at least "
                      f"{MIN_HEATMAP_SIDE}x{MIN_HEATMAP_SIDE}. Save with a larger figure or dpi, e.g. "
                      "plt.figure(figsize=(6, 5)) and plt.savefig(..., dpi=100).")
    if not kit.drawn_in_the_top_quarter(data, image.size, HEATMAP_COLOURS, HEATMAP_INK):
        ink, colours = kit.pixel_stats(kit.load_pixels(name, data, ("PNG",), image))
        if colours < HEATMAP_COLOURS or ink < HEATMAP_INK:
            raise Problem(f"{name} looks blank: {colours} colour(s), and {ink:.1%} of it differs from the background. "
                          "A heatmap shows a range of weights: plot the T x T matrix with plt.imshow(weights, cmap='viridis') "
                          "and add plt.colorbar() before saving.")
    return f"{name}: a {width}x{height} PNG."


def check_heatmap(root: str) -> Check:
    title = "Attention heatmap (attention_heatmap.png)"
    return kit.judged("heatmap_png", title, root, HEATMAP_NAMES, "Run `make heatmap`, or save your plot of the attention "
                      "weights with plt.savefig('attention_heatmap.png') (handout §5).",
                      kit.MAX_IMAGE_BYTES, _judge_heatmap)


def _weights_array(name: str, data: bytes) -> np.ndarray:
    """The .npy file's array, loaded only after its header passed: numeric dtype, sane shape, byte count."""
    if not data.startswith(kit.NPY_MAGIC):
        raise Problem(f"{name} is not a .npy file: it is {kit.sniff(data)}. Save the matrix with "
                      "np.save('attention_weights.npy', weights) (torch.save and pickle write other formats), "
                      "or run `make heatmap`.")
    shape, dtype, offset = kit.npy_header(name, data)
    if not kit.plain_numbers(dtype):
        raise Problem(f"{name} holds {dtype} data (Python objects, i.e. a pickle, or a record type); the checker "
                      "only loads plain numbers. Save a float array: np.save('attention_weights.npy', "
                      "weights.detach().numpy().astype('float32')).")
    if len(shape) > 4 or any(side > MAX_TOKENS for side in shape):
        raise Problem(f"{name} has shape {shape}; expected a T x T matrix with T <= {MAX_TOKENS}.")
    return kit.npy_load(name, data, shape, dtype, offset)


def _judge_weights(name: str, data: bytes) -> str:
    weights = _weights_array(name, data)
    while weights.ndim > 2 and weights.shape[0] == 1:  # (1, T, T) straight from a batch of one is fine
        weights = weights[0]
    if weights.ndim != 2 or weights.shape[0] != weights.shape[1]:
        raise Problem(f"{name} has shape {weights.shape}; the heatmap's matrix is square (T x T). Save one "
                      "sentence's weights, e.g. weights[0] for a batch, or one head of one layer.")
    T = weights.shape[0]
    if T < MIN_TOKENS:
        raise Problem(f"{name} covers {T} token(s); use a sentence of at least {MIN_TOKENS} tokens.")
    weights = weights.astype(np.float64)
    if not np.isfinite(weights).all():
        raise Problem(f"{name} contains NaN or inf. A row whose every key is masked gives NaN: plot a sentence "
                      "without fully masked rows.")
    if weights.min() < 0:
        row, col = np.unravel_index(weights.argmin(), weights.shape)
        raise Problem(f"{name} has a negative weight {weights[row, col]:.4g} at row {row}, column {col}; attention "
                      "weights come out of a softmax, so they are >= 0. Save the softmax output, not the scores.")
    sums = weights.sum(axis=1)  # (T,)
    worst = int(np.abs(sums - 1).argmax())
    if abs(sums[worst] - 1) > ROW_SUM_TOLERANCE:
        raise Problem(f"{name}: row {worst} sums to {sums[worst]:.4f}, not 1 (tolerance {ROW_SUM_TOLERANCE}). "
                      "Each row is a softmax over the keys: softmax along the last dimension (dim=-1), and save "
                      "the weights, not the scores or the output.")
    return f"{name}: a {T}x{T} matrix, every row sums to 1."


def check_weights(root: str) -> Check:
    title = "Attention weights (attention_weights.npy, optional)"
    if not kit.find(root, WEIGHTS_NAMES):
        if kit.find(root, HEATMAP_NAMES):
            return Check("heatmap_weights", True, "attention_weights.npy not included (optional): nothing to check. "
                         "`make heatmap` saves it next to the heatmap.", title)
        return Check("heatmap_weights", False, "No heatmap and no attention_weights.npy. Run `make heatmap`: it saves both."
                     + kit.misplaced(root, WEIGHTS_NAMES + HEATMAP_NAMES), title)
    return kit.judged("heatmap_weights", title, root, WEIGHTS_NAMES, "", kit.MAX_NPY_BYTES, _judge_weights)


# --------------------------------------------------------------------------- analysis


# A token in quotes: straight or curly, single or double, or `code`. An apostrophe inside a word
# (didn't, model's) is not an opening quote, hence the look-behind.
_QUOTED = re.compile(r"""(?<![\w])(?:"[^"\n]{1,40}"|'[^'\s][^'\n]{0,39}'|“[^”\n]{1,40}”|‘[^’\n]{1,40}’|`[^`\n]{1,40}`"""
                     r"""|«[^»\n]{1,40}»|„[^“”\n]{1,40}[“”]|‚[^‘’\n]{1,40}[‘’]"""
                     # Markdown's bold and italics mark a token as well as quotes do.
                     r"""|\*\*[^*\n]{1,40}\*\*|(?<!\*)\*[^*\s][^*\n]{0,39}\*(?!\*)|__[^_\n]{1,40}__)""")
_DECIMAL = re.compile(r"(?<![\w.,])(\d*\.\d+|[01],\d+)(?![\w.,]*\d)|(?<![\w.])(\d{1,3}(?:\.\d+)?)\s?%")
# The words in English, and in the languages a student is likeliest to write them in otherwise (Spanish, Portuguese,
# French, Italian, German): the contract asks what the analysis says, not its language.
_WHERE = re.compile(r"\b(layers?|heads?|capas?|cabezas?|camadas?|cabeças?|couches?|têtes?|strat[oi]|test[ae]|"
                    r"schicht(en)?|k[oö]pfe?)\b|\bL\d+\s*H\d+\b", re.IGNORECASE)
# Where the weights came from: untrained/random (the §5 note), or the student's own toy training or
# hand-set Q/K (option B), which is as good as naming a layer and head.
_ARBITRARY = re.compile(r"\b(untrained|not trained|without training|before training|no training|random(ly)?|arbitrary|"
                        r"meaningless|no meaning|not meaningful|initiali[sz]ed|not learn(ed|t)|trained|hand-?set|"
                        r"sin entrenar|no entrenad[oa]s?|sem treino|não treinad[oa]s?|non entraîné(e|s|es)?|"
                        r"non addestrat[oi]|untrainiert|aleatori[oa]s?|aleatóri[oa]s?|aléatoires?|casual[ei]|"
                        r"zufällig(e|en)?|arbitrari[oa]s?|arbitrári[oa]s?|arbitraires?|willkürlich(e|en)?)\b",
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


def _judge_analysis(name: str, data: bytes) -> str:
    text = kit.decode_text(name, data)
    lines = kit.text_lines(text)
    problems = []
    low, high = ANALYSIS_LINES
    if not low <= len(lines) <= high:
        problems.append(f"it has {len(lines)} line(s) of text (blank lines, headings, tables and images not counted); "
                        f"the handout asks for {low}-{high} "
                        "lines: one line per observation, no hard line-wrapping inside a sentence.")
    if not _QUOTED.search(text):
        problems.append("no token is named in quotes (or in `code`, bold or italics): name the tokens you discuss, "
                        "e.g. 'sat' attends to 'cat'.")
    if not _weights_quoted(text):
        problems.append("no attention weight is quoted: give at least one number from your heatmap between 0 and 1, "
                        "e.g. 'sat' attends to 'cat' with weight 0.42.")
    if not (_WHERE.search(text) or _ARBITRARY.search(text)):
        problems.append("say which layer/head you looked at (e.g. 'head 3 of layer 5'), or, for your own untrained "
                        "SelfAttention, that random weights make the pattern arbitrary (handout §5).")
    if problems:
        raise Problem(kit.listed(name, problems))
    return f"{name}: {len(lines)} lines, tokens and weights quoted."


def check_analysis(root: str) -> Check:
    title = "Sentence analysis (analysis.md, 4-5 lines)"
    return kit.judged("analysis", title, root, ANALYSIS_NAMES, "Write 4-5 lines about one sentence's heatmap in analysis.md "
                      "(handout §5).", kit.MAX_TEXT_BYTES, _judge_analysis)


# --------------------------------------------------------------------------- diagram


_DRAW_THE_BLOCK = "Draw the block: attention, add & norm, feed-forward, with the shapes"


def _judge_svg(name: str, data: bytes) -> str:
    drawn = kit.svg_drawing_elements(name, data, drawing="a diagram of the block")
    if drawn and b"data:image/" in data and len(data) >= 1500:
        # A scan or photo placed in the SVG (one <image>), as a PDF may hold one.
        return f"{name}: an SVG holding an image (a scan or photo of the drawing)."
    if drawn < 2:
        raise Problem(f"{name} looks blank: {drawn} drawing element(s). {_DRAW_THE_BLOCK}.")
    return f"{name}: an SVG with {drawn} drawing elements."


def _judge_pdf(name: str, data: bytes) -> str:
    if not data[:1024].lstrip().startswith(b"%PDF-"):
        raise Problem(f"{name} is not a PDF: it is {kit.sniff(data)}. Export the diagram as PDF or PNG.")
    if b"%%EOF" not in data[-2048:]:
        raise Problem(f"{name} is cut short (no %%EOF at the end). Export the PDF again.")
    marks = kit.pdf_marks(data)
    scanned = kit.pdf_has_image(data)  # a scan or photo placed on the page
    if (marks < 4 and not scanned) or len(data) < 1500:
        raise Problem(f"{name} looks blank ({len(data)} bytes, {marks} drawing operations). {_DRAW_THE_BLOCK}.")
    what = "an embedded image" if scanned and marks < 4 else f"{marks} drawing operations"
    return f"{name}: a PDF with {what} (structure checked; not rendered)."


def _judge_raster_diagram(name: str, data: bytes) -> str:
    image = kit.decode_image(name, data, ("PNG", "JPEG"), load=False)
    width, height = image.size
    if min(width, height) < MIN_DIAGRAM_SIDE:
        raise Problem(f"{name} is {width}x{height} pixels, too small to read; save it at least "
                      f"{MIN_DIAGRAM_SIDE} pixels on each side.")
    if data.startswith(b"\x89PNG") and kit.drawn_in_the_top_quarter(data, image.size, DIAGRAM_COLOURS, DIAGRAM_INK):
        return f"{name}: a {width}x{height} PNG image."
    ink, colours = kit.pixel_stats(kit.load_pixels(name, data, ("PNG", "JPEG"), image))
    if colours < DIAGRAM_COLOURS or ink < DIAGRAM_INK:
        raise Problem(f"{name} looks blank (almost all one colour). {_DRAW_THE_BLOCK}; a clear photo of a paper "
                      "drawing is fine.")
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
    return kit.judged("diagram", title, root, DIAGRAM_NAMES, "Draw the Transformer block (attention, add & norm, "
                      "feed-forward, with the shapes: handout §12) and save it as transformer_block.png "
                      "(a photo of a paper drawing is fine as .jpg).", kit.MAX_IMAGE_BYTES, _judge_diagram)


# --------------------------------------------------------------------------- README


_TERMS = {
    "Query": re.compile(r"\b(quer(y|ies)|Q)\b", re.IGNORECASE),
    "Key": re.compile(r"\b(keys?|K)\b", re.IGNORECASE),
    "Value": re.compile(r"\b(values?|V)\b", re.IGNORECASE),
}
_SINGLE_LETTER = {"Query": "Q", "Key": "K", "Value": "V"}
_ANY_TERM = re.compile(r"\b(quer(y|ies)|keys?|values?|[QKV])\b", re.IGNORECASE)


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
    parts = kit.HEADING_LINE.split(prose)  # [body, heading, body, heading, body, ...]
    for n in range(0, len(parts), 2):
        body = parts[n]
        heading = parts[n - 1] if n else ""
        in_heading = [term for term in _TERMS if _names(term, heading)]
        first_paragraph = next((p for p in re.split(r"\n\s*\n", body) if p.strip()), "")
        body_words = [w for w in re.findall(r"[^\W_]+", first_paragraph) if not _ANY_TERM.fullmatch(w)]
        if len(in_heading) == 1 and len(body_words) >= 4:
            explained.add(in_heading[0])
        for sentence in kit.sentences(body):
            others = [w for w in re.findall(r"[^\W_]+", sentence) if not _ANY_TERM.fullmatch(w)]
            if len(others) >= 4:
                explained |= {term for term in _TERMS if _names(term, sentence)}
    return explained


def _judge_readme(name: str, data: bytes) -> str:
    instructions = kit.load_fingerprints(FINGERPRINTS, section="assignment-readme")
    text, kept_instructions = kit.without_passages(kit.decode_text(name, data), instructions)
    prose = kit.prose(text)
    problems = []
    n_words = len([w for w in prose.split() if re.search(r"[^\W_]", w)])
    if kept_instructions and n_words < MIN_README_WORDS // 3:
        raise Problem(f"{name} is still the assignment's README (the instructions). Replace it with your own: "
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
    prints = kit.load_fingerprints(FINGERPRINTS, section="handout")
    copied = kit.copied_passages(prose, prints) if prints else []
    if copied:
        shown = copied[0] if len(copied[0]) <= 240 else copied[0][:240] + "…"
        more = f" (and {len(copied) - 1} more passage(s))" if len(copied) > 1 else ""
        problems.append(f"it repeats the handout word for word: \"{shown}\"{more}. Explain Q, K and V in your own "
                        "words; quoting the handout's example sentences is fine.")
    kept = (f" ({kept_instructions} words of the assignment's own README, the instructions, were left out: "
            "only your own text counts)") if kept_instructions else ""
    if problems:
        raise Problem(kit.listed(name, problems) + kept)
    note = "" if prints is not None else " (copy check skipped: handout_ngrams.txt is not next to the checker)"
    return f"{name}: Query, Key and Value explained in {n_words} words of your own{kept}{note}."


def check_readme(root: str) -> Check:
    title = "README: Query, Key and Value in your own words"
    return kit.judged("readme", title, root, README_NAMES, "Write README.md explaining Query, Key and Value in your own "
                      "words (about 80 words or more).", kit.MAX_TEXT_BYTES, _judge_readme)


# --------------------------------------------------------------------------- the checks

# (rubric id, check), in the checklist's order; the ids are stable: rubric.toml scores `deliverables.<id>`.
CHECKS = (("heatmap_png", check_heatmap), ("heatmap_weights", check_weights), ("analysis", check_analysis),
          ("diagram", check_diagram), ("readme", check_readme))
CHECK_IDS = tuple(check_id for check_id, _ in CHECKS)


def assignment_readme() -> Path:
    """The student folder's README in the kit: the instructions, which are not a student's own words."""
    return Path(__file__).resolve().parents[2] / "assignments" / "day13" / "README.md"


def build_fingerprints(handout: Path, out: Path = FINGERPRINTS, readme: Path | None = None) -> int:
    """Rewrite the fingerprints the README check compares with; returns how many the handout gave."""
    return kit.write_fingerprints(handout, out, readme or assignment_readme(),
                                  made_by=f"python -m grader.day13.deliverable_checks --build-fingerprints {Path(handout).name}")


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild the fingerprints of Day 13's README check.")
    parser.add_argument("--build-fingerprints", metavar="HANDOUT", required=True, help="the handout, as text")
    parser.add_argument("--assignment-readme", metavar="README", default=None,
                        help="the student folder's README (default: assignments/day13/README.md)")
    args = parser.parse_args(argv)
    readme = Path(args.assignment_readme) if args.assignment_readme else None
    count = build_fingerprints(Path(args.build_fingerprints), readme=readme)
    print(f"wrote {FINGERPRINTS} ({count} fingerprints)")
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
