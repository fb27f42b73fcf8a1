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
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "day13"
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
DIAGRAMS = {  # student -> (file name, box colour)
    "ada_reference": ("transformer_block.png", "#cfe2f3"),
    "chloe_no_scale": ("transformer_block.png", "#fce5cd"),
    "dev_softmax_axis": ("transformer_block.png", "#d9ead3"),
    "farah_pe_swapped": ("transformer_block.png", "#ead1dc"),
    "gabe_ln_swapped": ("transformer_block.jpg", "#fff2cc"),
    "leo_syntax_error": ("transformer_block.png", "#d0e0e3"),
    "mia_infinite_loop": ("transformer_block.png", "#cfe2f3"),
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


def block_diagram(colour: str) -> bytes:
    """The handout §12 block, Post-LN, with the shapes beside each stage."""
    fig, ax = plt.subplots(figsize=(4.6, 6.4))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 14)
    ax.axis("off")
    stages = [  # (y, label, shape)
        (12.6, "Input x = embeddings + positions", "(B, T, d_model)"),
        (10.4, "Multi-Head Attention", "(B, T, d_model)"),
        (8.4, "Add & LayerNorm", "x + Attn(x)"),
        (6.2, "Feed-Forward\nLinear → GELU → Linear", "d_model → 4·d_model → d_model"),
        (4.0, "Add & LayerNorm", "x + FFN(x)"),
        (1.8, "Output", "(B, T, d_model), stack N times"),
    ]
    for y, label, shape in stages:
        ax.add_patch(FancyBboxPatch((1.2, y - 0.55), 5.6, 1.1, boxstyle="round,pad=0.1",
                                    facecolor=colour, edgecolor="black"))
        ax.text(4.0, y, label, ha="center", va="center", fontsize=8)
        ax.text(4.0, y - 0.85, shape, ha="center", va="center", fontsize=6.5, color="#444")
    for (y0, *_), (y1, *_) in zip(stages, stages[1:]):
        ax.annotate("", xy=(4.0, y1 + 0.7), xytext=(4.0, y0 - 1.0), arrowprops={"arrowstyle": "->"})
    for top, bottom in ((12.6, 8.4), (8.4, 4.0)):  # the two residual paths
        ax.plot([6.9, 8.6, 8.6, 6.9], [top - 0.3, top - 0.3, bottom, bottom], color="#c00")
        ax.text(8.8, (top + bottom) / 2, "residual", rotation=90, va="center", fontsize=7, color="#c00")
    ax.set_title("Transformer block (Post-LN, handout §12)", fontsize=9)
    return png_bytes(fig)


def write_deliverables() -> None:
    for student, (sentence, seed, cmap, with_npy) in HEATMAPS.items():
        weights = attention_weights(sentence, seed)
        (DEMO / student / "attention_heatmap.png").write_bytes(heatmap(sentence, weights, cmap))
        if with_npy:
            np.save(DEMO / student / "attention_weights.npy", weights.astype(np.float32))
    for student, (name, colour) in DIAGRAMS.items():
        data = block_diagram(colour)
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


def reference_code(module: str) -> str:
    text = (SOLUTIONS / f"{module}.py").read_text()
    return "".join(line for line in text.splitlines(keepends=True) if "SOLUTION (" not in line)


def write_zip() -> None:
    """kim hands in a zip of her folder `day13/`: reference-quality code, no block diagram."""
    files = {f"day13/{m}.py": reference_code(m) for m in ("self_attention", "multihead", "positional", "block")}
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
        text = reference_code(module)
        text = re.sub(r'^""".*?"""\n', "", text, count=1, flags=re.S)
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
