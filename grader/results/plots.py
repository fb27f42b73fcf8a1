"""The class report's pictures, under OUT/_plots/: the score histogram, the pass rate per test, and
heatmaps of the evidence of failing tests, expected beside the student's.

The evidence is a record's `evidence` (small matrices the hidden tests keep), drawn only for the
parts the lesson names (lesson.toml, [report] evidence_components) and labelled in the lesson's
words ([report] evidence_axes), at most MAX_HEATMAPS per class, one per misconception first. Student
text in a picture (a name in a title) is never parsed as mathtext. The same data gives the same PNG bytes.
"""
from __future__ import annotations

import io
import shutil
from pathlib import Path

from grader.results.document import number
from grader.results.records import SubmissionResult
from grader.results.storage import PLOTS, write_atomic

MAX_HEATMAPS = 8  # drawn per class report; a 200-student class must not spend its time plotting
MAX_MATRIX_SIDE = 64  # larger evidence is not a lesson-sized matrix: skipped


# ---------------------------------------------------------------- evidence -> heatmaps


def _matrix(value) -> list[list[float]] | None:
    """A 2-D list of finite-or-not numbers, from whatever nesting the evidence uses; else None."""
    while isinstance(value, list) and value and isinstance(value[0], list) and value[0] \
            and isinstance(value[0][0], list):
        value = value[0]  # leading batch / head dims: show the first slice
    if not (isinstance(value, list) and value and all(isinstance(row, list) for row in value)):
        return None
    width = len(value[0])
    if not (0 < width <= MAX_MATRIX_SIDE and len(value) <= MAX_MATRIX_SIDE):
        return None
    rows = []
    for row in value:
        if len(row) != width:
            return None
        try:
            rows.append([float(x) for x in row])
        except (TypeError, ValueError):
            return None
    return rows


def _evidence_items(evidence) -> list[dict]:
    """Every {"expected", "got"} pair in a record's evidence, whatever its nesting (one level deep)."""
    items = []
    if isinstance(evidence, dict) and "expected" in evidence and "got" in evidence:
        items.append(evidence)
    elif isinstance(evidence, dict):
        for key in sorted(evidence, key=str):
            value = evidence[key]
            if isinstance(value, dict) and "expected" in value and "got" in value:
                items.append({"test": key, **value})
    elif isinstance(evidence, list):
        items += [v for v in evidence if isinstance(v, dict) and "expected" in v and "got" in v]
    return items


def evidence_candidates(records: list[SubmissionResult], components) -> dict:
    """Pick the pairs to draw: failing tests of the lesson's evidence `components` only; one per
    misconception first."""
    chosen, rest = [], []
    seen_hints = set()
    for r in records:
        status = {t.name: t for t in r.tests}
        for item in _evidence_items(r.evidence):
            expected, got = _matrix(item.get("expected")), _matrix(item.get("got"))
            if expected is None or got is None or len(expected) != len(got) or len(expected[0]) != len(got[0]):
                continue
            test = str(item.get("test", ""))
            t = status.get(test)
            if t is not None and (t.status == "passed" or t.component not in components):
                continue
            entry = {"submission": r.submission, "test": test, "expected": expected, "got": got,
                     "hint_id": t.hint_id if t else None, "title": (t.title if t else "") or test}
            new_hint = entry["hint_id"] not in seen_hints
            seen_hints.add(entry["hint_id"])
            (chosen if new_hint else rest).append(entry)
            break  # one picture per student is enough for a class report
    picked = (chosen + rest)[:MAX_HEATMAPS]
    picked.sort(key=lambda e: e["submission"])
    return {"picked": picked, "available": len(chosen) + len(rest)}


# ---------------------------------------------------------------- plots


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9})
    return plt


def _save(fig, path: Path) -> None:
    buffer = io.BytesIO()
    # No Software/date chunks: the same data gives the same bytes.
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    write_atomic(path, buffer.getvalue())


def _safe_file(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:60] or "submission"
    return f"{keep}-{hash_text(name):08x}"


def hash_text(text: str) -> int:
    """A stable hash (Python's hash() is salted per process)."""
    value = 2166136261
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * 16777619) % 2**32
    return value


