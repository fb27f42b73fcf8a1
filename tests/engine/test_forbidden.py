"""A lesson's forbidden library functions switched off in the sandboxed child (grader/running/forbidden.py),
through a policy built here from the toy lesson's (the library's softmax): its words, kit folders and
from_file rules as the toy declares them, plus every kind of switch-off the engine has (aten kernels, Python
functions, a whole module, a C method). A real lesson's policy against its own routes is tested with that lesson
(tests/<lesson>/).

The switch-off is irreversible, so each check runs in a fresh interpreter that does what the zygote
and a child do (prepare with the policy, then arm), then tries every route to the library's softmax
it knows."""
import copy
import sys
from pathlib import Path

import pytest

from grader import lesson as lessons
from grader.running import forbidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import forbidden_probe  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
TOY = KIT / "tests" / "fixtures" / "lessons" / "toy"


def built_policy() -> dict:
    """The toy's policy with every kind of switch-off filled in: its own switches off only from_file."""
    policy = copy.deepcopy(lessons.load_lesson(str(TOY)).forbidden_policy)
    policy["kernels"]["ops"] = [*policy["kernels"].get("ops", ()), "softmax", "_softmax", "log_softmax", "_log_softmax"]
    policy["python"]["functions"] = [*policy["python"].get("functions", ()), "torch.nn.functional:softmax",
                                     "torch.nn.functional:log_softmax", "torch.nn.modules.activation:Softmax.forward"]
    policy["python"]["modules"] = [*policy["python"].get("modules", ()), "torch._refs.special"]
    return policy


POLICY = built_policy()

