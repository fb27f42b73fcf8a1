"""The call executor (grader/running/executor.py), on neutral code: the toy lesson (a softmax and a classifier
graded over the grader's softmax) and small modules written here. A lesson's own modules are exercised
with that lesson (tests/<lesson>/)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from grader import lesson as lessons
from grader.running.executor import CallLesson, ModuleLoader, execute, to_numpy
from wrapper_tensor import claims_float32

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "fixtures" / "lessons" / "toy"
SOLUTIONS = TOY / "solutions"
LESSON = lessons.load_lesson(str(TOY))
TOY_MODULES = ("activations", "classifier")


def sub(tmp_path, **files) -> Path:
    """A submission folder: the toy's reference with some files replaced or added."""
    folder = tmp_path / "sub"
    folder.mkdir(parents=True, exist_ok=True)
    for p in SOLUTIONS.glob("*.py"):
        shutil.copyfile(p, folder / p.name)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text).lstrip())
    return folder


def loader_of(folder, **options) -> ModuleLoader:
    return ModuleLoader(folder, isolated=True, lesson=LESSON, **options)


def call_softmax(loader, x, grad=False):
    header = {"op": "function", "module": "activations", "name": "softmax", "args": [{"array": "x"}],
              "kwargs": {"dim": -1}}
    arrays = {"x": x}
    if grad:
        arrays["g"] = np.arange(x.size, dtype=x.dtype).reshape(x.shape)
        header.update(grad_wrt=["x"], grad_out={"0": "g"})
    return execute(header, arrays, loader=loader)


def classifier_call(x, weight, bias, names=("linear.weight",)):
    return ({"op": "module", "module": "classifier", "cls": "Classifier", "init": [weight.shape[1], weight.shape[0]],
             "params": [{"name": "linear.weight", "bind": {"names": list(names)}, "array": "w"},
                        {"name": "linear.bias", "bind": {"names": [n.replace("weight", "bias") for n in names]},
                         "array": "b"}],
             "args": [{"array": "x"}]}, {"x": x, "w": weight, "b": bias})


def seeded(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def test_function_call_returns_plain_arrays_dtypes_and_gradients():
    x = seeded(0, 2, 5)
    h, a = call_softmax(loader_of(SOLUTIONS), x, grad=True)
    assert h["error"] is None and h["grad_error"] is None
    assert [o["dtype"] for o in h["outputs"]] == ["float32"] and a["out0"].shape == (2, 5)
    np.testing.assert_allclose(a["out0"].sum(-1), 1, atol=1e-6)
    assert h["grads"] == {"x": "grad:x"} and a["grad:x"].shape == x.shape
    assert all(type(v) is np.ndarray for v in a.values())


def test_module_call_loads_weights_where_the_binding_rule_finds_them():
    x, w, b = seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2)
    h, a = execute(*classifier_call(x, w, b), loader=loader_of(SOLUTIONS))
    assert h["error"] is None, h["error"]
    expected = torch.softmax(torch.from_numpy(x) @ torch.from_numpy(w).T + torch.from_numpy(b), -1).numpy()
    np.testing.assert_allclose(a["out0"], expected, atol=1e-6)


def test_a_module_holding_another_accepted_name_is_loaded_under_the_one_it_has(tmp_path):
    folder = sub(tmp_path, classifier="""
        import torch.nn as nn
        from activations import softmax
        class Classifier(nn.Module):
            def __init__(self, d_in, n_classes):
                super().__init__()
                self.fc = nn.Linear(d_in, n_classes)
            def forward(self, x):
                return softmax(self.fc(x), dim=-1)
    """)
    x, w, b = seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2)
    names = ("linear.weight", "fc.weight")
    ours = execute(*classifier_call(x, w, b, names), loader=loader_of(SOLUTIONS))
    theirs = execute(*classifier_call(x, w, b, names), loader=loader_of(folder))
    assert ours[0]["error"] is None and theirs[0]["error"] is None
    np.testing.assert_allclose(theirs[1]["out0"], ours[1]["out0"], atol=1e-6)
    h, _ = execute(*classifier_call(x, w, b), loader=loader_of(folder))  # a name the rule does not accept
    assert h["error"]["type"] == "GraderCallError" and "Classifier has no tensor at linear.weight" in h["error"]["message"]


@pytest.mark.parametrize("wrap", [
    "nn.utils.parametrizations.weight_norm(layer)",  # weight = g · v / ‖v‖, computed at every read
    "nn.utils.parametrizations.spectral_norm(layer)",
    "nn.utils.weight_norm(layer)",  # the older form: a forward pre-hook sets weight from weight_g, weight_v
])
def test_a_weight_computed_from_other_tensors_is_named_as_what_the_grader_cannot_load(tmp_path, wrap):
    # Writing into such a weight reaches nothing forward uses: the answer was wrong with no reason given (held-out
    # s41's a1, weight_norm on a correct module). The call now says why, and what to do.
    folder = sub(tmp_path, classifier=f"""
        import warnings
        import torch.nn as nn
        from activations import softmax
        warnings.simplefilter("ignore")
        class Classifier(nn.Module):
            def __init__(self, d_in, n_classes):
                super().__init__()
                layer = nn.Linear(d_in, n_classes)
                self.linear = {wrap}
            def forward(self, x):
                return softmax(self.linear(x), dim=-1)
    """)
    h, _ = execute(*classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2)), loader=loader_of(folder))
    assert h["error"]["type"] == "GraderCallError", h["error"]
    message = h["error"]["message"]
    assert "Classifier.linear.weight" in message and "computed" in message and "plain parameter" in message


@pytest.mark.parametrize("weight", ["self._w", "self._w_t.t()"])
def test_a_weight_read_through_a_property_of_a_kept_tensor_is_loaded(tmp_path, weight):
    # A property that hands out the tensor the layer keeps (or a view of it) is written through: no false alarm.
    folder = sub(tmp_path, classifier=f"""
        import torch
        import torch.nn as nn
        from activations import softmax
        class Layer(nn.Module):
            def __init__(self, d_in, n_classes):
                super().__init__()
                self.bias = nn.Parameter(torch.zeros(n_classes))
                self._w = nn.Parameter(torch.zeros(n_classes, d_in))
                self._w_t = nn.Parameter(torch.zeros(d_in, n_classes))
            @property
            def weight(self):
                return {weight}
            def forward(self, x):
                return x @ self.weight.t() + self.bias
        class Classifier(nn.Module):
            def __init__(self, d_in, n_classes):
                super().__init__()
                self.linear = Layer(d_in, n_classes)
            def forward(self, x):
                return softmax(self.linear(x), dim=-1)
    """)
    call = classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2))
    (h, a), (_, want) = execute(*call, loader=loader_of(folder)), execute(*call, loader=loader_of(SOLUTIONS))
    assert h["error"] is None, h["error"]
    np.testing.assert_allclose(a["out0"], want["out0"], atol=1e-6)


