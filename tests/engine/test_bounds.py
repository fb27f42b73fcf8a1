"""The grader's own bounds: hostile submissions aimed at its memory, time and scratch slots
(tests/fixtures/bounded/), graded in one class beside honest copies of the reference. The class is the toy
lesson's with its deliverables (tests/fixtures/lessons/toy, its deliverable_checks.py), each check worth points
in a copy of its rubric made here, so that the deliverable bombs get a verdict in the record.

The class is graded in a separate process whose address space, and that of every process it starts
(workers, zygote, deliverables checker), is limited to 2 GB (with the CPU build; what a larger torch build maps, plus the same headroom,
with another): a regression that lets an answer or a
file make the grader allocate without bound fails this test (a row goes missing or becomes an engine
error) instead of taking the machine down. Each hostile row states its reason; the honest rows, some
graded after the slot poisoner in its own slot, keep full marks.
"""
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import tomllib
import zlib
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import KIT, TOY, descendants, make_submission, processes_of, settled, uid_base_for_tests  # noqa: E402

from grader import lesson as lessons  # noqa: E402
from grader.judging import deliverables  # noqa: E402

BOUNDED = Path(__file__).resolve().parents[1] / "fixtures" / "bounded"
CODE = ("activations", "classifier")  # the toy's parts
WORDS = ("Softmax subtracts the largest logit of each row before exponentiating, which changes nothing in the "
         "result but keeps every exponential at most one, so large logits never overflow to infinity.\n")
# The toy's rubric plus a point or two for each of its deliverable checks (the toy itself declares none).
DELIVERABLES_RUBRIC = """
[deliverables.plot]
points = 2
title = "softmax_plot.png: a plot of softmax, not blank"
hint = "Plot softmax of a few rows and save it as softmax_plot.png."

[deliverables.notes]
points = 1
title = "notes.md: why softmax subtracts the maximum"
hint = "Write at least 20 words."

[deliverables.readme]
points = 1
title = "README.md: what the classifier outputs"
hint = "Write at least 20 words."
"""
UID_BASE = uid_base_for_tests(2)
JOBS = 2


def _torch_mapped() -> int:
    """Bytes of address space a process has mapped once it imported torch: ~0.65 GB with the CPU build,
    ~3.2 GB with PyPI's default (CUDA) build, whose libraries are mapped but never touched here."""
    done = subprocess.run([sys.executable, "-c", "import torch\nprint(next(l.split()[1] for l in "
                           "open('/proc/self/status') if l.startswith('VmSize:')))"],
                          capture_output=True, text=True, timeout=300, check=True)
    return int(done.stdout.split()[-1]) * 1024


def memory_limit() -> int:
    """2 GB with the CPU build; with a torch build that maps more, what it maps plus the same 1.4 GB of headroom.
    Measured when the class is graded, not at collection: every worker of a parallel run collects this file."""
    return max(2 << 30, _torch_mapped() + (1400 << 20))


def rubric_text() -> str:
    return (TOY / "rubric.toml").read_text(encoding="utf-8") + DELIVERABLES_RUBRIC


def honest_total() -> float:
    """Every point of the toy's rubric with its deliverables: what an honest row gets."""
    rubric = tomllib.loads(rubric_text())
    return sum(lessons.rubric_points(rubric, lessons.rubric_components(rubric)).values())


# Honest rows: one first, three after every hostile one (so the poisoned slot grades one of them next).
HONEST = ("aaa_reference", "zzz_reference_1", "zzz_reference_2", "zzz_reference_3")

GRADE = """
import dataclasses, sys
from pathlib import Path
from grader.lesson import load_lesson
from grader.running import grade as run
from grader.sandbox import SandboxConfig
# 10 s a call: the slot poisoner builds its 10,000 folders at import, on a machine that may be busy.
config = SandboxConfig(call_timeout=10.0, cpu_seconds=20, uid_base=int(sys.argv[3]))
toy = Path(sys.argv[5])
lesson = dataclasses.replace(load_lesson(str(toy)), deliverables_checks=toy / "deliverable_checks.py",
                             rubric_path=Path(sys.argv[6]))
sys.exit(run.main(submissions=sys.argv[1], out=sys.argv[2], jobs=int(sys.argv[4]), config=config, lesson=lesson))
"""