def write_plots(out_dir: Path, records: list[SubmissionResult], stats: dict, *, lesson) -> dict:
    """Histogram, pass rates and the evidence heatmaps; returns {name: relative path}. Old plots are replaced."""
    folder = out_dir / PLOTS
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    folder.mkdir()
    plots = {"evidence": []}
    if not records:
        return plots
    plt = pyplot()

    top = stats["max_total"] or max(stats["totals"], default=1.0) or 1.0
    fig, ax = plt.subplots(figsize=(6, 3))
    bins = [top * i / 10 for i in range(11)]
    ax.hist([min(max(t, 0.0), top) for t in stats["totals"]], bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"total score (out of {number(top)})")
    ax.set_ylabel("submissions")
    ax.set_title(f"Score distribution ({stats['n']} submissions)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.88, bottom=0.17)
    _save(fig, folder / "histogram.png")
    plt.close(fig)
    plots["histogram"] = f"{PLOTS}/histogram.png"

    if stats["tests"]:
        names = [t["name"] for t in stats["tests"]][::-1]
        counts = [f"{t['passed']}/{t['graded']}" for t in stats["tests"]][::-1]
        rates = [100 * t["passed"] / t["graded"] for t in stats["tests"]][::-1]
        height = 1.0 + 0.22 * len(names)
        fig, ax = plt.subplots(figsize=(7, height))
        fig.subplots_adjust(left=0.36, right=0.97, top=1 - 0.35 / height, bottom=0.45 / height)
        ax.barh(range(len(names)), rates, color=["#55a868" if r >= 50 else "#c44e52" for r in rates])
        for y, (rate, count) in enumerate(zip(rates, counts)):
            inside = rate > 85  # no room to the right of a long bar: write on it
            ax.text(rate - 1 if inside else rate + 1, y, count, va="center", fontsize=7,
                    ha="right" if inside else "left", color="white" if inside else "black")
        ax.set_yticks(range(len(names)), names, fontsize=7, parse_math=False)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of submissions passing")
        ax.set_title("Pass rate per test")
        _save(fig, folder / "pass_rates.png")
        plt.close(fig)
        plots["pass_rates"] = f"{PLOTS}/pass_rates.png"

    for entry in stats["evidence"]["picked"]:
        name = f"heatmap-{_safe_file(entry['submission'])}.png"
        _heatmap(plt, entry, folder / name, lesson.evidence)
        plots["evidence"].append((entry, f"{PLOTS}/{name}"))
    return plots


def _heatmap(plt, entry: dict, path: Path, words) -> None:
    """Expected beside got, axes and colour bar labelled in the lesson's `words` (lesson.Evidence)."""
    import numpy as np

    expected = np.array(entry["expected"], dtype=float)
    got = np.nan_to_num(np.array(entry["got"], dtype=float), nan=0.0, posinf=1.0, neginf=0.0)
    low, high = min(0.0, float(got.min())), max(1.0, float(got.max()), float(expected.max()))
    rows, cols = expected.shape
    # Fixed axes positions: a layout engine costs more than the drawing at this size.
    fig = plt.figure(figsize=(7, 3.8))
    axes = [fig.add_axes((0.07, 0.16, 0.36, 0.68)), fig.add_axes((0.50, 0.16, 0.36, 0.68))]
    for ax, matrix, label in ((axes[0], expected, "expected"), (axes[1], got, "student")):
        image = ax.imshow(matrix, cmap="viridis", vmin=low, vmax=high)
        ax.set_title(label)
        ax.set_xlabel(words.x_label, parse_math=False)
        ax.set_ylabel(words.y_label, parse_math=False)
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        if rows * cols <= 64:  # small enough to print the numbers a student can check by hand
            for (i, j), value in np.ndenumerate(matrix):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value < (low + high) / 2 else "black")
    fig.colorbar(image, cax=fig.add_axes((0.89, 0.16, 0.02, 0.68)), label=words.value_label)
    # Untrusted text: parse_math=False so "$...$" in a name is never fed to mathtext.
    title = f"{entry['submission']}: {entry['test'] or entry['title']}"
    fig.suptitle(title if len(title) <= 80 else title[:79] + "…", fontsize=10, parse_math=False)
    _save(fig, path)
    plt.close(fig)