def test_a_parameter_of_the_wrong_shape_is_reported_with_its_path():
    header, arrays = classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2))
    arrays["w"] = np.zeros((4, 4), "float32")
    h, _ = execute(header, arrays, loader=loader_of(SOLUTIONS))
    assert h["error"]["type"] == "GraderCallError" and "linear.weight" in h["error"]["message"]
    assert "(2, 4)" in h["error"]["message"] and "(4, 4)" in h["error"]["message"]


def test_inspect_lists_parameters_buffers_and_attributes(tmp_path):
    folder = sub(tmp_path, table="""
        import torch, torch.nn as nn
        class Table(nn.Module):
            def __init__(self, d, n):
                super().__init__()
                self.register_buffer("pe", torch.zeros(n, d))
                self.scale = nn.Parameter(torch.ones(d), requires_grad=False)
                self.size = n
    """)
    h, _ = execute({"op": "inspect", "module": "table", "cls": "Table", "init": [8, 20],
                    "attrs": [{"name": "pe", "paths": ["pe"]}, {"name": "size", "paths": ["n", "size"]},
                              {"name": "nope", "paths": ["nope"]}]}, {}, loader=loader_of(folder))
    info = h["inspect"]
    assert info["parameters"] == {"scale": [8]} and info["trainable"] == {"scale": False}
    assert info["buffers"] == {"pe": [20, 8]}
    assert info["attrs"]["pe"] == {"path": "pe", "type": "Tensor", "kind": "tensor", "shape": [20, 8], "is_parameter": False}
    assert info["attrs"]["size"] == {"path": "size", "type": "int", "kind": "value", "value": 20}
    assert info["attrs"]["nope"]["kind"] == "missing"


def test_import_failure_is_cached_and_costs_only_its_module(tmp_path):
    loader = loader_of(sub(tmp_path, classifier="import torch\nclass Classifier(:\n"))
    header, arrays = classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2))
    for _ in range(2):
        h, _ = execute(header, arrays, loader=loader)
        assert h["error"]["type"] == "SyntaxError" and h["error"]["stage"] == "import"
    assert call_softmax(loader, seeded(0, 2, 3))[0]["error"] is None
    assert list(loader.errors) == ["classifier"]


def test_a_part_runs_over_the_grader_s_stand_in_of_a_broken_dependency(tmp_path):
    # The toy's classifier is always graded over the grader's softmax (its lesson.toml, always_standin).
    loader = loader_of(sub(tmp_path, activations="raise ImportError('half done')\n"))
    h, a = execute(*classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2)), loader=loader)
    assert h["error"] is None and np.allclose(a["out0"].sum(-1), 1)
    assert call_softmax(loader, seeded(0, 2, 3))[0]["error"]["stage"] == "import"


@pytest.mark.parametrize("importing", ["from activations import softmax, linear_logits",
                                       "from activations import *  # noqa: F403"])
def test_a_helper_of_the_students_own_beside_a_stood_in_function_is_still_imported(tmp_path, importing):
    # The contract lets files import each other. A part graded over the grader's stand-ins of another file gets that
    # file's own helpers with the stand-ins (held-out students importing split_heads from self_attention.py lost
    # multihead's points: the stand-in module had the contract's names only).
    folder = sub(tmp_path, activations="""
        import torch
        __all__ = ["softmax", "linear_logits"]
        def linear_logits(x, linear):
            return linear(x)
        def softmax(x, dim=-1):
            raise RuntimeError("half done")
    """, classifier=f"""
        import torch.nn as nn
        {importing}
        class Classifier(nn.Module):
            def __init__(self, d_in, n_classes):
                super().__init__()
                self.linear = nn.Linear(d_in, n_classes)
            def forward(self, x):
                return softmax(linear_logits(x, self.linear), dim=-1)
    """)
    loader = loader_of(folder)
    h, a = execute(*classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2)), loader=loader)
    assert h["error"] is None and np.allclose(a["out0"].sum(-1), 1)  # the stand-in's softmax, the student's helper
    assert "half done" in call_softmax(loader, seeded(0, 2, 3))[0]["error"]["message"]


def test_a_notebook_missing_a_definition_says_which_of_its_cells_raised(tmp_path):
    from grader.intake import submissions as intake

    folder = tmp_path / "nb"
    folder.mkdir()
    cells = ["import torch", "def softmax(x, dim=-1)\n    return x"]  # the colon is missing: the cell is skipped
    (folder / f"{LESSON.notebook_module}.py").write_text(intake.notebook_module_source("toy.ipynb", cells))
    (folder / "activations.py").write_text(intake.contract_module_source("toy.ipynb", "activations", lesson=LESSON))
    error = call_softmax(loader_of(folder), seeded(0, 2, 3))[0]["error"]
    assert "your notebook's code cells define no function softmax" in error["message"], error
    assert "code cell 2 raised SyntaxError" in error["message"], error
    assert "activations.py" not in error["message"]  # a notebook student has no such file


def test_isolated_loaders_coexist_and_leave_sys_modules_clean(tmp_path):
    before = {n for n in TOY_MODULES if n in sys.modules}
    unnormalised = sub(tmp_path, activations="""
        import torch
        def softmax(x, dim=-1):
            return torch.exp(x)
    """)
    x = np.zeros((1, 2), "float32")
    assert call_softmax(loader_of(SOLUTIONS), x)[1]["out0"].tolist() == [[0.5, 0.5]]
    assert call_softmax(loader_of(unnormalised), x)[1]["out0"].tolist() == [[1.0, 1.0]]
    assert {n for n in TOY_MODULES if n in sys.modules} == before
    assert not list(SOLUTIONS.glob("__pycache__"))


