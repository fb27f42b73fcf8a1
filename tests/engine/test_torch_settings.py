"""Torch's process-wide settings (default dtype and device, grad and inference mode, threads, deterministic
algorithms, anomaly detection, print options) changed by a submission's import or call are put back after it:
every call and every import starts from the settings the process had before any student code ran (but for the
called file's own import's settings, which hold for its own calls, as in the student's own process), so a change
costs at most the file or call that made it (grader/running/executor.py, _TorchSettings; red team s44r, torch_state: a
file that set float64 at import cost a correct part of the same submission, graded in the same child, 15 of 20).

Through the toy lesson (tests/fixtures/lessons/toy): `activations` (a function) and `classifier` (a module built
by the student's code, graded over the grader's softmax), in this process and in the sandbox."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import TOY, components, kept_zygotes, make_submission, shared_config  # noqa: E402

from grader.judging import score  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.running import grade as run  # noqa: E402
from grader.running.calls import InProcessTransport  # noqa: E402
from grader.running.executor import ModuleLoader, execute  # noqa: E402

LESSON = load_lesson(str(TOY))
PARTS = tuple(LESSON.modules)
FULL = {part: (float(LESSON.points[part]), float(LESSON.points[part])) for part in PARTS}

# Each a line of student code that changes one of torch's process-wide settings.
CHANGES = {
    "dtype": "torch.set_default_dtype(torch.float64)",
    "device": "torch.set_default_device('meta')",
    "grad": "torch.set_grad_enabled(False)",
    "inference": "_held = torch.inference_mode()\n_held.__enter__()",  # kept: a dropped guard ends it
    "deterministic": "torch.use_deterministic_algorithms(True, warn_only=True)",
    "threads": "torch.set_num_threads(3)",
    "anomaly": "torch.set_anomaly_enabled(True, check_nan=False)",
    "printoptions": "torch.set_printoptions(precision=9, linewidth=33)",
}
EVERY_CHANGE = "\n".join(CHANGES.values())

PROBE = """
    import torch
    import torch._tensor_str

    def settings():
        o = torch._tensor_str.PRINT_OPTS
        return {"dtype": str(torch.get_default_dtype()), "device": str(torch.get_default_device()),
                "grad": torch.is_grad_enabled(), "inference": torch.is_inference_mode_enabled(),
                "deterministic": [torch.are_deterministic_algorithms_enabled(),
                                  torch.is_deterministic_algorithms_warn_only_enabled()],
                "threads": torch.get_num_threads(),
                "anomaly": [torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()],
                "printoptions": [o.precision, o.threshold, o.edgeitems, o.linewidth, o.sci_mode]}
"""


def _settings() -> dict:
    namespace: dict = {}
    exec(textwrap.dedent(PROBE), namespace)
    return namespace["settings"]()


def _reset(saved: dict) -> None:
    """Put this test process's settings back whatever the code under test left (so that a failing run of these
    tests, on an executor that does not put them back, costs no other test)."""
    torch.set_default_device(None)
    torch.set_default_dtype(getattr(torch, saved["dtype"].removeprefix("torch.")))
    torch.set_grad_enabled(saved["grad"])
    torch.use_deterministic_algorithms(saved["deterministic"][0], warn_only=saved["deterministic"][1])
    torch.set_num_threads(saved["threads"])
    torch.set_anomaly_enabled(saved["anomaly"][0], check_nan=saved["anomaly"][1])
    p = saved["printoptions"]
    torch.set_printoptions(precision=p[0], threshold=p[1], edgeitems=p[2], linewidth=p[3], sci_mode=p[4])


_KEPT: list = []  # inference-mode guards the reset entered: kept alive, or they would switch it back


@pytest.fixture(autouse=True)
def settings_kept():
    saved = _settings()
    yield saved
    if torch.is_inference_mode_enabled():
        guard = torch.inference_mode(False)
        guard.__enter__()
        _KEPT.append(guard)
    _reset(saved)


def _folder(root: Path, name: str, files: dict[str, str]) -> Path:
    return make_submission(root / name, {f: textwrap.dedent(t) for f, t in files.items()}, solutions=LESSON.solutions)


def _at_import(change: str) -> dict[str, str]:
    """activations.py, correct, that changes `change` when it is imported."""
    return {"activations.py": (LESSON.solutions / "activations.py").read_text() + "\n" + change + "\n"}


def _in_call(change: str) -> dict[str, str]:
    """activations.py whose softmax, correct, changes `change` after it has computed its answer."""
    changes = textwrap.indent(change, "    ")
    return {"activations.py": f"""
