"""Rebuild the binary files of the demo class (images, .npy, the notebook and the zip).

The demo students' code and prose are plain files under demo/class/, written by hand.
Only what a person can't type (PNG/JPEG images, a .npy matrix, an .ipynb, a .zip) is made
here, once, and committed; grading never runs this. Run it again only to change the demo:

    .venv/bin/python demo/build_demo_files.py

Every output is byte-stable (no dates in PNG metadata, fixed zip timestamps, fixed cell ids).
"""
from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402
from PIL import Image  # noqa: E402

DEMO = Path(__file__).resolve().parent / "class"
ZIP_SOURCE = Path(__file__).resolve().parent / "zip_source"  # kim's text files; not a submission
NOTEBOOK_SOURCE = Path(__file__).resolve().parent / "notebook_source"  # jun's cells; not a submission
ZIP_TIME = (2026, 11, 27, 23, 58, 0)  # handed in two minutes before a midnight deadline

# student -> (sentence, seed, colour map, write the .npy too)
HEATMAPS = {
    "ada_reference": ("The cat sat on the mat", 3, "viridis", True),
    "ben_einsum": ("the animal was too tired to cross", 11, "magma", True),
    "chloe_no_scale": ("I love attention and transformers", 5, "viridis", False),
    "emil_heads_no_transpose": ("Dogs chase cats in the garden", 8, "Blues", True),
    "farah_pe_swapped": ("river bank versus bank loan", 2, "plasma", False),
    "gabe_ln_swapped": ("The model reads every token at once", 21, "cividis", True),
    "hana_partial": ("Man bites the dog", 4, "viridis", False),
    "leo_syntax_error": ("GPT predicts the next word", 9, "inferno", True),
    "mia_infinite_loop": ("Queries ask and keys answer", 6, "viridis", False),
}
# student -> (file name, box colour, drawing style): each student draws the block their own way, so
# no two diagrams look alike to the similarity check (only noah's copied heatmap should).
DIAGRAMS = {
    "ada_reference": ("transformer_block.png", "#cfe2f3", "column"),
    "chloe_no_scale": ("transformer_block.png", "#fce5cd", "row"),
    "dev_softmax_axis": ("transformer_block.png", "#d9ead3", "pre_ln"),
    "farah_pe_swapped": ("transformer_block.png", "#ead1dc", "stack"),
    "gabe_ln_swapped": ("transformer_block.jpg", "#fff2cc", "dark"),
    "leo_syntax_error": ("transformer_block.png", "#d0e0e3", "zigzag"),
    "mia_infinite_loop": ("transformer_block.png", "#cfe2f3", "sketch"),
}


def attention_weights(sentence: str, seed: int) -> np.ndarray:
    """Untrained self-attention over toy embeddings: softmax(X Xᵀ / √d), as in handout §4 with W = I."""
    tokens = sentence.split()
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(len(tokens), 8))  # (T, d)
    scores = X @ X.T / np.sqrt(X.shape[1])  # (T, T)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)  # rows sum to 1


def png_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def heatmap(sentence: str, weights: np.ndarray, cmap: str) -> bytes:
    tokens = sentence.split()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    image = ax.imshow(weights, cmap=cmap, vmin=0, vmax=float(weights.max()))
    ax.set_xticks(range(len(tokens)), tokens, rotation=45)
    ax.set_yticks(range(len(tokens)), tokens)
    ax.set_xlabel("Key (attended to)")
    ax.set_ylabel("Query (attending)")
    fig.colorbar(image, label="attention weight")
    ax.set_title("Self-attention weights (untrained)")
    fig.tight_layout()
    return png_bytes(fig)


STAGES = [  # (label, shape) of the handout §12 block, Post-LN
    ("Input x = embeddings + positions", "(B, T, d_model)"),
    ("Multi-Head Attention", "(B, T, d_model)"),
    ("Add & LayerNorm", "x + Attn(x)"),
    ("Feed-Forward\nLinear → GELU → Linear", "d_model → 4·d_model → d_model"),
    ("Add & LayerNorm", "x + FFN(x)"),
    ("Output", "(B, T, d_model), stack N times"),
]
PRE_LN_STAGES = [
    ("x", "(B, T, d_model)"),
    ("LayerNorm", "ln1"),
    ("Multi-Head Attention", "(B, T, d_model)"),
    ("+ x", "residual"),
    ("LayerNorm", "ln2"),
    ("FFN: Linear, GELU, Linear", "(B, T, 4·d) then (B, T, d)"),
    ("+", "residual"),
    ("out", "(B, T, d_model)"),
]