def test_stand_ins_reach_a_sandboxed_loader_only_with_a_call_that_sends_them(tmp_path):
    # A child holds no stand-in until a call brings its source; then a classifier.py whose activations.py
    # is broken still runs against the stand-in under that name.
    folder = sub(tmp_path, activations="raise ImportError('broken on purpose')\n")
    header, arrays = classifier_call(seeded(1, 3, 4), seeded(2, 2, 4), seeded(3, 2))
    bare = ModuleLoader(folder, isolated=False, lesson=LESSON.spec())
    h, _ = execute(header, arrays, loader=bare)
    assert "stand-ins were not sent" in h["error"]["message"] and bare.standins is None
    sent = ModuleLoader(folder, isolated=False, lesson=LESSON.spec())
    try:
        h, a = execute(dict(header, standins_source={"softmax": (TOY / "standins.py").read_text()}), arrays, loader=sent)
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None
        for name in TOY_MODULES:
            sys.modules.pop(name, None)
    assert h["error"] is None and np.allclose(a["out0"].sum(-1), 1)
    # The stand-in runs in a namespace of its own that is in no sys.modules, and names no module.
    namespace = sent.standins.softmax.__globals__
    assert "__name__" not in namespace and all(vars(m) is not namespace for m in list(sys.modules.values()))


LENT_CLASS = "import torch.nn as nn\n\n\nclass Lent(nn.Module):\n    def forward(self, x):\n        return x + 1\n"


def _wrapping_forward(cls, **kwargs):
    """A submission's hook on nn.Module subclasses: each new class's forward is made to answer 100 times more."""
    original = vars(cls).get("forward")
    if original is not None:
        cls.forward = lambda self, x: original(self, x) * 100


def test_a_lent_class_is_made_as_its_source_says_whatever_subclass_hook_the_submission_set(tmp_path, monkeypatch):
    """Red team s56r: a hook on nn.Module.__init_subclass__, set by the submission, ran when the grader's lent class
    was made in its process and changed that class's forward (the part gained the points its own code lost). The
    lent class is made with such hooks set aside, and the hook is the submission's again afterwards."""
    monkeypatch.setattr(torch.nn.Module, "__init_subclass__", classmethod(_wrapping_forward), raising=False)
    loader = ModuleLoader(tmp_path, isolated=False, lesson=LESSON.spec())
    loader.receive_standins({"Lent": LENT_CLASS})
    lent = loader.standins.Lent()
    assert lent(torch.zeros(1)).item() == 1
    assert "__init_subclass__" in vars(torch.nn.Module), "the submission's own hook is put back"

    class Own(torch.nn.Module):  # the submission's own classes still get its hook
        def forward(self, x):
            return x + 1

    assert Own()(torch.zeros(1)).item() == 100


class _Hundredfold:
    """A descriptor of the submission's own, put in place of a lent class's forward."""

    def __init__(self, original):
        self.original = original

    def __get__(self, obj, owner=None):
        return lambda x: self.original(obj, x) * 100


class _Mixin(torch.nn.Module):
    def __call__(self, x):
        return super().__call__(x) * 100


def _descriptor_forward(cls, **kwargs):
    if "forward" in vars(cls):
        cls.forward = _Hundredfold(vars(cls)["forward"])


def _mixin_base(cls, **kwargs):
    if cls.__bases__ == (torch.nn.Module,) and cls is not _Mixin:
        cls.__bases__ = (_Mixin,)


@pytest.mark.parametrize("hook", [_descriptor_forward, _mixin_base], ids=["descriptor", "base_of_its_own"])
def test_a_lent_class_changed_by_other_means_as_it_is_made_is_made_again_without_them(tmp_path, monkeypatch, hook):
    """Red team s58r: the hook put a descriptor object in place of the lent class's forward (no code to compare), or
    a class of its own among its bases; the lent class is made again with the hook set aside."""
    monkeypatch.setattr(torch.nn.Module, "__init_subclass__", classmethod(hook), raising=False)
    loader = ModuleLoader(tmp_path, isolated=False, lesson=LESSON.spec())
    loader.receive_standins({"Lent": LENT_CLASS})
    assert loader.standins.Lent()(torch.zeros(1)).item() == 1


def test_a_lent_class_is_made_by_the_builtins_the_process_started_with(tmp_path, monkeypatch):
    """builtins.__build_class__, which every class statement calls, replaced by the submission: the grader's lent
    class is made and run with the builtins as the process started."""
    import builtins

    real = builtins.__build_class__

    def build(func, name, *bases, **kwargs):
        cls = real(func, name, *bases, **kwargs)
        if name == "Lent":
            cls.forward = lambda self, x: x * 0
        return cls

    monkeypatch.setattr(builtins, "__build_class__", build)
    loader = ModuleLoader(tmp_path, isolated=False, lesson=LESSON.spec())
    loader.receive_standins({"Lent": LENT_CLASS})
    assert loader.standins.Lent()(torch.zeros(1)).item() == 1


def test_student_exceptions_even_system_exit_become_error_records(tmp_path):
    folder = sub(tmp_path, activations="import sys\ndef softmax(x, dim=-1):\n    sys.exit(3)\n")
    h, _ = call_softmax(loader_of(folder), seeded(0, 2, 3))
    assert h["error"]["type"] == "SystemExit" and h["error"]["stage"] == "call"
    assert 'File "activations.py", line 3' in h["error"]["traceback"]
    assert "executor.py" not in h["error"]["traceback"]


def test_odd_outputs_are_described_or_converted_never_trusted(tmp_path):
    class Sub(torch.Tensor):
        pass

    half = torch.ones(2, 2, dtype=torch.float16)
    assert to_numpy(half).dtype == np.float32
    assert type(to_numpy(torch.ones(3).as_subclass(Sub))) is np.ndarray
    with pytest.raises(TypeError, match="float32 or float64"):
        to_numpy(torch.ones(2, dtype=torch.complex64))
    folder = sub(tmp_path, activations="def softmax(x, dim=-1):\n    return 3, None, [1], 'x', float('nan')\n")
    h, a = call_softmax(loader_of(folder), seeded(0, 2, 3))
    assert [o["kind"] for o in h["outputs"]] == ["value", "none", "other", "other", "value"] and a == {}
    json.dumps(h, allow_nan=False)  # strict JSON, whatever the student returned


def test_a_detached_output_reports_missing_gradients_instead_of_raising(tmp_path):
    folder = sub(tmp_path, activations="import torch\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim).detach()\n")
    h, _ = call_softmax(loader_of(folder), seeded(0, 2, 3), grad=True)
    assert h["error"] is None and h["grad_error"]["type"] == "NoGradient" and h["grads"] == {"x": None}