def _include(text: str) -> str:
    return re.sub(r"^# @@INCLUDE (\S+)$", lambda m: (BOUNDED / m.group(1)).resolve().read_text(), text, flags=re.M)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def honest_plot() -> bytes:
    """A 320x240 RGB PNG of gradients: many colours, ink everywhere (what the toy's plot check accepts)."""
    import numpy as np

    rows = np.linspace(0, 255, 240, dtype=np.uint8)[:, None].repeat(320, axis=1)
    buffer = __import__("io").BytesIO()
    Image.fromarray(np.stack([rows, rows[::-1], np.full_like(rows, 90)], axis=-1), "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def png_with_a_second_header() -> bytes:
    """The honest plot plus a second IHDR, after the pixels, claiming 2**30 x 2**30 pixels:
    Pillow reads the first, a chunk walker that believed the last would allocate exabytes."""
    data = honest_plot()
    end = data.rindex(b"IEND") - 4
    huge = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1 << 30, 1 << 30, 8, 6, 0, 0, 0))
    return data[:end] + huge + data[end:]


def png_bomb() -> bytes:
    """7000 x 7000 white pixels (49 megapixels, just under the checker's cap) in ~200 KB: 196 MB decoded."""
    path = Path(tempfile.mkstemp(suffix=".png")[1])
    try:
        Image.new("RGBA", (7000, 7000), "white").save(path, compress_level=9)
        return path.read_bytes()
    finally:
        path.unlink()


# Deliverables built against the checker: (file written, files removed, the check it is judged by).
DELIVERABLE_BOMBS = {
    "png_second_header": ({"softmax_plot.png": png_with_a_second_header}, (), "plot"),
    "png_bomb": ({"softmax_plot.png": png_bomb}, (), "plot"),
    # Without a closing "-->" each "<!--" used to make the README's code filter (kit.prose) scan to the end.
    "readme_comment_bomb": ({"README.md": lambda: b"Softmax Logits Classifier " + b"<!--" * 60_000}, (), "readme"),
    # Lines of spaces: "^\s*" at every line start (kit.text_lines) used to scan every later line too.
    "notes_blank_bomb": ({"notes.md": lambda: b"'max' 0.42 row\n" + b"   \n" * 60_000}, (), "notes"),
    # Many DOCTYPEs with no ">": the entity check used to scan to the end from each of them.
    "svg_doctype_bomb": ({"softmax_plot.svg": lambda: b"<svg>" + b"<!DOCTYPE " * 500_000},
                         ("softmax_plot.png",), "plot"),
}


def build_class(root: Path) -> Path:
    subs = root / "submissions"

    def honest(name):
        folder = make_submission(subs / name, solutions=TOY / "solutions")
        (folder / "softmax_plot.png").write_bytes(honest_plot())
        for f in ("notes.md", "README.md"):
            (folder / f).write_text(WORDS)
        return folder

    for name in HONEST:
        honest(name)
    for case in sorted(p for p in BOUNDED.iterdir() if p.is_dir()):
        folder = honest(case.name)
        for f in case.iterdir():
            (folder / f.name).write_text(_include(f.read_text()))
    for name, (files, removed, _) in DELIVERABLE_BOMBS.items():
        folder = honest(name)
        for f in removed:
            (folder / f).unlink()
        for f, make in files.items():
            (folder / f).write_bytes(make())
    return subs


def _limit_memory(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.fixture(scope="module")
def batch():
    root = Path(tempfile.mkdtemp(prefix="toy-bounds-"))
    subs, out = build_class(root), root / "out"
    rubric = root / "rubric.toml"
    rubric.write_text(rubric_text(), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", GRADE, str(subs), str(out), str(UID_BASE), str(JOBS), str(TOY),
                           str(rubric)],
                          cwd=KIT, capture_output=True, text=True, timeout=1200, preexec_fn=_limit_memory(memory_limit()))
    records = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/record.json")}
    yield dict(proc=proc, out=out, records=records)
    shutil.rmtree(root, ignore_errors=True)


def components(record) -> dict:
    got = {}
    for t in record["tests"]:
        score, top = got.get(t["component"], (0.0, 0.0))
        got[t["component"]] = (round(score + t["score"], 4), round(top + t["max_score"], 4))
    return got


def text_of(record) -> str:
    return "\n".join(record["notes"] + [t["output"] for t in record["tests"]] + [record["status"]])


def honest_rows_unaffected(batch):
    reference = batch["records"][HONEST[0]]
    for name in HONEST:
        record = batch["records"][name]
        assert record["total"] == record["max_total"] == honest_total(), (name, text_of(record)[:2000])
        assert record["status"] == "ok" and record["notes"] == [], name
        assert record["tests"] == reference["tests"], name


def nothing_left():
    assert settled(lambda: processes_of(range(UID_BASE, UID_BASE + JOBS))) == []
    assert settled(lambda: descendants(os.getpid())) == []