def block_diagram(colour: str, style: str = "column") -> bytes:
    """The handout §12 block with the shapes beside each stage, drawn in one student's style:
    column (the handout's, top to bottom), row (left to right), pre_ln (the Pre-LN order, bottom
    to top), stack (boxes of growing width), dark (light on black), zigzag (two columns), sketch
    (a wide page, stages as ellipses around a circle)."""
    if style == "row":
        fig, ax = plt.subplots(figsize=(9.6, 3.0))
        ax.set_xlim(0, 24)
        ax.set_ylim(0, 6)
        places = [(2 + 4 * n, 3.2) for n in range(len(STAGES))]
    elif style == "pre_ln":
        fig, ax = plt.subplots(figsize=(3.6, 7.2))
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 18)
        places = [(5.0, 1.2 + 2.2 * n) for n in range(len(PRE_LN_STAGES))]
    elif style == "zigzag":
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        ax.set_xlim(0, 16)
        ax.set_ylim(0, 12)
        places = [(4.0 if n % 2 == 0 else 12.0, 10.5 - 1.8 * n) for n in range(len(STAGES))]
    elif style == "sketch":
        fig, ax = plt.subplots(figsize=(8.0, 5.0))
        ax.set_xlim(-10, 10)
        ax.set_ylim(-6.5, 6.5)
        angles = np.linspace(np.pi / 2, np.pi / 2 - 2 * np.pi, len(STAGES), endpoint=False)
        places = [(7.0 * np.cos(a), 4.6 * np.sin(a)) for a in angles]
    else:
        fig, ax = plt.subplots(figsize=(4.6, 6.4))
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 14)
        places = [(4.0, y) for y in (12.6, 10.4, 8.4, 6.2, 4.0, 1.8)]
    ax.axis("off")
    ink = "black"
    if style == "dark":
        fig.patch.set_facecolor("black")
        ink = "white"
    stages = PRE_LN_STAGES if style == "pre_ln" else STAGES
    for n, ((x, y), (label, shape)) in enumerate(zip(places, stages)):
        width = {"row": 3.4, "pre_ln": 7.6, "zigzag": 6.6, "sketch": 5.2}.get(style, 5.6)
        if style == "stack":
            width = 3.0 + 0.8 * n
        if style == "sketch":
            from matplotlib.patches import Ellipse
            ax.add_patch(Ellipse((x, y), width, 2.0, facecolor=colour, edgecolor=ink, linewidth=2))
        else:
            ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.55), width, 1.1, boxstyle="round,pad=0.1",
                                        facecolor="black" if style == "dark" else colour, edgecolor=ink))
        ax.text(x, y, label, ha="center", va="center", fontsize=7 if style == "row" else 8, color=ink)
        ax.text(x, y - 0.85, shape, ha="center", va="center", fontsize=6.5,
                color="#bbb" if style == "dark" else "#444")
    for (x0, y0), (x1, y1) in zip(places, places[1:]):
        if style == "zigzag":  # from the side of one box to the facing side of the next
            x0, x1 = (7.4, 8.6) if x0 < x1 else (8.6, 7.4)
        shrink = {"zigzag": 2, "sketch": 30}.get(style, 14)
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops={"arrowstyle": "->", "color": ink, "shrinkA": shrink, "shrinkB": shrink})
    if style in ("column", "stack", "dark"):
        for top, bottom in ((12.6, 8.4), (8.4, 4.0)):  # the two residual paths
            ax.plot([6.9, 8.6, 8.6, 6.9], [top - 0.3, top - 0.3, bottom, bottom], color="#c00")
            ax.text(8.8, (top + bottom) / 2, "residual", rotation=90, va="center", fontsize=7, color="#c00")
    title = "Pre-LN block (ln before each sublayer)" if style == "pre_ln" else "Transformer block (handout §12)"
    ax.set_title(title, fontsize=9, color=ink)
    return png_bytes(fig)