# -- inspect: the module built as it runs, on CPU ------------------------------------------------
LAYERS = """
    import math, torch, torch.nn as nn

    class Wide(nn.Module):  # ~1M parameters
        def __init__(self, d, n):
            super().__init__()
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.n, self.d_head = n, d // n

    class Strict(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            if d % n:
                raise ValueError("d must be divisible by n")

    class Stacked(nn.Module):
        def __init__(self, d, n, d_ff=None):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.ffn = nn.Sequential(nn.Linear(d, d_ff or 4 * d), nn.ReLU(), nn.Linear(d_ff or 4 * d, d))

    class Table(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            position = torch.arange(n).unsqueeze(1)
            self.register_buffer("pe", torch.sin(position * torch.exp(torch.arange(0, d, 2) * (-math.log(1e4) / d))))
"""
INSPECTS = [
    ("layers", "Wide", [512, 8], {}, ("up", "n", "d_head")),
    ("layers", "Strict", [10, 3], {}, ()),  # raises at construction
    ("layers", "Stacked", [768, 12], {"d_ff": 3072}, ("norm", "ffn")),
    ("layers", "Table", [16, 50], {}, ("pe",)),
]


def inspect_call(module, cls, init, init_kwargs=None, attrs=()):
    return {"op": "inspect", "module": module, "cls": cls, "init": init, "init_kwargs": init_kwargs or {},
            "attrs": [{"name": a, "paths": [a]} for a in attrs]}


# A table cached across instances (an lru_cache).
CACHED_TABLE = '''
import functools, torch, torch.nn as nn
@functools.lru_cache(maxsize=None)
def table(d):
    return torch.empty(4, d).fill_(0.5)
class Table(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", table(d_model))
    def forward(self, x):
        return x + self.pe
'''


def test_an_inspect_builds_the_module_as_it_runs_and_reports_its_structure(tmp_path, monkeypatch):
    from grader.running import executor as ex

    built = []
    real = ex._construct
    monkeypatch.setattr(ex, "_construct", lambda h, l, *fills: built.append(h["cls"]) or real(h, l, *fills))
    folder = sub(tmp_path, layers=LAYERS)
    loader = loader_of(folder)
    got = {spec[1]: execute(inspect_call(*spec), {}, loader=loader)[0] for spec in INSPECTS}
    assert built == [spec[1] for spec in INSPECTS]  # each call built by _construct, the forward calls' own build
    assert got["Wide"]["inspect"]["parameters"]["up.weight"] == [2048, 512]
    assert got["Wide"]["inspect"]["attrs"]["d_head"]["value"] == 64
    assert got["Strict"]["error"]["type"] == "ValueError" and "inspect" not in got["Strict"]
    assert got["Stacked"]["inspect"]["parameters"]["ffn.0.weight"] == [3072, 768]
    assert got["Table"]["inspect"]["buffers"] == {"pe": [50, 8]}


def test_trusted_code_is_inspected_without_its_random_initialisation_and_answers_alike(tmp_path, monkeypatch):
    # The grader's own process inspects trusted code (the reference, mutants, correct variants) often: its random
    # fills are skipped there, which changes no shape; a submission's child (a loader that is not isolated) never
    # skips them, since code could tell its weights were left unfilled.
    from grader.running import executor as ex

    skipped = []
    real = ex._SkipInit.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        result = real(self, func, types, args, kwargs)
        if func in ex._SkipInit._FILLS:
            skipped.append(func.__name__)
        return result

    monkeypatch.setattr(ex._SkipInit, "__torch_function__", counting)
    monkeypatch.setattr(sys, "path", list(sys.path))  # a loader that is not isolated puts the folder there
    monkeypatch.delitem(sys.modules, "layers", raising=False)  # and imports the module under its plain name
    folder = sub(tmp_path, layers=LAYERS)
    for spec in INSPECTS:
        trusted, _ = execute(inspect_call(*spec), {}, loader=loader_of(folder))
        in_child, _ = execute(inspect_call(*spec), {}, loader=ModuleLoader(folder, isolated=False, lesson=LESSON))
        assert trusted == in_child, spec
    assert "kaiming_uniform_" in skipped
    count = len(skipped)
    execute(inspect_call(*INSPECTS[0]), {}, loader=ModuleLoader(folder, isolated=False, lesson=LESSON))
    assert len(skipped) == count  # the child's build fills its weights
    sys.modules.pop("layers", None)


# A module with one wide weight (past the executor's large-fill size) and one small, each randomly initialised.
PROBE = '''
import torch, torch.nn as nn
class Probe(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.wide = nn.Parameter(torch.empty(n, n))
        nn.init.kaiming_uniform_(self.wide)
        self.small = nn.Parameter(torch.empty(4, 4))
        nn.init.uniform_(self.small)
        self.wide_sum = float(self.wide.detach().abs().sum())
        # a fill of a view: zeros where the view lies, the rest of its tensor left as it was
        self.halves = nn.Parameter(torch.ones(n, 2 * n))
        nn.init.normal_(self.halves[:, :n])
        self.view_sum = float(self.halves.detach()[:, :n].abs().sum())
        self.rest_sum = float(self.halves.detach()[:, n:].sum())
        with torch.no_grad():
            self.wide.add_(1)  # the zeros can be written to, as any weight
        self.wide_after = float(self.wide.detach().sum())
    def forward(self, x):
        return x + self.wide.abs().sum() - self.wide.numel(), x + self.small.abs().sum()
'''


def test_wide_random_fills_are_zero_in_every_build_and_small_ones_are_drawn_as_before(tmp_path, monkeypatch):
    # A wide build's kaiming fill (768x3072: ~40 ms of the CPU generator) is zeros in every build a submission's
    # child makes, an inspect's and a run's alike, so no code can tell an inspect by it, and in the grader's own run
    # builds as well, so a replayed mutant answers as the child did; a small fill is drawn as torch draws it, so a
    # run's values (unloaded parameters, the generator's state after the build) do not move.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "probe", raising=False)
    folder = sub(tmp_path, probe=PROBE)
    wide = 512 * 512
    from grader.running import executor as ex
    assert wide >= ex.LARGE_FILL > 4 * 4
    # Wide by its arguments, as the code itself can read them (True is no width); only those builds pay the mode.
    assert ex._wide({"init": [512]}) and ex._wide({"init": [8], "init_kwargs": {"d_ff": 3072}})
    assert not ex._wide({"init": [8, 2], "init_kwargs": {"pre_ln": True, "d_ff": 32}})
    x = np.zeros((1,), dtype=np.float32)
    answers = {}
    for isolated in (True, False):
        loader = ModuleLoader(folder, isolated=isolated, lesson=LESSON)
        h, _ = execute(inspect_call("probe", "Probe", [512], attrs=("wide_sum", "wide_after", "view_sum", "rest_sum")),
                       {}, loader=loader)
        # (trusted code's inspects leave every fill undone: their weights are never read)
        values = {k: v.get("value") for k, v in h["inspect"]["attrs"].items()}
        assert h["error"] is None and (isolated or values == {"wide_sum": 0.0, "wide_after": 512 * 512, "view_sum": 0.0,
                                                               "rest_sum": 512 * 512}), values
        assert h["inspect"]["parameters"]["wide"] == [512, 512] and h["inspect"]["trainable"]["wide"]
        run, arrays = execute({"op": "module", "module": "probe", "cls": "Probe", "init": [512],
                               "args": [{"array": "x"}]}, {"x": x}, loader=loader)
        assert run["error"] is None and float(arrays["out0"][0]) == 0.0, isolated  # what runs is what was inspected
        small, arrays_small = execute({"op": "module", "module": "probe", "cls": "Probe", "init": [8],
                                       "args": [{"array": "x"}]}, {"x": x}, loader=loader)
        answers[isolated] = (arrays["out1"], arrays_small["out0"], arrays_small["out1"])
        sys.modules.pop("probe", None)
    torch.manual_seed(ex.SEED)
    expected_wide = (torch.nn.init.kaiming_uniform_(torch.empty(8, 8)) + 1).abs().sum() - 64
    expected_small = torch.nn.init.uniform_(torch.empty(4, 4)).abs().sum()
    for isolated, (after_wide, wide8, small8) in answers.items():
        assert np.allclose(wide8, expected_wide.numpy()) and np.allclose(small8, expected_small.numpy()), isolated
        assert float(after_wide[0]) > 0, isolated  # the small fill after a wide one is still drawn
    assert all(np.array_equal(a, b) for a, b in zip(answers[True], answers[False]))


