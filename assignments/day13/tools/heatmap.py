"""`make heatmap`: run YOUR SelfAttention on a sentence and save its attention heatmap (handout §5).

    make heatmap                                   # "The cat sat on the mat", your module as initialised
    make heatmap SENTENCE="The dog chased the ball"
    make heatmap MODE=trained                      # option B: trained for a second on a toy task
    make heatmap MODE=handset                      # option B: hand-set Q/K as in the §4 example

Writes attention_heatmap.png and attention_weights.npy into your folder (the deliverables the
checker looks for). The sentence is split into words and punctuation; each word gets a fixed toy
embedding (the same word always gets the same vector) plus a fixed vector for its position.

Modes (handout §5, "Analyzing one sentence"):
  random   your SelfAttention with its initial random weights (seed 0). The pattern is arbitrary:
           say so in analysis.md.
  trained  your SelfAttention trained for about a second on a toy task: every token must output
           the vector of the token just before it. Attention has to learn to look one step back.
  handset  one-hot word embeddings and W_q = W_k = a scaled identity, like §4's Q = K: each token
           attends to itself and to other copies of the same word.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import os
import re
import sys
import traceback
from pathlib import Path

import numpy as np

DEFAULT_SENTENCE = "The cat sat on the mat"
MODES = ("random", "trained", "handset")
MAX_TOKENS = 32
D_MODEL = 16


class HeatmapError(Exception):
    """Something the student can fix; the message says what. Shown without a traceback."""


def tokenize(sentence: str) -> list[str]:
    """Words (with their apostrophes) and punctuation marks, the way a simple tokenizer splits text (§1.1)."""
    return re.findall(r"\w+(?:['’]\w+)*|[^\w\s]", sentence)


def word_vector(word: str, d_model: int):
    """A fixed random vector per word (case-insensitive), so a sentence always embeds the same way."""
    import torch

    seed = int.from_bytes(hashlib.blake2b(word.lower().encode(), digest_size=8).digest(), "big") % 2**63
    return torch.randn(d_model, generator=torch.Generator().manual_seed(seed))  # (d_model,)


def position_vectors(T: int, d_model: int):
    """A fixed random vector per position, so the same word at two places embeds differently.
    (Not the sinusoidal table of §8: that one is yours to write in positional.py.)"""
    import torch

    return torch.stack([word_vector(f"<position {t}>", d_model) for t in range(T)]) * 0.5  # (T, d_model)


def toy_embeddings(tokens: list[str], d_model: int = D_MODEL):
    import torch

    words = torch.stack([word_vector(t, d_model) for t in tokens])  # (T, d_model)
    return (words + position_vectors(len(tokens), d_model)).unsqueeze(0)  # (1, T, d_model)


# --------------------------------------------------------------------------- the student's module


def _from_notebook(folder: Path):
    """SelfAttention from the notebook's code cells, when the notebook is where the work is (the .py files
    still the released stubs, as tools/ci_feedback.py decides); None otherwise."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import ci_feedback
    except ImportError:
        return None
    finally:
        sys.path.pop(0)
    notebook = ci_feedback.notebook_submission(folder)
    if notebook is None:
        return None
    namespace: dict = {"__name__": "day13_notebook", "display": lambda *objects, **options: None}  # a kernel's builtin
    magics, flags = ci_feedback._magics(), 0  # the grader's reader of IPython syntax; __future__ as a kernel keeps it
    for grade_id, source in ci_feedback._code_cells(notebook):
        if grade_id.startswith("test_"):
            continue  # the test cells check the code; the heatmap only needs the definitions
        try:
            code, flags = magics.compile_cell(magics.neutralise_magics(source), f"{notebook.name} {grade_id}", flags)
            exec(code, namespace)  # noqa: S102
        except Exception as error:  # noqa: BLE001 - a failing cell is reported only if SelfAttention is missing
            namespace.setdefault("__errors__", []).append(f"{grade_id}: {type(error).__name__}: {error}")
    if "SelfAttention" not in namespace:
        problems = "; ".join(namespace.get("__errors__", [])) or "no cell defines it"
        raise HeatmapError(f"{notebook.name} has no class SelfAttention ({problems}). Run its cells in Jupyter and fix "
                           "the first error.")
    print(f"make heatmap: using SelfAttention from {notebook.name} (your .py files are still the released stubs)")
    return namespace["SelfAttention"]


def load_self_attention(folder: Path):
    """The student's SelfAttention class, imported from `folder` (or from its notebook, for a notebook student)."""
    from_notebook = _from_notebook(folder)
    if from_notebook is not None:
        return from_notebook
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("self_attention")
    except Exception as error:
        raise HeatmapError(f"self_attention.py failed to import: {type(error).__name__}: {error}\n"
                           f"{_where(error, folder)}Fix it (run `make test PART=self_attention`), then run make heatmap again.")
    if not hasattr(module, "SelfAttention"):
        raise HeatmapError("self_attention.py has no class SelfAttention: keep the name from the stub "
                           "(handout §5, student contract).")
    return module.SelfAttention


