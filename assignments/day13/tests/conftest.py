"""Shared set-up for the visible tests: your four files are imported from the folder above tests/.

Each test gets your module through a fixture (`self_attention`, `multihead`, `positional`, `block`),
so a file that does not import yet fails only the tests that need it, with the import error shown.
A task you have not written yet (the stub raises NotImplementedError) shows up as one short failure.
"""
import functools
import importlib
import json
import math
import sys
import traceback
import types
from pathlib import Path

import pytest
import torch

import diagnose  # the graders' own fact finder (grader/judging/diagnose.py), shipped beside these tests

STUDENT_DIR = Path(__file__).resolve().parents[1]
if str(STUDENT_DIR) not in sys.path:
    sys.path.insert(0, str(STUDENT_DIR))


# What the visible tests know about mistakes, in one data file made by the kit from the graders' own
# sources (numbers and the rubric's words, no code): the hints the graders give for each known mistake,
# that mistake's outputs on these tests' fixed inputs (its "fingerprint"), and the library-attention rule.
KNOWN_MISTAKES = Path(__file__).resolve().parent / "known_mistakes.json"


def _read_known_mistakes():
    try:
        return json.loads(KNOWN_MISTAKES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


KNOWN = _read_known_mistakes()
FORBIDDEN = KNOWN.get("forbidden", {})


# Library attention is not allowed (README, "Not allowed"). It is watched from here, before your files
# are imported, so that every use is seen however it was imported; the graders do the same.
_library_attention_used = set()


def _watch(owner, attribute, name):
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def watched(*args, **kwargs):
        _library_attention_used.add(name)
        return original(*args, **kwargs)

    setattr(owner, attribute, watched)


_watch(torch.nn.functional, "scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")
_watch(torch.nn.functional, "multi_head_attention_forward", "torch.nn.functional.multi_head_attention_forward")
for _cls in ("MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerEncoderLayer",
             "TransformerDecoder", "TransformerDecoderLayer"):
    _watch(getattr(torch.nn, _cls), "__init__", f"torch.nn.{_cls}")


def _forbidden_message(names):
    """The graders' own words (rubric's forbidden_message) for a part that reaches library attention."""
    text = FORBIDDEN.get("message") or ("Your code reaches {names}, which is not allowed (README, \"Not allowed\"): "
                                        "write the matrix products and the softmax yourself (handout §5, §7).")
    return text.format(names=", ".join(sorted(names)))


# The graders also read your files: naming one of these APIs costs the part, even in code that never
# runs. The same reading (the graders' list, forbidden.toml) is done here, so the visible tests say so too.
@functools.lru_cache(maxsize=None)
def _forbidden_in_source(part):
    """The forbidden names that `part`.py reaches by name: `anywhere` names on any object or as a string,
    `torch_only` names through torch (torch, F, nn, functional or an alias of them), imports of the kit."""
    import ast

    try:
        tree = ast.parse((STUDENT_DIR / f"{part}.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    anywhere, torch_only = set(FORBIDDEN.get("anywhere", ())), set(FORBIDDEN.get("torch_only", ()))
    kit = set(FORBIDDEN.get("kit_packages", ()))
    torch_names, found, attributes = {"torch", "F", "nn", "functional"}, set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            torch_names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
            found |= {f"the kit's own code ({a.name})" for a in node.names if a.name.split(".")[0] in kit}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if module.split(".")[0] == "torch":
                torch_names |= {a.asname or a.name for a in node.names}
                found |= {a.name for a in node.names if a.name in anywhere | torch_only}
            elif module.split(".")[0] in kit:
                found.add(f"the kit's own code ({module})")
        elif isinstance(node, ast.Attribute) and node.attr in anywhere | torch_only:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            attributes.append((getattr(root, "id", None), node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.replace(":", ".").split(".")
            if node.value in anywhere or (parts[0] == "torch" and parts[-1] in anywhere | torch_only and len(parts) > 1):
                found.add(parts[-1])
    found |= {attr for root, attr in attributes if attr in anywhere or root in torch_names}
    return tuple(sorted(found))


class _DoesNotImport:
    """Stands in for a module that raised on import: any use fails the test with the reason."""

    def __init__(self, name, error):
        self._message = (
            f"{name}.py does not import, so this test cannot run. Fix this first:\n"
            + "".join(traceback.format_exception_only(type(error), error))
        )
        # The error is shown once, in the first test that needs the file; the others say where it is,
        # so one broken file does not print the same message once per test.
        self._again = f"{name}.py does not import (the error is shown in the first failing test that needs it)."
        self._shown = False

    def __getattr__(self, attribute):
        message, self._shown = (self._again if self._shown else self._message), True
        pytest.fail(message, pytrace=False)


class StandInAttention(torch.nn.Module):
    """Takes the place of your MultiHeadAttention while your TransformerBlock is tested, as in the graders.

    It is not attention: each token gets proj(mean of the tokens the mask lets it see), which is
    enough to check the block's wiring, shapes and mask without depending on Task 4.
    """

    def __init__(self, d_model, n_heads=1, *args, **kwargs):
        super().__init__()
        self.d_model, self.h = d_model, n_heads
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x, mask=None, *args, **kwargs):
        T = x.shape[-2]
        mask = torch.ones(T, T) if mask is None else torch.as_tensor(mask)
        if mask.dim() == 4:
            mask = mask[:, 0]  # (B or 1, T or 1, T): the first head's slice
        allowed = torch.broadcast_to(mask != 0, (*mask.shape[:-2], T, T))
        share = allowed.to(x.dtype) / allowed.sum(-1, keepdim=True).clamp(min=1).to(x.dtype)
        return self.proj(share @ x)


# Your MultiHeadAttention is tested on a stand-in for your scaled_dot_product_attention, so a bug in
# Task 1 fails the self-attention tests only. The stand-in is not attention: it knows the answers
# (outputs, and the slopes backward needs) for the inputs the multi-head tests give it, computed
# from the handout's formula and stored in attention_answers.pt, and nothing else.
ANSWERS = Path(__file__).resolve().parent / "attention_answers.pt"
_answers = []
NOT_AN_EXPECTED_INPUT = (
    "MultiHeadAttention passed scaled_dot_product_attention a Q, K, V (shapes {shapes}{mask}) that are not the "
    "heads of qkv(x) this test expects. The multi-head tests run your MultiHeadAttention on a stand-in attention "
    "that only knows the right inputs: split q, k, v = qkv(x).chunk(3, dim=-1) in that order, view(B, T, h, d_k) "
    "so that head i uses features i*d_k:(i+1)*d_k, "
    "transpose(1, 2), and pass the mask on unchanged (handout §7).")


def _known_answers():
    if not _answers:
        _answers.extend(torch.load(ANSWERS, weights_only=True))
    return _answers


def _views(shape):
    """Index tuples that select, from recorded (B, h, T, d) tensors, what one call may hold: all heads,
    one head of every sentence, one sentence, or one head of one sentence."""
    B, h = shape[0], shape[1]
    yield ()
    yield from ((slice(None), i) for i in range(h))
    yield from ((b,) for b in range(B))
    yield from ((b, i) for b in range(B) for i in range(h))


def _allowed(mask, shape):
    if mask is None:
        return torch.ones(shape, dtype=torch.bool)
    return torch.broadcast_to(torch.as_tensor(mask) != 0, shape)


def _lookup(Q, K, V, mask):
    q, k, v = (t.detach().to(torch.float64) for t in (Q, K, V))
    for record in _known_answers():
        weights_shape = record["weights"].shape
        for index in _views(record["Q"].shape):
            rq = record["Q"][index]
            if rq.shape != q.shape or k.shape != rq.shape or v.shape != rq.shape:
                continue
            if not all(torch.allclose(a, record[n][index], atol=1e-4, rtol=1e-4) for a, n in ((q, "Q"), (k, "K"), (v, "V"))):
                continue
            expected_mask = _allowed(record["mask"], weights_shape)[index]
            try:
                if not torch.equal(_allowed(mask, expected_mask.shape), expected_mask):
                    continue
            except RuntimeError:
                continue
            return record, index
    mask_text = "" if mask is None else f", mask {tuple(torch.as_tensor(mask).shape)}"
    given = torch.stack([q, k, v]) if q.shape == k.shape == v.shape else torch.cat([t.reshape(-1) for t in (q, k, v)])
    given_mask = None if mask is None else torch.as_tensor(mask).detach().to(torch.float64)
    evidence = EVIDENCE.compared("attention_input", given, given_mask, True)
    pytest.fail(NOT_AN_EXPECTED_INPUT.format(shapes=", ".join(str(tuple(t.shape)) for t in (Q, K, V)), mask=mask_text)
                + evidence, pytrace=False)


class _KnownAttention(torch.autograd.Function):
    """Forward: the stored answer. Backward: the stored slopes (one Jacobian per head) times the incoming gradient."""

    @staticmethod
    def forward(ctx, Q, K, V, record, index):
        ctx.record, ctx.index, ctx.dtype = record, index, Q.dtype
        return record["out"][index].to(Q.dtype).clone(), record["weights"][index].to(Q.dtype).clone()

    @staticmethod
    def backward(ctx, grad_out, grad_weights):
        record, index = ctx.record, ctx.index
        if record["jacobian"] is None:
            pytest.fail("the stand-in attention knows the gradient only for the inputs of "
                        "test_s7_projections_forward_and_backward", pytrace=False)
        B, h, T, d = record["Q"].shape
        heads = [(b, i) for b in range(B) for i in range(h)]
        full_out = torch.zeros(B, h, T, d, dtype=torch.float64)
        full_w = torch.zeros(B, h, T, T, dtype=torch.float64)
        if grad_out is not None:
            full_out[index] = grad_out.to(torch.float64)
        if grad_weights is not None:
            full_w[index] = grad_weights.to(torch.float64)
        grads = torch.zeros(3, B, h, T, d, dtype=torch.float64)
        for b, i in heads:
            incoming = torch.cat([full_out[b, i].reshape(-1), full_w[b, i].reshape(-1)])
            grads[:, b, i] = (record["jacobian"][b, i].T @ incoming).reshape(3, T, d)
        return (*(g[index].to(ctx.dtype) for g in grads), None, None)


def _stand_in_attention(Q, K, V, mask=None):
    record, index = _lookup(Q, K, V, mask)
    return _KnownAttention.apply(Q, K, V, record, index)


class _NotInTheStandIn:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        pytest.fail(f"the multi-head tests give MultiHeadAttention a stand-in self_attention.py that has no {self.name}: "
                    "use scaled_dot_product_attention (and the mask you are given)", pytrace=False)


def _stand_in(name):
    module = types.ModuleType(name)
    module.__doc__ = f"the visible tests' stand-in for {name}.py"
    if name == "multihead":
        module.MultiHeadAttention = StandInAttention
    else:
        module.scaled_dot_product_attention = _stand_in_attention
        module.causal_mask = _NotInTheStandIn("causal_mask")
        module.SelfAttention = _NotInTheStandIn("SelfAttention")
    return module


# Each part is tested on its own, as the graders grade it: multihead.py is imported with the stand-in
# attention above in place of self_attention.py, and block.py with a stand-in in place of multihead.py,
# so a bug in one file fails that file's tests only.
STAND_INS = {"multihead": ("self_attention",), "block": ("multihead",)}
_loaded = {}


def _student_module(name):
    if name in _loaded:
        return _loaded[name]
    replaced = STAND_INS.get(name, ())
    saved = {dep: sys.modules.pop(dep, None) for dep in (name, *replaced)}
    sys.modules.update({dep: _stand_in(dep) for dep in replaced})
    try:
        module = importlib.import_module(name)
    except Exception as error:  # a broken file must fail its tests, not stop the whole run
        module = _DoesNotImport(name, error)
    finally:
        for dep in replaced:
            sys.modules.pop(dep, None)
        sys.modules.pop(name, None)
        sys.modules.update({dep: m for dep, m in saved.items() if m is not None})
    _loaded[name] = module
    return module


class _InEvalMode:
    """Your module as the tests use it: every layer you build is switched to eval mode, as the graders do,
    so a dropout you added (fine: it is off in eval mode) never makes a result random."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            return functools.wraps(value, updated=())(lambda *args, **kwargs: value(*args, **kwargs).eval())
        return value


@pytest.fixture
def self_attention():
    return _InEvalMode(_student_module("self_attention"))


@pytest.fixture
def multihead():
    return _InEvalMode(_student_module("multihead"))


@pytest.fixture
def positional():
    return _InEvalMode(_student_module("positional"))


@pytest.fixture
def block():
    return _InEvalMode(_student_module("block"))


# Tests run in the order of the tasks (README), not in the alphabetical order of their files.
PART_ORDER = ("self_attention", "multihead", "positional", "block")


def pytest_collection_modifyitems(items):
    def task(item):
        return next((n for n, part in enumerate(PART_ORDER) if item.get_closest_marker(part)), len(PART_ORDER))

    items.sort(key=task)  # a stable sort: within a part, the file's own order


# A stub's NotImplementedError is shown in full once; the tests after it that need the same task say so in a line.
# The same goes for any error raised at the same line of your code.
_unfinished_seen = {}
_errors_seen = {}


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    _library_attention_used.clear()
    try:
        outcome = yield
    except NotImplementedError as error:
        message = _not_implemented(error, pyfuncitem.name)
    except Exception as error:  # noqa: BLE001 - an error in your code becomes one short, located message
        message = _raised_in_student_code(error, pyfuncitem.name)
        if message is None:
            raise
    else:
        part = next((p for p in PART_ORDER if pyfuncitem.get_closest_marker(p)), None)
        named = _forbidden_in_source(part) if part else ()
        if not named and not _library_attention_used:
            return outcome
        message = _forbidden_message(set(named) | _library_attention_used)
    # Failing outside the except block keeps the report to a few lines, without the chained traceback.
    pytest.fail(message, pytrace=False)


def _not_implemented(error, test):
    text = str(error) or "a task this test needs is not implemented yet"
    first = _unfinished_seen.setdefault(text, test)
    if first != test:
        return f"{text.splitlines()[0]} (as in {first} above)"
    return text + "\nWrite that task in your file, then run `make test` again."


NOT_YOURS = {"tests", "tools", ".venv", "venv", "env", "site-packages"}  # folders beside your files that hold no code of yours


# When these tests run on a notebook's code (tools/notebook_tests.py), the file names its kernel gave
# the notebook's cells, and how to name them ("Cell In[7]"): an error raised there is yours too.
NOTEBOOK_CELLS = {}


def _student_frames(error):
    """The traceback's frames that are in your files or notebook cells (not the tests, not torch)."""
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename).resolve()
        if frame.filename in NOTEBOOK_CELLS or (
                STUDENT_DIR in path.parents and not NOT_YOURS.intersection(path.relative_to(STUDENT_DIR).parts[:-1])):
            frames.append(frame)
    return frames


def _file_name(frame, relative=False):
    if frame.filename in NOTEBOOK_CELLS:
        return NOTEBOOK_CELLS[frame.filename]
    return Path(frame.filename).resolve().relative_to(STUDENT_DIR) if relative else Path(frame.filename).name


def _student_line(error):
    frames = _student_frames(error)
    if not frames:
        return ""
    frame = frames[-1]
    return f"{_file_name(frame, relative=True)}:{frame.lineno}, in {frame.name}: {(frame.line or '').strip()}"


# Words that follow from a fact about an error: which fact, then the words (nothing here is said without it).
ERROR_HINTS = {
    "matmul_error.batched_T": ("Hint: on a batch of matrices (3 or more dimensions) .T reverses every dimension, not the "
                               "last two; write K.transpose(-2, -1). See the handout, §3 \"A common error and its message\"."),
    "matmul_error": ("Hint: the inner sizes of a matrix product must match: print the shapes of both sides. "
                     "See the handout, §3 \"A common error and its message\"."),
}

MATMUL_WORDS = ("size of tensor", "batch2", "mat1 and mat2", "must match", "Expected size", "cannot be multiplied",
                "shapes cannot", "dimension")


def _raised_in_student_code(error, test):
    """One short message for an exception raised in your code: what, where, and a pointer for known patterns.

    None when the exception did not come from your files (then pytest reports it as usual)."""
    frames = _student_frames(error)
    if not frames:
        return None
    place = f"{type(error).__name__} at {_file_name(frames[-1])}:{frames[-1].lineno}"
    first = _errors_seen.setdefault(place, test)
    if first != test:
        return f"your code raised {place} (as in {first} above)"
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:300] + " ..."
    message = f"your code raised {type(error).__name__}: {text}\n  at {_student_line(error)}"
    if len(frames) > 1:
        callers = ", ".join(f"{_file_name(f)}:{f.lineno}" for f in frames[:-1][-3:])
        message += f"\n  called from {callers}"
    fact = _error_fact(error, frames[-1].line or "")
    if fact:
        message += "\n" + ERROR_HINTS[fact]
    return message


def _error_fact(error, line):
    """What the error and the line that raised it show: a size mismatch in a matrix product, on a line
    that uses .T (the fact `matmul_error.batched_T`) or another product (`matmul_error`); else None."""
    if not (isinstance(error, (RuntimeError, ValueError)) and any(word in str(error) for word in MATMUL_WORDS)):
        return None
    if ".T" in line.replace(" ", ""):
        return "matmul_error.batched_T"
    if "@" in line or "matmul" in line or "bmm" in line:
        return "matmul_error"
    return None


class Check:
    """Comparisons whose failure message shows expected, got, where they differ most, and what the evidence says.

    A failure names a misconception only when your numbers are those of a known mistake (see "Evidence"
    below); otherwise `hint` (what the comparison requires) is shown."""

    @staticmethod
    def tensor(value, what):
        if isinstance(value, torch.Tensor):
            return value.detach()
        pytest.fail(f"{what}: expected a torch.Tensor, got {type(value).__name__}", pytrace=False)

    @staticmethod
    def pair(result, what):
        """(out, weights) from a function that must return two tensors."""
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            pytest.fail(f"{what} must return a pair (out, weights), got {type(result).__name__}",
                        pytrace=False)
        return Check.tensor(result[0], f"{what}: out"), Check.tensor(result[1], f"{what}: weights")

    def shape(self, value, expected, what):
        value = self.tensor(value, what)
        failed = tuple(value.shape) != tuple(expected)
        evidence = EVIDENCE.compared("shape", value, None, failed)
        if failed:
            pytest.fail(f"{what}: expected shape {tuple(expected)}, got {tuple(value.shape)}" + evidence, pytrace=False)

    def close(self, got, expected, what, *, decimals=None, atol=1e-5, hint="", when=(), facts=None, weights=None,
              allowed=None, means=None):
        """got ≈ expected; `decimals` compares at the handout's rounding (half a unit of the last place).

        On a failure the message shows what differs and where, then what the numbers show: a known mistake
        whose numbers these are (its words), else the facts diagnose.py finds (`facts`: its options for
        this comparison; `weights`: attention weights checked as distributions, with `allowed` for a mask;
        `means`: the fact this comparison's failure itself establishes) and `hint` only when one of the
        facts in `when` was found."""
        got = self.tensor(got, what).to(torch.float64)
        if isinstance(expected, torch.Tensor):
            expected = expected.detach()
        expected = torch.as_tensor(expected, dtype=torch.float64)
        if decimals is not None:
            atol = 0.5 * 10 ** -decimals + 1e-9
        if tuple(got.shape) != tuple(expected.shape):
            evidence = EVIDENCE.compared("close", got, expected, True)
            found = EVIDENCE.facts(got, expected, facts, weights, allowed, means, atol)
            pytest.fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
                        + EVIDENCE.words(evidence, found, hint, when), pytrace=False)
        gap = (got - expected).abs().nan_to_num(nan=float("inf"))  # NaN counts as the largest gap
        bad = ~(gap <= atol)
        evidence = EVIDENCE.compared("close", got, expected, bool(bad.any()))
        if bad.any():
            shown = 4 if decimals is None else decimals + 1
            found = EVIDENCE.facts(got, expected, facts, weights, allowed, means, atol)
            pytest.fail(f"{what}\n" + _difference(got, expected, gap, bad, atol, shown)
                        + EVIDENCE.words(evidence, found, hint, when), pytrace=False)

    @staticmethod
    def observe(*facts):
        """Facts this test found with calls of its own (a repeated call, a changed sentence), told with its
        next failure."""
        EVIDENCE.extra += [f for f in facts if f not in EVIDENCE.extra]

    @staticmethod
    def seen():
        """The facts this test has observed so far."""
        return list(EVIDENCE.extra)

    @staticmethod
    def repeat(call):
        """Call `call` twice: when the two answers differ, the test's failures say that something random runs."""
        with torch.no_grad():
            first, second = (Check.tensor(call(), "the same call, run twice") for _ in range(2))
        Check.observe(*diagnose.repeat(first.numpy(), second.numpy()))
        return first


# -- Evidence: naming a misconception only when the numbers point to it --------------------------------
# known_mistakes.json holds, for each test, the first comparison that each of the graders' catalogued
# mistakes fails and what that mistake gives there (a sample of at most SAMPLE numbers, rounded). When
# your failing comparison gives the same numbers as one (or several) of them, the hint names it, in the
# graders' words. Otherwise the message says what differs and does not guess.
SAMPLE = 64
MATCH_ATOL, MATCH_RTOL = 1e-4, 1e-3  # the graders' tolerance for "the same mistake"


def fingerprint(tensor):
    """A compact, comparable summary of a tensor: its shape and at most SAMPLE of its values, evenly spread."""
    flat = tensor.detach().to(torch.float64).reshape(-1)
    if flat.numel() > SAMPLE:
        flat = flat[torch.linspace(0, flat.numel() - 1, SAMPLE, dtype=torch.float64).round().long()]
    return {"shape": list(tensor.shape), "values": flat.tolist()}


def _same(stored, seen):
    if stored.get("shape") != seen["shape"] or len(stored.get("values", ())) != len(seen["values"]):
        return False
    values = [v for v in seen["values"]]
    scale = max([1.0] + [abs(v) for v in stored["values"] if isinstance(v, (int, float)) and math.isfinite(v)])
    for a, b in zip(stored["values"], values):
        a = float(a) if isinstance(a, str) else a  # "nan", "inf", "-inf"
        if math.isnan(a) or math.isnan(b):
            if not (math.isnan(a) and math.isnan(b)):
                return False
        elif a != b and not abs(a - b) <= MATCH_ATOL * scale + MATCH_RTOL * abs(a):
            return False
    return True


class Evidence:
    """Counts the comparisons of the running test; on a failure, the known mistakes that give the same numbers."""

    def __init__(self):
        self.test, self.count = None, 0
        self.record = None  # the kit's fingerprint generator listens here: record(test, n, kind, got, expected, failed)
        self.told = None  # the kit's diagnostics audit listens here: told(test, what was found and said)
        self.extra, self.matched = [], []

    def start(self, test):
        self.test, self.count = test, 0
        self.extra, self.matched = [], []

    def facts(self, got, expected, options, weights, allowed, means, atol):
        """What the numbers of a failed comparison show (diagnose.py), with the test's own observations."""
        found = []
        try:
            found = diagnose.compare(got.numpy(), expected.numpy(), atol=atol, rtol=0.0, **(options or {}))
            if weights is not None:
                mask = None if allowed is None else (torch.as_tensor(allowed) != 0).numpy()
                found += diagnose.distributions(weights.detach().to(torch.float64).numpy(), mask)
        except Exception:  # noqa: BLE001 - a fact that cannot be computed is not claimed
            pass
        if means:
            found.append(dict(means) if isinstance(means, dict) else {"id": means})
        found += [f for f in self.extra if f not in found]
        if self.told is not None:
            self.pending = {"facts": found, "got": got.tolist(), "expected": expected.tolist(),
                            "options": {k: v for k, v in (options or {}).items() if k != "allowed"}, "atol": atol,
                            "allowed": _allowed_list(allowed if allowed is not None else (options or {}).get("allowed")),
                            "weights": None if weights is None else weights.detach().tolist()}
        return found

    def words(self, evidence, found, hint, when):
        """The words of a failure: a known mistake's when the numbers are its, else the facts' and the hint
        when one of its facts is there. Nothing names a cause the numbers do not show."""
        shown = bool(hint) and bool(diagnose.matched(found, when)) and not evidence
        if self.told is not None:
            self.told(self.test, {**getattr(self, "pending", {}), "mutants": list(self.matched),
                                  "hint": hint if shown else "", "when": list(when)})
            self.pending = {}
        if evidence:
            return evidence
        sentences = diagnose.words(found, KNOWN.get("facts", {}))
        text = "".join(f"\n- {line}" for line in sentences)
        text = f"\nWhat your numbers show:{text}" if text else ""
        return text + (f"\nHint: {hint}" if shown else "")

    def compared(self, kind, got, expected, failed):
        """Call at every comparison; returns the text to add to a failure ("" when nothing is known)."""
        self.count += 1
        if self.record is not None:
            self.record(self.test, self.count, kind, *self._fingerprints(kind, got, expected), failed)
        if not failed:
            return ""
        self.matched = self.matches(kind, got, expected)
        return self.explain(self.matched)

    @staticmethod
    def _fingerprints(kind, got, expected):
        if kind == "shape":  # only the shape is compared: the values may hang on how your layers were initialised
            return {"shape": list(got.shape), "values": []}, None
        return fingerprint(got), None if expected is None else fingerprint(expected)

    def matches(self, kind, got, expected):
        """The catalogue ids whose outputs are these, at this comparison of this test."""
        seen_got, seen_expected = self._fingerprints(kind, got, expected)
        found = []
        for entry in KNOWN.get("tests", {}).get(self.test or "", {}).get(str(self.count), ()):
            if entry.get("kind") != kind or not _same(entry["got"], seen_got):
                continue
            if "expected" in entry and (seen_expected is None or not _same(entry["expected"], seen_expected)):
                continue
            if "expected" not in entry and kind == "attention_input" and seen_expected is not None:
                continue  # the mistake passed no mask where you pass one
            found += [m for m in entry.get("mutants", ()) if m not in found]
        return found

    @staticmethod
    def explain(mistakes):
        hints = KNOWN.get("hints", {})
        texts = [hints[m] for m in mistakes if m in hints]
        if not texts:
            return ""
        if len(texts) == 1:
            return f"\nLikely misconception (your numbers are exactly what this known mistake gives): {texts[0]}"
        return (f"\nYour numbers are exactly what each of these {len(texts)} known mistakes gives; "
                "one of them is likely yours:\n" + "\n".join(f"  - {text}" for text in texts))


EVIDENCE = Evidence()


def _allowed_list(allowed):
    """A mask as lists of booleans (True where a key may be seen), for the kit's audit."""
    return None if allowed is None else (torch.as_tensor(allowed) != 0).tolist()


SMALL = 16  # a tensor with at most this many entries is shown whole


def _difference(got, expected, gap, bad, atol, decimals):
    """Expected and got (whole when small, the row around the largest gap otherwise), and where they differ most."""
    where = tuple(int(i) for i in torch.nonzero(gap == gap.max())[0])
    lines = []
    if expected.numel() <= SMALL:
        lines += [f"expected:\n{_fmt(expected, decimals)}", f"got:\n{_fmt(got, decimals)}"]
    else:
        row = where[:-1]
        label = "[" + ", ".join([str(i) for i in row] + [":"]) + "]"
        lines += [f"{bad.sum().item()} of {expected.numel()} entries of a {tuple(expected.shape)} tensor differ "
                  f"by more than {atol:.1g}; the row with the largest difference:",
                  f"expected{label}: {_fmt_row(expected[row], where[-1], decimals)}",
                  f"got{label}:      {_fmt_row(got[row], where[-1], decimals)}"]
    lines.append(f"largest difference at index {where}: expected {expected[where].item():.{decimals}f}, "
                 f"got {got[where].item():.{decimals}f} (allowed gap {atol:.1g})")
    return "\n".join(lines)


def _fmt(tensor, decimals):
    return str(tensor.to(torch.float64).numpy().round(decimals))


def _fmt_row(row, column, decimals, width=8):
    """At most `width` values of a row, around `column`."""
    start = max(0, min(column - width // 2, row.numel() - width))
    values = [f"{v:.{decimals}f}" for v in row[start:start + width].tolist()]
    return ("... " if start > 0 else "") + "[" + ", ".join(values) + "]" + (" ..." if start + width < row.numel() else "")


@pytest.fixture
def check():
    return Check()


@pytest.fixture(autouse=True)
def _evidence(request):
    EVIDENCE.start(request.node.name)


@pytest.fixture(autouse=True)
def _fixed_seed():
    # Random inputs are the same on every run, so a failure can be reproduced.
    torch.manual_seed(0)