# Constructors that check what their initialisation drew: rows scaled to unit length then checked finite (0/0 on
# zeros), an orthogonal weight checked orthogonal (zeros are not), each an honest sanity check of a correct module.
CHECKED_INIT = '''
import torch, torch.nn as nn
class UnitRows(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 2 * n)
        with torch.no_grad():
            nn.init.normal_(self.lin.weight)
            self.lin.weight.div_(self.lin.weight.norm(dim=1, keepdim=True))
        assert torch.isfinite(self.lin.weight).all(), "init produced a non-finite weight"
        self.row_norm = float(self.lin.weight.detach()[0].norm())
    def forward(self, x):
        return self.lin(x)
class Orthogonal(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.empty(n, n))
        nn.init.orthogonal_(self.w)
        assert torch.allclose(self.w @ self.w.T, torch.eye(n), atol=1e-3), "orthogonal init failed"
    def forward(self, x):
        return x @ self.w
'''


@pytest.mark.parametrize("cls", ["UnitRows", "Orthogonal"])
def test_a_constructor_that_checks_its_drawn_values_builds_wide_as_narrow(tmp_path, monkeypatch, cls):
    # The wide builds' zeros are a saving, not a change of what a submission's constructor meets: one whose own
    # check of its drawn values fails on zeros (0/0 rows, zeros not orthogonal) is built again with its fills
    # drawn. An inspect and a run with the same arguments are still built alike.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "checked", raising=False)
    folder = sub(tmp_path, checked=CHECKED_INIT)
    from grader.running import executor as ex
    assert ex._wide({"init": [512]}) and 512 * 512 >= ex.LARGE_FILL
    loader = ModuleLoader(folder, isolated=False, lesson=LESSON)  # the sandboxed child's loader
    for n in (8, 512):
        h, _ = execute(inspect_call("checked", cls, [n]), {}, loader=loader)
        assert h["error"] is None, (n, h["error"])
        assert sorted(h["inspect"]["parameters"].values()) == ([[n, n]] if cls == "Orthogonal" else [[2 * n], [2 * n, n]])
    x = np.ones((1, 512), dtype=np.float32)
    run, arrays = execute({"op": "module", "module": "checked", "cls": cls, "init": [512],
                           "args": [{"array": "x"}]}, {"x": x}, loader=loader)
    assert run["error"] is None, run["error"]
    assert np.isfinite(arrays["out0"]).all() and np.abs(arrays["out0"]).sum() > 0  # drawn, not zeros


def test_a_table_cached_across_instances_is_inspected_and_run_alike(tmp_path):
    # An lru_cache'd table: what an inspect builds is what every later call of the child finds.
    from grader.running.calls import InProcessTransport

    folder = sub(tmp_path, layers=CACHED_TABLE)
    transport = InProcessTransport(folder, lesson=LESSON)
    got, _ = transport.call(inspect_call("layers", "Table", [8]), {})
    assert got["inspect"]["buffers"] == {"pe": [4, 8]}
    x = np.zeros((4, 8), dtype=np.float32)
    header = {"op": "module", "module": "layers", "cls": "Table", "init": [8], "args": [{"array": "x"}]}
    again, arrays = transport.call(header, {"x": x})
    assert again["error"] is None, again["error"]
    assert np.array_equal(next(iter(arrays.values())), np.full((4, 8), 0.5, dtype=np.float32))


# -- a crash in a function costs only that function's tests (the executor's "over_standins") ----------
# A neutral lesson of one module with two graded names, `weights` declared a stand-in; `Mixer` calls it.
MIXER = '''
import torch
import torch.nn as nn


def _helper(x):
    raise ValueError("inside the function")


def weights(x):
    return _helper(x)


class Mixer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        if x.shape[1] == 1:
            raise RuntimeError("the module's own bug")
        return weights(self.proj(x)) @ x
'''
MIXER_STANDINS = '''
import torch


def weights(x):
    return torch.softmax(x @ x.transpose(-2, -1), dim=-1)
'''


@pytest.fixture
def mixer(tmp_path, monkeypatch):
    (tmp_path / "standins").mkdir()
    (tmp_path / "standins" / "mixer_standins_for_tests.py").write_text(MIXER_STANDINS)
    monkeypatch.syspath_prepend(str(tmp_path / "standins"))
    lesson = CallLesson(modules=("mixer",), always_standin={}, standin_names={"mixer": {"weights": "weights"}},
                        contract="CONTRACT.md", standins_module="mixer_standins_for_tests")
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "mixer.py").write_text(MIXER)
    yield ModuleLoader(folder, isolated=True, lesson=lesson)
    sys.modules.pop("mixer_standins_for_tests", None)


def mixer_call(x, **extra):
    return ({"op": "module", "module": "mixer", "cls": "Mixer", "init": [4], "args": [{"array": "x"}], **extra}, {"x": x})