def check(batch, name, *, hit, status, reason):
    """Only `hit` lost points, the row's status and feedback say why, the honest rows are untouched."""
    record = batch["records"][name]
    for component, (score, top) in components(record).items():
        if component != hit:
            assert score == top, (name, component, text_of(record)[:2000])
    score, top = components(record)[hit]
    assert score < top, (name, hit)
    assert record["status"] == status, (name, record["status"])
    assert re.search(reason, text_of(record)), (name, reason, text_of(record)[:2000])
    honest_rows_unaffected(batch)
    nothing_left()


def test_the_class_is_graded_under_2_gb_per_process_with_a_row_each(batch):
    proc = batch["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = set(HONEST) | {p.name for p in BOUNDED.iterdir() if p.is_dir()} | set(DELIVERABLE_BOMBS)
    assert set(batch["records"]) == expected
    assert "engine-error" not in {r["status"] for r in batch["records"].values()}
    honest_rows_unaffected(batch)
    nothing_left()


def test_a_250_mb_answer_is_refused_before_it_is_read(batch):
    check(batch, "reply_flood", hit="activations", status="oversized-reply",
          reason=r"OversizedReply: one answer was over the 16 MB a call may send back")


def test_an_answer_claiming_an_8_tb_array_is_refused(batch):
    check(batch, "giant_shape", hit="activations", status="oversized-reply", reason=r"over the 16 MB a call may send back")


def test_answers_that_pass_their_files_share_of_the_cap_stop_only_that_files_calls(batch):
    # The submission's 64 MB are shared among its two files: the file that hoards uses up its own 32 MB, and its
    # later calls go unanswered, with the reason. The classifier's calls, graded over the grader's softmax once
    # activations.py is condemned, keep their points: one part's flood costs only that part (red team s42r).
    record = batch["records"]["reply_hoard"]
    assert record["status"] == "oversized-reply"
    assert "the answers of activations.py passed the 32 MB the grader keeps for one file" in text_of(record)
    assert components(record)["activations"][0] < components(record)["activations"][1]
    assert components(record)["classifier"][0] == components(record)["classifier"][1], text_of(record)[:2000]
    honest_rows_unaffected(batch)


def test_a_forged_answer_is_the_submissions_fault_not_the_engines(batch):
    check(batch, "forged_reply", hit="classifier", status="protocol-error",
          reason=r"ProtocolError: the process sent an answer the grader's executor never writes \(forged")


def test_an_exit_report_from_a_running_process_is_forged(batch):
    # Only the zygote reports how a child ended, once it has: a report while the child still runs is the
    # submission's own writing, never a crash or a kill for memory.
    check(batch, "forged_exit", hit="classifier", status="protocol-error",
          reason=r"ProtocolError: the process reported its own end while still running \(forged\)")
    assert "SIGKILL" not in text_of(batch["records"]["forged_exit"])


def test_a_fault_record_the_sandbox_alone_writes_is_forged(batch):
    check(batch, "forged_fault", hit="classifier", status="protocol-error",
          reason=r"ProtocolError: the process sent an answer the grader's executor never writes \(forged or "
                 r"damaged: a Timeout with no traceback")


def test_a_slot_poisoned_by_its_child_is_fresh_for_the_next_submission(batch):
    record = batch["records"]["zz_scratch_poison"]
    assert record["total"] == honest_total() and record["status"] == "ok", text_of(record)[:2000]
    honest_rows_unaffected(batch)  # the zzz_ rows come after it, in both slots
    if os.geteuid() == 0:
        assert record["isolation"]["scratch_quota_mb"] == 128


@pytest.mark.parametrize("name", sorted(DELIVERABLE_BOMBS))
def test_deliverables_built_against_the_checker_get_a_verdict(batch, name):
    record = batch["records"][name]
    check_id = DELIVERABLE_BOMBS[name][2]
    verdicts = {t["name"].split(".", 1)[1]: t for t in record["tests"] if t["component"] == "deliverables"}
    for c in CODE:
        assert components(record)[c][0] == components(record)[c][1], (name, c)
    for other, test in verdicts.items():
        if other != check_id:
            assert test["status"] == "passed", (name, other, test["output"])
    if name == "png_second_header":
        assert verdicts[check_id]["status"] == "passed"  # the picture itself is the reference's
    else:
        assert verdicts[check_id]["status"] == "failed"
        assert "checker failed" not in verdicts[check_id]["output"]
    if name == "png_bomb":
        assert "looks blank" in verdicts[check_id]["output"]
    honest_rows_unaffected(batch)


def test_the_png_shortcut_trusts_only_the_checked_size():
    data = png_with_a_second_header()
    size = Image.open(__import__("io").BytesIO(data)).size
    assert deliverables.png_rows(data, size, 100) is None  # a second IHDR: no shortcut
    plain = honest_plot()
    assert deliverables.png_rows(plain, size, 100) is not None
    assert deliverables.png_rows(plain, (size[0] * 1000, size[1]), 100) is None  # disagrees with the header