import torch


def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    answer = exps / exps.sum(dim=dim, keepdim=True)
{changes}
    return answer
"""}


# -- the next call and the next import start from the settings the process had -------------------------------------
def _probe(loader) -> dict:
    header, _ = execute({"op": "call", "module": "probe", "name": "settings"}, {}, loader=loader)
    assert header["error"] is None, header["error"]
    return json.loads(json.dumps(header["value"]))  # as the value tree carries it


def _value(tree):
    """A value tree of plain data, unpacked (grader/running/protocol.py)."""
    from grader.running import protocol

    return protocol.unpack(tree, {})


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_a_change_made_at_import_is_put_back_after_the_import(tmp_path, setting, settings_kept):
    folder = _folder(tmp_path, "sub", {"probe.py": PROBE, "spoiler.py": f"import torch\n{CHANGES[setting]}\n"
                                                                         "def noop():\n    return 1\n"})
    loader = ModuleLoader(folder, isolated=True, lesson=LESSON)
    before = _value(_probe(loader))
    header, _ = execute({"op": "call", "module": "spoiler", "name": "noop"}, {}, loader=loader)
    assert header["error"] is None, header["error"]
    assert _value(_probe(loader)) == before
    assert _settings() == settings_kept  # and the process is left as it was


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_a_change_made_at_import_holds_for_that_files_own_calls_only(tmp_path, setting, settings_kept):
    # As in the student's own process, where the visible tests import the file: its setting is what its own code
    # runs with, and its own tests see what it does there; no other file's call runs with it.
    folder = _folder(tmp_path, "sub", {"probe.py": PROBE,
                                       "spoiler.py": f"{textwrap.dedent(PROBE)}\n{CHANGES[setting]}\n"})
    loader = ModuleLoader(folder, isolated=True, lesson=LESSON)
    before = _value(_probe(loader))
    header, _ = execute({"op": "call", "module": "spoiler", "name": "settings"}, {}, loader=loader)
    assert header["error"] is None, header["error"]
    own = _value(json.loads(json.dumps(header["value"])))
    assert own[setting] != before[setting], (setting, own[setting])  # the first call, which imported it
    header, _ = execute({"op": "call", "module": "spoiler", "name": "settings"}, {}, loader=loader)
    assert _value(json.loads(json.dumps(header["value"]))) == own  # and every later one
    assert _value(_probe(loader)) == before  # another file's call: as the process was
    assert _settings() == settings_kept


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_a_change_made_by_a_call_does_not_reach_the_next_call(tmp_path, setting, settings_kept):
    body = textwrap.indent(CHANGES[setting], "    ")
    folder = _folder(tmp_path, "sub", {"probe.py": PROBE, "spoiler.py": f"import torch\ndef spoil():\n"
                                                                         f"    global _held\n{body}\n    return 1\n"})
    loader = ModuleLoader(folder, isolated=True, lesson=LESSON)
    before = _value(_probe(loader))
    header, _ = execute({"op": "call", "module": "spoiler", "name": "spoil"}, {}, loader=loader)
    assert header["error"] is None, header["error"]
    assert _value(_probe(loader)) == before
    assert _settings() == settings_kept


def test_the_executors_own_float64_and_gradients_still_work_after_a_change(tmp_path):
    folder = _folder(tmp_path, "sub", {"spoiler.py": f"import torch\n{EVERY_CHANGE}\ndef noop():\n    return 1\n"})
    loader = ModuleLoader(folder, isolated=True, lesson=LESSON)
    header, _ = execute({"op": "call", "module": "spoiler", "name": "noop"}, {}, loader=loader)
    assert header["error"] is None, header["error"]
    x = np.random.default_rng(0).standard_normal((3, 4))
    header, arrays = execute({"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}],
                              "grad_wrt": ["x"], "grad_out": {"0": "g"}}, {"x": x, "g": np.ones_like(x)}, loader=loader)
    assert header["error"] is None and header["grad_error"] is None, header
    assert header["outputs"][0]["dtype"] == "float64" and header["grads"]["x"] is not None


# -- one bug costs one part: graded in this process and in the sandbox -------------------------------------------------
SUBMISSIONS = {
    "dtype_at_import": _at_import(CHANGES["dtype"]),
    "device_at_import": _at_import(CHANGES["device"]),
    "everything_at_import": _at_import(EVERY_CHANGE),
    "dtype_in_call": _in_call(CHANGES["dtype"]),
    "device_in_call": _in_call(CHANGES["device"]),
}


@pytest.mark.parametrize("name", sorted(SUBMISSIONS))
def test_a_correct_part_keeps_its_points_in_this_process(tmp_path, name):
    folder = _folder(tmp_path, name, SUBMISSIONS[name])
    result = score.grade_submission(name=name, directory=folder, transport=InProcessTransport(folder, lesson=LESSON),
                                    lesson=LESSON)
    got = components({"tests": [vars(t) for t in result.tests]}, PARTS)
    assert got["classifier"] == FULL["classifier"], [(t.name, t.output) for t in result.tests if t.score < t.max_score]


def test_a_correct_part_keeps_its_points_in_the_sandbox(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="kit-torch-settings-"))
    try:
        subs = root / "subs"
        for name, files in SUBMISSIONS.items():
            _folder(subs, name, files)
        out = root / "out"
        assert run.main(submissions=subs, out=out, jobs=2, config=shared_config(call_timeout=3.0), lesson=LESSON,
                        zygotes=kept_zygotes()) == 0
        for name in SUBMISSIONS:
            record = json.loads((out / name / "record.json").read_text())
            got = components(record, PARTS)
            failing = [(t["name"], t["output"]) for t in record["tests"] if t["score"] < t["max_score"]]
            assert got["classifier"] == FULL["classifier"], (name, failing)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- what no setting holds: torch's shared code (a child answers one module's calls: transport.call_many) ----------
SHARED = {
    "global_hook": "import torch.nn.modules.module as _m\n_m.register_module_forward_hook(lambda m, i, o: o * 1.01)",
    "patched_layer": ("import torch.nn as _nn\n_linear = _nn.Linear.forward\n"
                      "_nn.Linear.forward = lambda self, x: _linear(self, x) * 1.01"),
    "patched_tensor_method": "torch.Tensor.exp = lambda self: torch.exp(self) * 1.01",
    "mode_left_on": ("from torch.overrides import TorchFunctionMode as _Mode\n"
                     "class _Scaled(_Mode):\n"
                     "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                     "        out = func(*args, **(kwargs or {}))\n"
                     "        return out * 1.01 if func is torch.nn.functional.linear else out\n"
                     "_Scaled().__enter__()"),
    "saved_tensors_hooks": ("torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1.01, lambda t: t).__enter__()"),
}


def test_a_part_whose_file_changes_torchs_shared_code_costs_no_other_part_in_the_sandbox():
    # Red team s45r: activations.py (correct) changes code every part shares at import; the classifier, graded over the
    # grader's softmax in the same child, lost points. A child answers one module's calls (transport.call_many):
    # the classifier's calls go to a child where activations.py never ran.
    root = Path(tempfile.mkdtemp(prefix="kit-shared-code-"))
    try:
        subs = root / "subs"
        for name, change in SHARED.items():
            _folder(subs, name, _at_import("import torch\n" + change))
        _folder(subs, "honest", {})
        out = root / "out"
        assert run.main(submissions=subs, out=out, jobs=2, config=shared_config(call_timeout=3.0), lesson=LESSON,
                        zygotes=kept_zygotes()) == 0
        for name in [*SHARED, "honest"]:
            record = json.loads((out / name / "record.json").read_text())
            failing = [(t["name"], t["output"]) for t in record["tests"] if t["score"] < t["max_score"]]
            assert components(record, PARTS)["classifier"] == FULL["classifier"], (name, failing)
    finally:
        shutil.rmtree(root, ignore_errors=True)