def test_an_error_raised_inside_another_graded_function_is_marked_with_its_name(mixer):
    h, _ = execute(*mixer_call(np.ones((1, 3, 4), "float32")), loader=mixer)
    assert h["error"]["type"] == "ValueError" and h["error"]["inside"] == ["weights"]
    h, _ = execute(*mixer_call(np.ones((1, 1, 4), "float32")), loader=mixer)
    assert h["error"]["message"] == "the module's own bug" and "inside" not in h["error"]
    h, _ = execute({"op": "function", "module": "mixer", "name": "weights", "args": [{"array": "x"}]},
                   {"x": np.ones((2, 2), "float32")}, loader=mixer)  # the function itself: nothing else to blame
    assert h["error"]["type"] == "ValueError" and "inside" not in h["error"]


def test_a_call_over_standins_binds_the_grader_s_function_for_that_call_only(mixer):
    x = seeded(3, 2, 3, 4)
    h, a = execute(*mixer_call(x, over_standins=["weights"]), loader=mixer)
    assert h["error"] is None and h["over_standins"] == ["weights"] and a["out0"].shape == (2, 3, 4)
    h, _ = execute(*mixer_call(x), loader=mixer)  # the student's own function again
    assert h["error"]["inside"] == ["weights"]
    h, _ = execute(*mixer_call(x, over_standins=["Mixer"]), loader=mixer)
    assert h["error"]["type"] == "GraderCallError"  # only what the lesson declares a stand-in of


def test_the_lesson_s_spec_and_value_give_the_executor_the_same_view():
    assert dataclasses.replace(CallLesson.of(LESSON.spec()), standins_module=LESSON.standins_module) == \
        CallLesson.of(LESSON)


def test_a_tensor_subclass_cannot_tell_the_grader_another_dtype_or_shape():
    from grader.running import executor

    class Claims32(torch.Tensor):
        @property
        def dtype(self):
            return torch.float32

        @property
        def shape(self):
            return torch.Size([1])

    lying = torch.zeros(2, 3, dtype=torch.float64).as_subclass(Claims32)
    arrays: dict = {}
    described = executor._describe(lying, "out", arrays)
    assert described["dtype"] == "float64" and described["shape"] == [2, 3] and arrays["out"].dtype == np.float64


def test_inspection_reads_each_modules_own_parameters_and_buffers_not_its_methods():
    from grader.running import executor

    class Hides(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.zeros(4, 2))
            self.inner = torch.nn.Linear(2, 2)
            self.register_buffer("seen", torch.ones(3), persistent=False)

        def named_parameters(self, *args, **kwargs):
            return iter(())

        def named_buffers(self, *args, **kwargs):
            yield "table", self.table

    record = executor._inspect_record(Hides(), {"attrs": []})
    assert record["parameters"] == {"table": [4, 2], "inner.weight": [2, 2], "inner.bias": [2]}
    assert record["trainable"] == {"table": True, "inner.weight": True, "inner.bias": True}
    assert record["buffers"] == {"seen": [3]}
    # An honest module, a layer shared twice and a frozen one among them: the names torch itself gives.
    shared = torch.nn.Linear(3, 3)
    honest = torch.nn.Sequential(torch.nn.Linear(2, 3), shared, torch.nn.BatchNorm1d(3), shared)
    honest[0].weight.requires_grad_(False)
    record = executor._inspect_record(honest, {"attrs": []})
    assert record["parameters"] == {n: list(p.shape) for n, p in honest.named_parameters()}
    assert record["trainable"] == {n: p.requires_grad for n, p in honest.named_parameters()}
    assert record["buffers"] == {n: list(b.shape) for n, b in honest.named_buffers()}


def test_inspection_reads_a_modules_tables_past_a_dict_subclass_given_as_its_dict():
    from grader.running import executor

    class Lies(dict):
        def get(self, key, default=None):
            if key == "_parameters":
                return {}
            if key == "_buffers":
                return dict.get(self, "_parameters")
            return dict.get(self, key, default)

    module = torch.nn.Linear(2, 3)
    module.__dict__ = Lies(module.__dict__)
    record = executor._inspect_record(module, {"attrs": []})
    assert record["parameters"] == {"weight": [3, 2], "bias": [3]} and record["buffers"] == {}


def test_a_compiled_forward_can_call_a_lent_stand_in():
    """A held-out module decorated its forward with torch.compile: Dynamo traced into the grader's lent
    stand-in, tried to import the module its namespace was named after (no such module) and failed the call:
    multihead 5/25 for correct code."""
    from grader.running import executor

    lent = executor._Lent()
    lent.receive("softmax", "import torch\n\n\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n")

    @torch.compile(backend="eager")
    def forward(x):
        return lent.softmax(x * 2, dim=-1)

    x = torch.randn(3, 4)
    assert torch.allclose(forward(x), torch.softmax(x * 2, dim=-1))


# A wrapper subclass whose metadata claims float32 over the float64 tensor it holds: __torch_dispatch__ answers
# every aten call (detach among them) with the float64 tensor, and DisableTorchFunctionSubclass does not stop it.
CLAIMS_FLOAT32 = "import torch\n" + claims_float32("Claims32") + '''


def softmax(x, dim=-1):
    return Claims32(torch.softmax(x.double(), dim))
'''


def test_a_dispatch_wrapper_cannot_tell_the_grader_another_dtype_than_the_data_it_sends(tmp_path):
    h, a = call_softmax(loader_of(sub(tmp_path, activations=CLAIMS_FLOAT32)), seeded(0, 2, 3))
    assert h["error"] is None, h["error"]
    assert a["out0"].dtype == np.float64 and h["outputs"][0]["dtype"] == "float64"
    assert h["outputs"][0]["shape"] == [2, 3]


def test_a_dispatch_wrapper_that_stays_a_wrapper_when_detached_is_refused_as_ungradable(tmp_path):
    # Its detach() gives a wrapper claiming float16 over the float64 tensor, which a conversion to float32
    # would then turn into a real float32 array: the grader reads no tensor whose operations the code answers.
    text = CLAIMS_FLOAT32.replace("dtype=torch.float32", "dtype=torch.float16").replace(
        "        return func(", "        if func is torch.ops.aten.detach.default:\n"
                                "            return Claims32(args[0].inner)\n"
                                "        return func(")
    h, a = call_softmax(loader_of(sub(tmp_path, activations=text)), seeded(0, 2, 3))
    assert h["error"]["stage"] == "output" and "return a plain torch.Tensor" in h["error"]["message"] and a == {}


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, 3),
    lambda: torch.ones(2, 3, dtype=torch.float64),
    lambda: torch.ones(2, 3, dtype=torch.float16),  # sent as float32, judged as what it was
    lambda: torch.ones(2, 3, dtype=torch.bfloat16),
    lambda: torch.ones(2, 3, dtype=torch.int32),  # sent as int64
    lambda: torch.ones(2, 3, dtype=torch.bool),
    lambda: torch.nn.Parameter(torch.ones(2, 3)),
    lambda: torch.ones(2, 3, requires_grad=True) * 2,
    lambda: torch.ones(4, 6, dtype=torch.float64)[::2, 1::2],  # a strided view
    lambda: torch.ones(3, 2).t(),
])
def test_every_honest_tensor_is_described_by_its_own_dtype_and_shape(make):
    from grader.running import executor

    value = make()
    arrays: dict = {}
    described = executor._describe(value, "out", arrays)
    assert described["dtype"] == str(value.dtype).replace("torch.", "")
    assert described["shape"] == list(value.shape) == list(arrays["out"].shape)
    assert described["requires_grad"] == value.requires_grad