def _where(error: BaseException, folder: Path) -> str:
    """The last line of the student's own code in the traceback, so they know where to look."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if Path(frame.filename).resolve().parent == folder.resolve():
            return f"  at {Path(frame.filename).name}, line {frame.lineno}: {frame.line}\n"
    if isinstance(error, SyntaxError) and error.filename:
        return f"  at {Path(error.filename).name}, line {error.lineno}\n"
    return ""


def run_student(call, folder: Path, what: str):
    """Call the student's code; turn 'not implemented yet' and crashes into a short, fixable message."""
    try:
        return call()
    except NotImplementedError as error:
        raise HeatmapError(f"Your SelfAttention is not implemented yet ({error}).\n"
                           "make heatmap runs your own code: implement Task 1 (scaled_dot_product_attention) and "
                           "Task 3 (SelfAttention) in self_attention.py, check them with `make test PART=self_attention`, "
                           "then run make heatmap again.")
    except HeatmapError:
        raise
    except Exception as error:
        raise HeatmapError(f"Your SelfAttention raised {type(error).__name__} while {what}: {error}\n"
                           f"{_where(error, folder)}Run `make test PART=self_attention` to find the bug.")


def attention_weights(attn, x, folder: Path):
    """(T, T) weights from the student's forward, after checking what it returned."""
    import torch

    result = run_student(lambda: attn(x), folder, "running forward(x)")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise HeatmapError("SelfAttention.forward must return (out, weights) (handout §5); it returned "
                           f"{type(result).__name__}.")
    weights = result[1]
    T = x.shape[1]
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (1, T, T):
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise HeatmapError(f"SelfAttention.forward returned weights of shape {shape}; for x of shape "
                           f"{tuple(x.shape)} they should be (1, {T}, {T}): one row per query token.")
    return weights[0].detach().to(torch.float64).numpy()  # (T, T)


def _linear(attn, *names):
    for name in names:
        layer = getattr(attn, name, None)
        if layer is not None and hasattr(layer, "weight"):
            return layer
    raise HeatmapError(f"MODE=handset sets your projections by name and needs the attribute {names[0]} "
                       f"(or {names[1]}) holding an nn.Linear, as in the student contract.")


# --------------------------------------------------------------------------- the three modes


def random_weights(SelfAttention, tokens, folder):
    import torch

    torch.manual_seed(0)
    attn = run_student(lambda: SelfAttention(D_MODEL, D_MODEL), folder, "being built")
    with torch.no_grad():
        return attention_weights(attn, toy_embeddings(tokens), folder)


def handset_weights(SelfAttention, tokens, folder):
    """§4 with a twist: one-hot word embeddings and Q = K = c·x, so a token's query matches its own
    key and the keys of the same word elsewhere in the sentence, and nothing else."""
    import torch

    vocab = sorted({t.lower() for t in tokens})
    d = max(4, len(vocab))
    x = torch.zeros(1, len(tokens), d)  # (1, T, d)
    for t, token in enumerate(tokens):
        x[0, t, vocab.index(token.lower())] = 1.0
    attn = run_student(lambda: SelfAttention(d, d), folder, "being built")
    # c² / √d = 3: a matching word scores 3, any other 0, so a match gets e³ ≈ 20 times the weight.
    c = math.sqrt(3 * math.sqrt(d))
    with torch.no_grad():
        _linear(attn, "W_q", "Wq").weight.copy_(c * torch.eye(d))
        _linear(attn, "W_k", "Wk").weight.copy_(c * torch.eye(d))
        _linear(attn, "W_v", "Wv").weight.copy_(torch.eye(d))
        return attention_weights(attn, x, folder)


def trained_weights(SelfAttention, tokens, folder, steps: int = 200):
    """Train the student's module so each token outputs the content of the token before it.

    Input = [content (P dims) | one-hot position (P dims)]; the target for token t is the content
    of token t-1 (token 0 copies itself). Random contents each step, so the only way to succeed is
    to attend by position, one step back: a 'previous token' head.
    """
    import torch

    T = len(tokens)
    P = max(16, T)
    torch.manual_seed(0)
    attn = run_student(lambda: SelfAttention(2 * P, P), folder, "being built")
    params = [p for p in attn.parameters() if p.requires_grad]
    if not params:
        raise HeatmapError("MODE=trained found no trainable parameters in your SelfAttention: W_q, W_k and W_v "
                           "should be nn.Linear layers (handout §5).")
    optimizer = torch.optim.Adam(params, lr=0.05)
    positions = torch.eye(P)[:T]  # (T, P)
    previous = torch.clamp(torch.arange(T) - 1, min=0)  # (T,)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        content = torch.randn(32, T, P, generator=generator)  # (32, T, P)
        x = torch.cat([content, positions.expand(32, T, P)], dim=-1)  # (32, T, 2P)
        result = run_student(lambda: attn(x), folder, "training")
        loss = ((result[0] - content[:, previous]) ** 2).mean()
        optimizer.zero_grad()
        run_student(loss.backward, folder, "computing gradients (keep forward inside autograd: no .detach())")
        optimizer.step()
    # The sentence itself: each word's toy vector as its content.
    content = torch.stack([word_vector(t, P) for t in tokens]).unsqueeze(0)  # (1, T, P)
    with torch.no_grad():
        x = torch.cat([content, positions.unsqueeze(0)], dim=-1)  # (1, T, 2P)
        return attention_weights(attn, x, folder)