def write_deliverables() -> None:
    for student, (sentence, seed, cmap, with_npy) in HEATMAPS.items():
        weights = attention_weights(sentence, seed)
        (DEMO / student / "attention_heatmap.png").write_bytes(heatmap(sentence, weights, cmap))
        if with_npy:
            np.save(DEMO / student / "attention_weights.npy", weights.astype(np.float32))
    for student, (name, colour, style) in DIAGRAMS.items():
        data = block_diagram(colour, style)
        if name.endswith(".jpg"):
            buffer = io.BytesIO()
            Image.open(io.BytesIO(data)).convert("RGB").save(buffer, format="JPEG", quality=85)
            data = buffer.getvalue()
        (DEMO / student / name).write_bytes(data)
    # dev exported the heatmap before the figure was drawn: a white square
    blank = io.BytesIO()
    Image.new("RGB", (400, 400), "white").save(blank, format="PNG")
    (DEMO / "dev_softmax_axis" / "attention_heatmap.png").write_bytes(blank.getvalue())
    # noah copied ada's heatmap rather than making one
    (DEMO / "noah_cheater" / "attention_heatmap.png").write_bytes(
        (DEMO / "ada_reference" / "attention_heatmap.png").read_bytes())


def write_zip() -> None:
    """kim hands in a zip of her folder `day13/`: her own correct code, no block diagram."""
    files = {f"day13/{m}.py": (ZIP_SOURCE / f"{m}.py").read_text()
             for m in ("self_attention", "multihead", "positional", "block")}
    files["day13/README.md"] = (ZIP_SOURCE / "README.md").read_text()
    files["day13/analysis.md"] = (ZIP_SOURCE / "analysis.md").read_text()
    weights = attention_weights("She poured water into the glass", 14)
    files["day13/attention_heatmap.png"] = heatmap("She poured water into the glass", weights, "viridis")
    with zipfile.ZipFile(DEMO / "kim_zip.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            data = files[name]
            archive.writestr(info, data.encode() if isinstance(data, str) else data)


def write_notebook() -> None:
    """jun works in Colab: the four modules as cells of one notebook, plus magics and a pip line."""
    def code(source: str, n: int):
        cell = nbformat.v4.new_code_cell(source.strip("\n"))
        cell["id"] = f"jun-{n:02d}"
        return cell

    def markdown(source: str, n: int):
        cell = nbformat.v4.new_markdown_cell(source.strip("\n"))
        cell["id"] = f"jun-{n:02d}"
        return cell

    def body(module: str) -> str:
        # In one notebook the modules share a namespace, so the cross-module imports go.
        text = (NOTEBOOK_SOURCE / f"{module}.py").read_text()
        return re.sub(r"^from (self_attention|multihead) import .*\n", "", text, flags=re.M)

    cells = [
        markdown("# Day 13 · Attention & Transformers\nJun's notebook (Colab).", 0),
        code("!pip install -q torch matplotlib\n%matplotlib inline", 1),
        markdown("## 1. Scaled dot-product attention", 2),
        code(body("self_attention"), 3),
        code("out, w = scaled_dot_product_attention(torch.eye(2), torch.eye(2), torch.tensor([[1., 2.], [3., 4.]]))\n"
             "print(w)  # should be [[0.67, 0.33], [0.33, 0.67]]", 4),
        markdown("## 2. Multi-head attention", 5),
        code(body("multihead"), 6),
        markdown("## 3. Positional encoding", 7),
        code(body("positional"), 8),
        code("%time pe = positional_encoding(50, 16)\nprint(pe[1, :4])", 9),
        markdown("## 4. The block", 10),
        code(body("block"), 11),
        code("import matplotlib.pyplot as plt\n"
             "x = torch.randn(1, 6, 16)\n"
             "out, w = SelfAttention(16, 16)(x)\n"
             "plt.imshow(w[0].detach(), cmap='viridis'); plt.colorbar(); plt.show()", 12),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}}
    nbformat.validate(notebook)
    (DEMO / "jun_notebook.ipynb").write_text(nbformat.writes(notebook) + "\n")


if __name__ == "__main__":
    write_deliverables()
    write_zip()
    write_notebook()
    print(f"demo binaries written under {DEMO}")