def test_the_grader_refuses_an_answer_whose_dtype_or_shape_is_not_that_of_its_array():
    from grader.sandbox.transport import reply_problem

    def answer(dtype, array, shape=None):
        return reply_problem({"error": None, "outputs": [{"kind": "tensor", "array": "out0", "dtype": dtype,
                                                          "shape": list(array.shape) if shape is None else shape,
                                                          "requires_grad": False}]}, {"out0": array})

    f32, f64 = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64)
    assert answer("float32", f32) is None and answer("float64", f64) is None
    assert answer("float16", f32) is None and answer("bfloat16", f32) is None  # widened for the wire
    assert answer("int32", np.zeros(2, np.int64)) is None and answer("bool", np.zeros(2, bool)) is None
    assert "said to be float32 but its array holds float64" in answer("float32", f64)
    assert "said to be float16 but its array holds float64" in answer("float16", f64)
    assert "shape" in answer("float32", f32, shape=[3, 2])
    assert answer("complex64", f32) is not None


# The module that runs holds a trainable table; a build on the meta device, or the build right after one (a class that
# remembers the previous build's device), holds a buffer: code that tells an inspect's own build apart.
TELLS_META = '''
import torch, torch.nn as nn

class Table(nn.Module):
    after_meta = False

    def __init__(self, d, n):
        super().__init__()
        table = torch.zeros(n, d)
        on_meta = torch.empty(0).is_meta
        if on_meta or Table.after_meta:
            self.register_buffer("pe", table)
        else:
            self.pe = nn.Parameter(table)
        Table.after_meta = on_meta
'''


def test_an_inspect_is_answered_by_the_module_that_runs_not_by_a_build_that_can_tell_it_is_inspected(tmp_path):
    # Every inspect is built as the forward calls build theirs, on CPU: there is no build of the inspect's own to
    # tell apart, small or wide (s36r, s37r: meta builds answered another structure than the one that runs).
    from grader.running.calls import InProcessTransport

    folder = sub(tmp_path, layers=TELLS_META)
    transport = InProcessTransport(folder, lesson=LESSON)  # as the sandboxed child's loader builds
    for init in ([16, 50], [768, 5000], [768, 5000]):
        got, _ = transport.call(inspect_call("layers", "Table", init), {})
        assert got["error"] is None, got["error"]
        assert got["inspect"]["parameters"] == {"pe": [init[1], init[0]]} and got["inspect"]["buffers"] == {}


def test_a_module_that_raises_only_when_it_runs_is_inspected_as_raising(tmp_path):
    folder = sub(tmp_path, layers='''
        import torch, torch.nn as nn
        class Table(nn.Module):
            def __init__(self, d, n):
                super().__init__()
                if not torch.empty(0).is_meta:
                    raise ValueError("d must be even")
    ''')
    got, _ = execute(inspect_call("layers", "Table", [512, 50]), {}, loader=loader_of(folder))
    assert got["error"]["type"] == "ValueError"


# A mode the submission enters at import and never leaves stays on torch's mode stack while the executor reads its
# answers: every torch call the executor makes (detach, a tensor's dtype or shape) would run the submission's code.
NARROWING_MODE = '''
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Narrow(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.detach.default and out.dtype == torch.float64:
            return out.to(torch.float32)  # whoever reads a float64 answer gets float32 bytes
        return out


_Narrow().__enter__()


def softmax(x, dim=-1):
    return torch.softmax(x.double(), dim)
'''

RESHAPING_MODE = '''
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode


class _Shapes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Size) and len(out) == 2:
            return torch.Size([out[0], 99])  # every weight read as (out, 99)
        return out


_Shapes().__enter__()


class Classifier(nn.Module):
    def __init__(self, d_in, n_classes):
        super().__init__()
        self.linear = nn.Linear(d_in, n_classes)

    def forward(self, x):
        return self.linear(x)
'''


def _leave_modes():
    """Takes the submission's modes off this test process's stacks, so they outlive no test."""
    from torch.utils._python_dispatch import _len_torch_dispatch_stack, _pop_mode

    while _len_torch_dispatch_stack():
        _pop_mode()
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()


def test_a_torch_mode_left_on_by_the_submission_cannot_change_the_dtype_the_grader_reads(tmp_path):
    try:
        h, a = call_softmax(loader_of(sub(tmp_path, activations=NARROWING_MODE)), seeded(0, 2, 3))
    finally:
        _leave_modes()
    assert h["error"] is None, h["error"]
    assert a["out0"].dtype == np.float64 and h["outputs"][0]["dtype"] == "float64"


def test_a_torch_mode_hidden_from_torchs_mode_counters_still_cannot_change_what_the_grader_reads(tmp_path, monkeypatch):
    # The executor lifts the dispatch modes only when torch's counters say one is on; a submission that has read it
    # replaces the counters (module attributes it can reach) so that they say none is.
    monkeypatch.setattr(torch._C, "_len_torch_dispatch_stack", torch._C._len_torch_dispatch_stack)  # put back after
    monkeypatch.setattr(torch._ops, "_len_torch_dispatch_stack_pre_dispatch",
                        torch._ops._len_torch_dispatch_stack_pre_dispatch)
    hiding = NARROWING_MODE.replace("_Narrow().__enter__()\n", "_Narrow().__enter__()\n"
                                    "torch._C._len_torch_dispatch_stack = lambda: 0\n"
                                    "torch._ops._len_torch_dispatch_stack_pre_dispatch = lambda: 0\n")
    assert hiding != NARROWING_MODE
    try:
        h, a = call_softmax(loader_of(sub(tmp_path, activations=hiding)), seeded(0, 2, 3))
    finally:
        _leave_modes()
    assert h["error"] is None, h["error"]
    assert a["out0"].dtype == np.float64 and h["outputs"][0]["dtype"] == "float64"