NOTES = {
    "random": "These weights are random (your SelfAttention as initialised): the pattern is ARBITRARY. Say so in "
              "analysis.md, or run `make heatmap MODE=trained` or `MODE=handset` for a pattern that means something.",
    "trained": "Trained for a moment on a toy task (output the previous token's vector): each row should peak one "
               "token back. This is one head of one layer; name it in analysis.md.",
    "handset": "Hand-set Q and K (one-hot words, W_q = W_k = scaled identity, like §4): each token attends to "
               "itself and to other copies of the same word.",
}


# --------------------------------------------------------------------------- the picture


def save_heatmap(weights: np.ndarray, tokens: list[str], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T = len(tokens)
    side = max(6.0, 0.45 * T + 3)
    fig, ax = plt.subplots(figsize=(side, side * 0.85), dpi=100)
    image = ax.imshow(weights, cmap="viridis", vmin=0)
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(T), tokens)
    ax.set_xlabel("Key (attended to)")
    ax.set_ylabel("Query (attending)")
    if T <= 12:
        for i in range(T):
            for j in range(T):
                ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if weights[i, j] > 0.6 * weights.max() else "white")
    fig.colorbar(image, ax=ax, label="attention weight")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no version stamp: the same input gives the same file
    plt.close(fig)


def strongest_links(weights: np.ndarray, tokens: list[str], count: int = 3) -> list[str]:
    """The largest weights off the diagonal, as lines a student can check against the picture."""
    T = len(tokens)
    pairs = sorted(((weights[i, j], i, j) for i in range(T) for j in range(T) if i != j), reverse=True)[:count]
    return [f"'{tokens[i]}' (row {i}) -> '{tokens[j]}' (column {j}): {w:.2f}" for w, i, j in pairs]


def make_heatmap(*, folder: Path, sentence: str = DEFAULT_SENTENCE, mode: str = "random",
                 out: Path | None = None) -> np.ndarray:
    """Run the SelfAttention found in `folder`; write the PNG and the .npy into `out` (default: folder)."""
    if mode not in MODES:
        raise HeatmapError(f"MODE={mode!r} is not one of {', '.join(MODES)}.")
    tokens = tokenize(sentence)
    if not 2 <= len(tokens) <= MAX_TOKENS:
        raise HeatmapError(f"The sentence has {len(tokens)} tokens; use 4 to {MAX_TOKENS} (the checker needs at least 4).")
    import torch

    torch.set_num_threads(1)  # tiny matrices: threads only add start-up time
    SelfAttention = load_self_attention(folder)
    compute = {"random": random_weights, "trained": trained_weights, "handset": handset_weights}[mode]
    weights = compute(SelfAttention, tokens, folder)  # (T, T)
    if not np.isfinite(weights).all():
        raise HeatmapError("Your SelfAttention returned NaN or inf weights. Run `make test PART=self_attention`.")
    out = Path(out or folder)
    short = sentence if len(sentence) <= 50 else sentence[:47] + "..."
    save_heatmap(weights, tokens, f"Self-attention weights ({mode}): \"{short}\"", out / "attention_heatmap.png")
    np.save(out / "attention_weights.npy", weights.astype(np.float32))
    return weights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentence", default=os.environ.get("SENTENCE") or DEFAULT_SENTENCE)
    parser.add_argument("--mode", default=os.environ.get("MODE") or "random", choices=MODES)
    parser.add_argument("--folder", default=str(Path(__file__).resolve().parent.parent),
                        help="the folder with your self_attention.py (default: the student folder)")
    parser.add_argument("--out", default=None, help="where to write the files (default: the same folder)")
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    try:
        weights = make_heatmap(folder=folder, sentence=args.sentence, mode=args.mode, out=args.out)
    except HeatmapError as error:
        print(f"make heatmap: {error}", file=sys.stderr)
        return 2
    except ImportError as error:  # torch or matplotlib missing from this Python
        print(f"make heatmap needs torch and matplotlib ({error}). Install them as the README's set-up says, "
              "or run make with the Python that has them: make heatmap PYTHON=.venv/bin/python", file=sys.stderr)
        return 2
    tokens = tokenize(args.sentence)
    out = Path(args.out or folder)
    print(f"Wrote {out / 'attention_heatmap.png'} and {out / 'attention_weights.npy'} "
          f"({len(tokens)} tokens: {' | '.join(tokens)}).")
    if len(tokens) < 4:
        print("Note: the deliverables checker needs a sentence of at least 4 tokens.")
    print(NOTES[args.mode])
    print("Strongest links between different tokens (row attends to column):")
    for line in strongest_links(weights, tokens):
        print(f"  {line}")
    print("Write your own 4-5 line analysis.md from the picture, then run `make check`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