ROUTES = r'''
def undo_then_softmax():
    undo_registrations("_softmax")
    return torch.softmax(q, -1)

def denied_module_from_source():
    path = os.path.join(os.path.dirname(torch.__file__), "_refs", "special", "__init__.py")
    spec = importlib.util.spec_from_file_location("special_copy", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

routes.update({
    "torch.softmax": lambda: torch.softmax(q, -1),
    "Tensor.softmax": lambda: q.softmax(-1),
    "F.softmax": lambda: F.softmax(q, -1),
    "with gradients": lambda: torch.softmax(q.clone().requires_grad_(), -1),
    "inference mode": lambda: torch.inference_mode()(torch.softmax)(q, -1),
    "torch._C._VariableFunctions": lambda: torch._C._VariableFunctions.softmax(q, -1),
    "aten _softmax": lambda: torch.ops.aten._softmax(q, -1, False),
    "aten log_softmax": lambda: torch.ops.aten._log_softmax(q, -1, False).exp(),
    "log_softmax then exp": lambda: torch.log_softmax(q, -1).exp(),
    "decompose": lambda: torch.ops.aten.softmax.int.decompose(q, -1),
    "vmap": lambda: torch.vmap(lambda a: torch.softmax(a, -1))(q4),
    "meta device": lambda: torch.softmax(q.to("meta"), -1),
    "undo the registration": undo_then_softmax,
    "nn.Softmax": lambda: torch.nn.Softmax(dim=-1)(q),
    "subclass of it": lambda: type("Mine", (torch.nn.Softmax,), {})(dim=-1)(q),
    "module path": lambda: torch.nn.modules.activation.Softmax(dim=-1)(q),
    "a function of the denied module": lambda: importlib.import_module("torch._refs.special").softmax(q, -1),
    "the denied module from source": denied_module_from_source,
})
'''
HONEST = r'''
scores = x @ x.transpose(-2, -1) / 2
e = torch.exp(scores - scores.amax(-1, keepdim=True))
w = e / e.sum(-1, keepdim=True)
(w @ x).sum().backward()
honest["softmax by hand with gradients"] = bool(torch.isfinite(x.grad).all())
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return forbidden_probe.run(tmp_path_factory.mktemp("probe"), policy=POLICY, standins=TOY / "standins.py",
                               kit_module="grader.release.notebook", routes=ROUTES, honest=HONEST)


LIBRARY = ["torch.softmax", "Tensor.softmax", "F.softmax", "with gradients", "inference mode",
           "torch._C._VariableFunctions", "aten _softmax", "aten log_softmax", "log_softmax then exp", "decompose",
           "vmap", "meta device", "undo the registration", "nn.Softmax", "subclass of it", "module path",
           "a function of the denied module", "the denied module from source", "reload functional",
           "a second copy from source", "read the source", "the kit's stand-ins", "torch.from_file"]


@pytest.mark.parametrize("route", LIBRARY)
def test_every_route_to_the_library_gives_no_answer_and_says_why(probe, route):
    assert probe["outcome"][route] != "answered"
    assert forbidden.MARK in probe["outcome"][route], probe["outcome"][route]


def test_a_refusal_says_the_lessons_words():
    """What is switched off and why are the lesson's ([message] of its forbidden.toml); the engine's words
    are the mark the grader finds, and a neutral name when a lesson gives none."""
    said = forbidden.refusal(POLICY, "torch.nn.functional.softmax")
    words = POLICY["message"]
    assert said == f"{words['what']} {forbidden.MARK}: torch.nn.functional.softmax. {words['why']}"
    assert forbidden.refusal(POLICY, "torch.softmax").startswith("the library's softmax is switched off in the grader")
    assert forbidden.refusal({}, "torch.x") == f"{forbidden.DEFAULT_WHAT} {forbidden.MARK}: torch.x."


def test_the_child_refuses_with_the_lessons_words(probe):
    words = POLICY["message"]
    for route in ("F.softmax", "nn.Softmax", "aten _softmax", "a function of the denied module"):
        assert f"{words['what']} {forbidden.MARK}" in probe["outcome"][route] and words["why"] in probe["outcome"][route]
    assert f"{words['what']} {forbidden.MARK}: this file (the source of {words['what']})" in \
        probe["outcome"]["read the source"], probe["outcome"]["read the source"]
    # The grader's own files are not the library: their refusal says whose they are, and the grade words it so.
    assert f"{forbidden.KIT_FILES} {forbidden.MARK}" in probe["outcome"]["the kit's stand-ins"], \
        probe["outcome"]["the kit's stand-ins"]


@pytest.mark.parametrize("route", ["a folder fd", "a path with ..", "symlink", "chdir", "ctypes", "import the kit",
                                   "setprofile", "settrace"])
def test_the_means_to_get_round_it_are_refused(probe, route):
    assert probe["outcome"][route] != "answered"
    assert "PermissionError" in probe["outcome"][route] or "No module named" in probe["outcome"][route]


@pytest.mark.parametrize("route", ["UntypedStorage.from_file", "FloatStorage.from_file"])
def test_storages_cannot_read_a_file_beneath_the_audit_hook(probe, route):
    # StorageBase.from_file opens the file from C++ (the audit hook never sees it): it is gone from the
    # type, and what the name finds further up (torch's Python base classes) only raises.
    assert probe["outcome"][route] != "answered"


def test_no_heap_walk_finds_the_hook(probe):
    assert probe["outcome"]["hooks found by a heap walk"] == 0


def test_honest_code_is_unaffected(probe):
    assert probe["honest"] == {"softmax by hand with gradients": True, "nn layers": True,
                               "files in scratch": True, "numpy files": True}


def test_the_hook_looks_up_no_name_a_student_could_rebind():
    # Every name the hook's code loads from globals or builtins could be rebound by student code;
    # it must load none (only attributes of values it closes over).
    import dis

    code = next(c for c in forbidden._arm_hook.__code__.co_consts if getattr(c, "co_name", "") == "hook")
    loads = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    assert loads == set()


def test_the_policy_is_one_file_of_lesson_data():
    toy = lessons.load_lesson(str(TOY))
    policy = toy.forbidden_policy
    assert policy == forbidden.load_policy(toy.forbidden_path)
    assert "softmax" in policy["names"]["torch_only"]
    assert "from_file" in policy["kernels"]["ops"]
    assert set(policy["standins"]["implements"]) >= {name for names in toy.standin_names.values()
                                                     for name in names.values()}