def test_a_torch_mode_left_on_by_the_submission_cannot_change_the_shapes_an_inspect_reads(tmp_path):
    header = {"op": "inspect", "module": "classifier", "cls": "Classifier", "init": [4, 3], "init_kwargs": {},
              "attrs": [], "build": "cpu"}
    try:
        h, _ = execute(header, {}, loader=loader_of(sub(tmp_path, classifier=RESHAPING_MODE)))
    finally:
        _leave_modes()
    assert h["error"] is None, h["error"]
    assert h["inspect"]["parameters"]["linear.weight"] == [3, 4]


@pytest.mark.parametrize("isolated", [True, False], ids=["grader-process", "sandboxed-child"])
def test_code_the_scan_cannot_read_is_not_imported_from_the_submission(tmp_path, isolated, monkeypatch):
    # A sourceless .pyc (compiled from anything: library calls, a classmate's code) is imported by Python as readily
    # as a .py, but the static scan and the similarity report read only source: so the child imports source only.
    import py_compile

    folder = sub(tmp_path, activations='''
        import torch
        from _helper import twice


        def softmax(x, dim=-1):
            return torch.softmax(twice(x) / 2, dim)
    ''')
    hidden = tmp_path / "_helper.py"
    hidden.write_text("def twice(x):\n    return 2 * x\n")
    py_compile.compile(str(hidden), cfile=str(folder / "_helper.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    # A sandboxed child imports with isolated=False, straight into its own sys.modules and sys.path.
    for name in ("sys.path", "sys.path_hooks"):
        monkeypatch.setattr(name, list(eval(name)))
    monkeypatch.setattr("sys.path_importer_cache", dict(sys.path_importer_cache))
    for name in (*TOY_MODULES, "_helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    h, _ = call_softmax(ModuleLoader(folder, isolated=isolated, lesson=LESSON), seeded(0, 2, 3))
    assert h["error"] is not None and h["error"]["type"] in ("ModuleNotFoundError", "ImportError"), h["error"]
    assert "_helper" in h["error"]["message"]
    # The same helper as source is imported as ever.
    (folder / "_helper.pyc").unlink()
    shutil.copyfile(hidden, folder / "_helper.py")
    for name in (*TOY_MODULES, "_helper"):
        sys.modules.pop(name, None)
    h, _ = call_softmax(ModuleLoader(folder, isolated=isolated, lesson=LESSON), seeded(0, 2, 3))
    assert h["error"] is None, h["error"]


# Each replaces, at import, something of torch or numpy that reads a tensor, so that a float64 answer reads as
# float32: no mode, no frame walk, nothing the scan names. The executor reads with references bound at its import.
_NARROWED = {
    "Tensor.detach": ("torch.Tensor", "detach", "lambda self: _plain(self).float() if _plain(self).dtype == torch.float64 "
                      "else _plain(self)"),
    "Tensor.cpu": ("torch.Tensor", "cpu", "lambda self, *a, **k: _plain(self, *a, **k).float()"),
    "Tensor.contiguous": ("torch.Tensor", "contiguous", "lambda self, *a, **k: _plain(self, *a, **k).float()"),
    "Tensor.numpy": ("torch.Tensor", "numpy", "lambda self, *a, **k: _plain(self, *a, **k).astype('float32')"),
    "numpy.array": ("numpy", "array", "lambda v, *a, **k: _plain(v, *a, **k).astype('float32')"),
    "TensorBase": ("torch._C", "TensorBase", "type('TensorBase', (), {'dtype': property(lambda t: torch.float32), "
                   "'shape': torch._C.TensorBase.shape, 'requires_grad': torch._C.TensorBase.requires_grad})"),
    "torch.float16": ("torch", "float16", "torch.float64"),  # widened to float32 as a float16 answer is
}


@pytest.mark.parametrize("replaced", sorted(_NARROWED))
def test_torch_or_numpy_replaced_by_the_submission_cannot_change_the_dtype_the_grader_reads(tmp_path, monkeypatch,
                                                                                           replaced):
    import importlib

    owner_name, attribute, replacement = _NARROWED[replaced]
    parts = owner_name.split(".")
    owner = importlib.import_module(parts[0])
    for part in parts[1:]:
        owner = getattr(owner, part)
    monkeypatch.setattr(owner, attribute, getattr(owner, attribute))  # put back after the test
    code = f'''
        import numpy
        import torch

        _plain = {owner_name}.{attribute}
        {owner_name}.{attribute} = {replacement}


        def softmax(x, dim=-1):
            return torch.softmax(x.double(), dim)
        '''
    h, a = call_softmax(loader_of(sub(tmp_path, activations=code)), seeded(0, 2, 3))
    assert h["error"] is None, h["error"]
    assert a["out0"].dtype == np.float64 and h["outputs"][0]["dtype"] == "float64", replaced


_RESTRUCTURED = {
    "TensorBase": ("torch._C", "TensorBase", "type('TensorBase', (), {'shape': property(lambda t: torch.Size([3, 99])), "
                   "'requires_grad': _plain.requires_grad, 'dtype': _plain.dtype})"),
    "nn.Parameter": ("torch.nn", "Parameter", "type('Parameter', (), {})"),  # nn.Linear takes its own from elsewhere
}


@pytest.mark.parametrize("replaced", sorted(_RESTRUCTURED))
def test_torch_replaced_by_the_submission_cannot_change_the_structure_an_inspect_reads(tmp_path, monkeypatch, replaced):
    import importlib

    owner_name, attribute, replacement = _RESTRUCTURED[replaced]
    parts = owner_name.split(".")
    owner = importlib.import_module(parts[0])
    for part in parts[1:]:
        owner = getattr(owner, part)
    monkeypatch.setattr(owner, attribute, getattr(owner, attribute))  # put back after the test
    code = RESHAPING_MODE.replace("_Shapes().__enter__()\n", f"_plain = {owner_name}.{attribute}\n"
                                  f"{owner_name}.{attribute} = {replacement}\n")
    header = {"op": "inspect", "module": "classifier", "cls": "Classifier", "init": [4, 3], "init_kwargs": {},
              "attrs": [{"name": "w", "paths": ["linear.weight"]}]}
    h, _ = execute(header, {}, loader=loader_of(sub(tmp_path, classifier=code)))
    assert h["error"] is None, h["error"]
    assert h["inspect"]["parameters"]["linear.weight"] == [3, 4], replaced
    assert h["inspect"]["attrs"]["w"] == {"path": "linear.weight", "type": "Parameter", "kind": "tensor", "shape": [3, 4],
                                          "is_parameter": True}, replaced
