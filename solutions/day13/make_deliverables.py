"""Rebuild the reference deliverables in this folder with the student tools.

    .venv/bin/python solutions/day13/make_deliverables.py

- attention_heatmap.png, attention_weights.npy: assignments/day13/tools/heatmap.py run on this
  folder's reference SelfAttention, MODE=trained (the toy 'previous token' task), default sentence;
- transformer_block.png: the Post-LN block of handout §12, drawn with matplotlib, labelled with shapes.

analysis.md and README.md are written by hand; analysis.md quotes weights from the .npy, and a
test (tests/day13/test_deliverable_checks.py) checks that the quoted numbers still match it.
Deterministic: the same torch and matplotlib give the same files.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent.parent / "assignments" / "day13" / "tools"
SENTENCE = "The cat sat on the mat"
MODE = "trained"

# (label, shape note, face colour) from the input up; the Post-LN order of handout §12.
BLOCKS = [
    ("Input x = token embeddings + positional encoding", "(B, T, d_model)", "#e8e8e8"),
    ("Multi-Head Attention\nh heads, d_k = d_model / h, concat → W_O", "(B, T, d_model)", "#fbd5a5"),
    ("Add (residual): x + MHA(x)", "(B, T, d_model)", "#ffffff"),
    ("LayerNorm (ln1)", "(B, T, d_model)", "#d9ead3"),
    ("Feed-Forward Network\nLinear d_model → 4·d_model, GELU, Linear 4·d_model → d_model",
     "(B, T, 4·d_model) inside", "#a9d0f5"),
    ("Add (residual): x + FFN(x)", "(B, T, d_model)", "#ffffff"),
    ("LayerNorm (ln2)", "(B, T, d_model)", "#d9ead3"),
    ("Output → next block (stack N times)", "(B, T, d_model)", "#e8e8e8"),
]


def draw_block_diagram(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(7.5, 9.5), dpi=100)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, len(BLOCKS) * 1.2 + 0.6)
    ax.axis("off")
    width, height, left = 5.6, 0.8, 1.0
    centres = []
    for n, (label, shape, colour) in enumerate(BLOCKS):
        y = 0.5 + n * 1.2  # bottom of box n; the input sits at the bottom, data flows up
        ax.add_patch(FancyBboxPatch((left, y), width, height, boxstyle="round,pad=0.05",
                                    facecolor=colour, edgecolor="black", linewidth=1.2))
        ax.text(left + width / 2, y + height / 2, label, ha="center", va="center", fontsize=8.5)
        ax.text(left + width + 0.25, y + height / 2, shape, ha="left", va="center", fontsize=8, color="#333333")
        centres.append(y)
        if n:
            ax.annotate("", xy=(left + width / 2, y), xytext=(left + width / 2, y - 1.2 + height),
                        arrowprops=dict(arrowstyle="->", linewidth=1.2))
    # Residual paths: from the sublayer's input around the sublayer into its Add.
    for source, add in ((0, 2), (3, 5)):
        x_side = left - 0.45
        y_from, y_to = centres[source] + height / 2, centres[add] + height / 2
        ax.plot([left, x_side, x_side], [y_from, y_from, y_to], color="#c0392b", linewidth=1.4)
        ax.annotate("", xy=(left, y_to), xytext=(x_side, y_to),
                    arrowprops=dict(arrowstyle="->", color="#c0392b", linewidth=1.4))
        ax.text(x_side - 0.1, (y_from + y_to) / 2, "residual", rotation=90, ha="right", va="center",
                fontsize=8, color="#c0392b")
    ax.set_title("Transformer block (Post-LN, handout §12)\n"
                 "Pre-LN (modern LLMs): x + MHA(LN(x)), then x + FFN(LN(x))", fontsize=10)
    fig.tight_layout()
    # No version stamp in a PNG, so a rebuild with the same libraries gives the same bytes.
    fig.savefig(path, metadata={"Software": None} if Path(path).suffix == ".png" else None)
    plt.close(fig)


def main() -> int:
    sys.path.insert(0, str(TOOLS))
    import heatmap

    heatmap.make_heatmap(folder=HERE, sentence=SENTENCE, mode=MODE)
    draw_block_diagram(HERE / "transformer_block.png")
    print(f"wrote attention_heatmap.png, attention_weights.npy and transformer_block.png in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
