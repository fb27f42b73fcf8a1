"""Day 13's forbidden library functions switched off in the sandboxed child (grader/running/forbidden.py):
its policy (library attention: the richest there is) against every route to library attention known. The
engine's switch-off itself is tested through a policy built from the toy's (tests/engine/test_forbidden.py).

The switch-off is irreversible, so each check runs in a fresh interpreter that does what the zygote
and a child do (prepare with the lesson's policy, then arm), then tries every route to library attention
it knows."""
import sys
from pathlib import Path

import pytest

from grader import lesson as lessons
from grader.running import forbidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import forbidden_probe  # noqa: E402

KIT = Path(__file__).resolve().parents[2]
DAY13 = lessons.load_lesson("day13")

ROUTES = r'''
def mhaf():
    return F.multi_head_attention_forward(q, q, q, 4, 2, torch.randn(12, 4), None, None, None, False, 0.0,
                                          torch.randn(4, 4), None)

def undo_then_sdpa():
    undo_registrations("scaled_dot_product_attention")
    return F.scaled_dot_product_attention(q, q, q)

def onnx_decomposition():
    table = importlib.import_module("torch.onnx.ops._impl").ONNX_ATEN_DECOMP_TABLE
    return [fn(q4, q4, q4) for op, fn in table.items() if "Attention" in str(op)] or 1 / 0

def compiler_patterns():
    path = os.path.join(os.path.dirname(torch.__file__), "_inductor", "fx_passes", "fuse_attention.py")
    spec = importlib.util.spec_from_file_location("patterns", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

routes.update({
    "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, q, q),
    "with gradients": lambda: F.scaled_dot_product_attention(*(q.clone().requires_grad_() for _ in range(3))),
    "inference mode": lambda: torch.inference_mode()(F.scaled_dot_product_attention)(q, q, q),
    "torch._C._nn": lambda: torch._C._nn.scaled_dot_product_attention(q, q, q),
    "aten math": lambda: torch.ops.aten._scaled_dot_product_attention_math(q, q, q),
    "aten flash cpu": lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q4, q4, q4),
    "decompose": lambda: torch.ops.aten.scaled_dot_product_attention.default.decompose(q, q, q),
    "vmap": lambda: torch.vmap(lambda a: F.scaled_dot_product_attention(a, a, a))(q4),
    "meta device": lambda: F.scaled_dot_product_attention(*(q.to("meta") for _ in range(3))),
    "decomposition table": lambda: [fn(q4, q4, q4) for op, fn in __import__("torch._decomp").\
        _decomp.decomposition_table.items() if "attention" in str(op)] or 1 / 0,
    "undo the registration": undo_then_sdpa,
    "nn.MultiheadAttention": lambda: torch.nn.MultiheadAttention(4, 2),
    "subclass of it": lambda: type("Mine", (torch.nn.MultiheadAttention,), {})(4, 2),
    "module path": lambda: torch.nn.modules.activation.MultiheadAttention(4, 2),
    "multi_head_attention_forward": mhaf,
    "TransformerEncoderLayer": lambda: torch.nn.TransformerEncoderLayer(4, 2, 8),
    "Transformer": lambda: torch.nn.Transformer(4, 2, 1, 1, 8),
    "quantizable MultiheadAttention": lambda: torch.ao.nn.quantizable.MultiheadAttention(4, 2),
    "flex attention": lambda: importlib.import_module("torch.nn.attention.flex_attention").flex_attention(q4, q4, q4),
    "native multi-head op": lambda: torch._native_multi_head_attention(q, q, q, 4, 2, torch.randn(12, 4),
                                                                       torch.randn(12), torch.randn(4, 4), torch.randn(4)),
    "onnx attention": lambda: importlib.import_module("torch.onnx.ops").attention(q4, q4, q4),
    "onnx attention_23's function": lambda: importlib.import_module("torch.onnx.ops._impl").attention_23._init_fn(q4, q4, q4),
    "onnx decomposition table": onnx_decomposition,
    "the compiler's attention patterns": compiler_patterns,
})
'''
HONEST = r'''
w = torch.softmax(x @ x.transpose(-2, -1) / 2, dim=-1)
(w @ x).sum().backward()
honest["attention by hand with gradients"] = bool(torch.isfinite(x.grad).all())
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return forbidden_probe.run(tmp_path_factory.mktemp("probe"), policy=DAY13.forbidden_policy,
                               standins=KIT / "grader" / "day13" / "standins.py", kit_module="grader.day13.standins",
                               routes=ROUTES, honest=HONEST)


LIBRARY = ["F.scaled_dot_product_attention", "with gradients", "inference mode", "torch._C._nn", "aten math",
           "aten flash cpu", "decompose", "vmap", "meta device", "decomposition table", "undo the registration",
           "nn.MultiheadAttention", "subclass of it", "module path", "multi_head_attention_forward",
           "TransformerEncoderLayer", "Transformer", "quantizable MultiheadAttention", "flex attention",
           "native multi-head op", "reload functional", "a second copy from source", "read the source",
           "the kit's stand-ins", "torch.from_file", "onnx attention", "onnx attention_23's function",
           "onnx decomposition table", "the compiler's attention patterns"]


@pytest.mark.parametrize("route", LIBRARY)
def test_every_route_to_library_attention_gives_no_answer_and_says_why(probe, route):
    assert probe["outcome"][route] != "answered"
    assert forbidden.MARK in probe["outcome"][route], probe["outcome"][route]


def test_a_refusal_says_the_lessons_words():
    """What is switched off and why are the lesson's ([message] of its forbidden.toml); the engine's words
    are the mark the grader finds, and a neutral name when a lesson gives none."""
    said = forbidden.refusal(DAY13.forbidden_policy, "torch.nn.functional.multi_head_attention_forward")
    words = DAY13.forbidden_policy["message"]
    assert said == (f"{words['what']} {forbidden.MARK}: torch.nn.functional.multi_head_attention_forward. "
                    f"{words['why']}")
    toy = lessons.load_lesson(str(KIT / "tests" / "fixtures" / "lessons" / "toy")).forbidden_policy
    assert forbidden.refusal(toy, "torch.softmax").startswith("the library's softmax is switched off in the grader")
    assert forbidden.refusal({}, "torch.x") == f"{forbidden.DEFAULT_WHAT} {forbidden.MARK}: torch.x."


def test_the_child_refuses_with_the_lessons_words(probe):
    words = DAY13.forbidden_policy["message"]
    for route in ("F.scaled_dot_product_attention", "nn.MultiheadAttention", "aten math"):
        assert f"{words['what']} {forbidden.MARK}" in probe["outcome"][route] and words["why"] in probe["outcome"][route]
    assert f"{words['what']} {forbidden.MARK}: this file (the source of {words['what']})" in \
        probe["outcome"]["read the source"], probe["outcome"]["read the source"]


# The means to get round the policy (a folder fd, symlinks, ctypes, storages read from files, a heap walk for
# the hook) are the engine's, whatever the policy: tests/engine/test_forbidden.py checks them on the toy's.


def test_honest_code_is_unaffected(probe):
    assert probe["honest"] == {"attention by hand with gradients": True, "nn layers": True,
                               "files in scratch": True, "numpy files": True}


def test_the_policy_is_one_file_of_lesson_data():
    policy = DAY13.forbidden_policy
    assert policy == forbidden.load_policy(DAY13.forbidden_path)
    assert "MultiheadAttention" in policy["names"]["anywhere"]
    assert "scaled_dot_product_attention" in policy["kernels"]["ops"]
    assert set(policy["standins"]["implements"]) >= {name for names in DAY13.standin_names.values()
                                                     for name in names.values()}
