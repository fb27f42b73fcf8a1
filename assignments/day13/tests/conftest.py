"""Shared set-up for the visible tests: your four files are imported from the folder above tests/.

Each test gets your module through a fixture (`self_attention`, `multihead`, `positional`, `block`),
so a file that does not import yet fails only the tests that need it, with the import error shown.
A task you have not written yet (the stub raises NotImplementedError) shows up as one short failure.

What every lesson's tests share (the checks and their messages, the evidence about known mistakes, the
library scan, short errors at your line) is in _feedback/, beside this file; what is Day 13's is below.
"""
import functools
import types
from pathlib import Path

import pytest
import torch

# These tests use matrices of a few dozen numbers: with a thread per core, each op waits for threads to
# wake and meet, and on a busy machine that made the check several times slower (the §3 gradient test
# alone took a second). One thread gives the same numbers.
torch.set_num_threads(1)

try:
    import _feedback as feedback  # shipped beside these tests
except ImportError:  # the kit's own copy of this folder: the engine's package
    from grader import student as feedback


class Check(feedback.Check):
    """The `check` fixture, for Day 13's values: every result compared is a torch.Tensor."""

    @staticmethod
    def tensor(value, what):
        if isinstance(value, torch.Tensor):
            return value.detach()
        pytest.fail(f"{what}: expected a torch.Tensor, got {type(value).__name__}", pytrace=False)

    def value(self, value, what):
        return self.tensor(value, what)

    def equal(self, got, expected, what, *, hint="", when=()):
        """got == expected for a structured value (the names of a module's layers): not a tensor, so compared by
        the shared check, which reads it as it is; its comparison is counted and matched as every other."""
        feedback.Check(self.evidence).equal(got, expected, what, hint=hint, when=when)

    @staticmethod
    def pair(result, what):
        """(out, weights) from a function that must return two tensors."""
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            pytest.fail(f"{what} must return a pair (out, weights), got {type(result).__name__}",
                        pytrace=False)
        return Check.tensor(result[0], f"{what}: out"), Check.tensor(result[1], f"{what}: weights")

    def in_float64(self, model, x, what, mask=None):
        """`model` as the graders' float64 cases call it: converted with .to(torch.float64), as model.double()
        does, on x in float64. Its answer must be float64, with the numbers the float32 model gives."""
        with torch.no_grad():
            first = model(x) if mask is None else model(x, mask)
            expected = self.tensor(first[0] if isinstance(first, (tuple, list)) else first, what)
            model.to(torch.float64)
            second = model(x.double()) if mask is None else model(x.double(), mask)
        got = self.tensor(second[0] if isinstance(second, (tuple, list)) else second, f"{what} in float64")
        assert got.dtype == torch.float64, (
            f"{what}, converted with .to(torch.float64) and called on float64 x, should answer in float64, got "
            f"{got.dtype}. {ERROR_HINTS['dtype_error']}")
        self.close(got, expected.double(), f"{what} in float64 vs the same module in float32", atol=1e-4)

    @staticmethod
    def loadable(layer, what):
        """`layer`, whose weight the test is about to write. It fails, saying why, when that weight is made again
        from other tensors at every read (a parametrization such as weight_norm) or at every call (a forward
        pre-hook, as the older torch.nn.utils.weight_norm sets it): nothing written into it would reach forward."""
        weight = getattr(layer, "weight", None)
        again = getattr(layer, "weight", None)
        computed = isinstance(weight, torch.Tensor) and isinstance(again, torch.Tensor) and \
            weight.data_ptr() != again.data_ptr()
        hooked = any(getattr(hook, "name", None) == "weight" for hook in getattr(layer, "_forward_pre_hooks", {}).values())
        if computed or hooked:
            pytest.fail(f"{what}.weight is computed from other tensors each time it is "
                        f"{'read' if computed else 'run'} (weight_norm, spectral_norm or another parametrization), so "
                        "the weights these tests write into it never reach forward: keep it a plain layer whose weight "
                        "is a parameter, which the tests and the graders can load (CONTRACT.md, \"Weights are loaded, "
                        "not seeded\").", pytrace=False)
        return layer

    def repeat(self, call):
        """Call `call` twice: when the two answers differ, the test's failures say that something random runs."""
        with torch.no_grad():
            first, second = (self.tensor(call(), "the same call, run twice") for _ in range(2))
        self.observe(*self.diagnose.repeat(first.numpy(), second.numpy()))
        return first


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


FOLDED = "heads folded into the batch"
BATCH_FIRST, HEADS_FIRST = "batch first", "heads first"


def _views(shape):
    """What one call may hold of recorded (B, h, T, d) tensors, as (order, index): the sentences before the heads
    (BATCH_FIRST) or the heads before the sentences (HEADS_FIRST, (h, B, T, d)), then all of it (None), all of it
    folded into one batch axis (FOLDED: (B * h, T, d), or (h * B, T, d) heads first), or one head of every sentence,
    one sentence, or one head of one sentence (an index into the batch-first tensor)."""
    B, h = shape[0], shape[1]
    for order in (BATCH_FIRST, HEADS_FIRST):
        yield order, None
        yield order, FOLDED
    yield from ((BATCH_FIRST, (slice(None), i)) for i in range(h))
    yield from ((BATCH_FIRST, (b,)) for b in range(B))
    yield from ((BATCH_FIRST, (b, i)) for b in range(B) for i in range(h))


def _base(t, view):
    return t if view[0] == BATCH_FIRST else t.transpose(0, 1)


def _select(t, view):
    """What `view` (of _views) holds of the recorded (B, h, ...) tensor t."""
    base, index = _base(t, view), view[1]
    if index == FOLDED:
        return base.reshape(-1, *base.shape[2:])
    return base if index is None else base[index]


def _place(t, view, value):
    """Write `value`, shaped as `view` (of _views) holds it, into the recorded (B, h, ...) tensor t."""
    base, index = _base(t, view), view[1]  # a view of t: writing into it writes into t
    if index == FOLDED:
        base.copy_(value.reshape(base.shape))
    elif index is None:
        base.copy_(value)
    else:
        base[index].copy_(value)


def _allowed(mask, shape):
    if mask is None:
        return torch.ones(shape, dtype=torch.bool)
    return torch.broadcast_to(torch.as_tensor(mask) != 0, shape)


def _expected_heads(q, k, v):
    """(record, index, {"Q", "K", "V": what that view of the record holds}) for each known call shaped as this one."""
    for record in _known_answers():
        for index in _views(record["Q"].shape):
            expected = {n: _select(record[n], index) for n in ("Q", "K", "V")}
            if all(t.shape == expected["Q"].shape for t in (q, k, v)):
                yield record, index, expected


def _token_order(given, expected):
    """The token order (an index into the token axis, -2) that turns each call tensor of `given` into the one of
    `expected` beside it, when one order does it for all; None otherwise."""
    def rows(tensors):  # one row a token: its features in every tensor, every sentence and every head
        return torch.cat([t.movedim(-2, 0).reshape(t.shape[-2], -1) for t in tensors], dim=1)
    got, want = rows(given), rows(expected)
    if got.shape != want.shape:
        return None
    close = ((got[:, None] - want[None]).abs() <= 1e-4 + 1e-4 * want.abs()[None]).all(-1)  # [t, s]: token t is row s
    order, free = [], torch.ones(len(got), dtype=torch.bool)
    for s in range(len(want)):
        match = torch.nonzero(close[:, s] & free).flatten()
        if not len(match):
            return None
        order.append(int(match[0]))
        free[match[0]] = False
    return torch.tensor(order)


def _in_order(t, order, axes):
    """t with the token `order` applied along each of `axes`."""
    for axis in axes:
        t = t.index_select(axis, order)
    return t


def _lookup(Q, K, V, mask):
    """(record, index, order): the known call this one is, and the token order that makes the call's tokens the
    record's (None: the record's own). An order of your own is allowed when the same one holds for Q, K, V and the
    mask, and your MultiHeadAttention undoes it: attention sees its tokens as a set (held-out s54)."""
    q, k, v = (t.detach().to(torch.float64) for t in (Q, K, V))
    other_mask = None  # (the mask a call with the right heads should have had, which view of the record it is)
    for reordered in (False, True):  # the recorded order first: a token order is a last resort
        for record, index, expected in _expected_heads(q, k, v):
            calls = [expected[n] for n in ("Q", "K", "V")]
            if reordered:
                order = _token_order((q, k, v), calls)
                if order is None:
                    continue
                undo = torch.argsort(order)
            elif all(torch.allclose(a, e, atol=1e-4, rtol=1e-4) for a, e in zip((q, k, v), calls)):
                order = undo = None
            else:
                continue
            expected_mask = _select(_allowed(record["mask"], record["weights"].shape), index)
            if undo is not None:
                expected_mask = _in_order(expected_mask, undo, (-2, -1))
            try:
                if not torch.equal(_allowed(mask, expected_mask.shape), expected_mask):
                    other_mask = other_mask or (expected_mask, index)
                    continue
            except RuntimeError:
                other_mask = other_mask or (expected_mask, index)
                continue
            return record, index, order
        if other_mask is not None:
            break
    mask_text = "" if mask is None else f", mask {tuple(torch.as_tensor(mask).shape)}"
    given = torch.stack([q, k, v]) if q.shape == k.shape == v.shape else torch.cat([t.reshape(-1) for t in (q, k, v)])
    given_mask = None if mask is None else torch.as_tensor(mask).detach().to(torch.float64)
    evidence = VISIBLE.evidence.compared("attention_input", given, given_mask, True)
    if other_mask is not None:
        expected_mask, view = other_mask
        pytest.fail(OTHER_MASK.format(what=_mask_words(mask, expected_mask), advice=_mask_advice(view)) + evidence,
                    pytrace=False)
    scaled = _scaled_heads(q, k, v)
    if scaled:
        pytest.fail(SCALED_INPUT.format(name=scaled[0], c=scaled[1], d_k=q.shape[-1], root=q.shape[-1] ** -0.5)
                    + evidence, pytrace=False)
    pytest.fail(NOT_AN_EXPECTED_INPUT.format(shapes=", ".join(str(tuple(t.shape)) for t in (Q, K, V)), mask=mask_text)
                + evidence, pytrace=False)


OTHER_MASK = (
    "MultiHeadAttention passed scaled_dot_product_attention the heads of qkv(x) this test expects, but not the mask "
    "MultiHeadAttention was given: {what}. A mask entry of 0 (or False) blocks a key and any other value lets it "
    "through, and scaled_dot_product_attention does the blocking: {advice} (handout §6, §7).")


def _mask_advice(view):
    """What to do with the mask, for a call that holds `view` (of _views) of the heads: the heads as the handout
    lays them out take the mask as it is; heads moved, folded or taken one by one take it moved, folded or sliced
    alike (held-out s55: a fold was told to pass the mask on as it is, which cannot reach its scores)."""
    order, index = view
    if index is None and order == BATCH_FIRST:
        return "pass the mask on as it is"
    if index == FOLDED:
        return ("your heads are folded into one batch axis, so fold the mask the same way: expand it to (B, h, T, T) "
                "first (mask.expand(B, h, T, T)), then reshape it in the order you reshaped the heads")
    if index is None:
        return ("your heads come before the sentences, so move the mask's axes alike: expand it to (B, h, T, T), "
                "then transpose(0, 1)")
    return ("you call it on part of the heads at a time, so give each call the matching part of the mask: expand it "
            "to (B, h, T, T) and index it as you index the heads")


def _mask_words(mask, allowed):
    """How the mask a call got differs from the one the test gave (`allowed`: where the given one lets a key through,
    in the call's shape)."""
    if mask is None:
        return "it got no mask"
    try:
        got = _allowed(mask, allowed.shape)
    except RuntimeError:
        return (f"it got a mask of shape {tuple(torch.as_tensor(mask).shape)}, which does not broadcast to the "
                f"heads' scores {tuple(allowed.shape)}")
    if torch.equal(got, ~allowed):
        return ("its mask lets through exactly the keys the given mask blocks, and blocks the others (the mask turned "
                "over, as mask == 0 or ~mask does)")
    return f"{int((got != allowed).sum())} of its {got.numel()} entries block or let through other keys than the given mask"


SCALED_INPUT = (
    "MultiHeadAttention passed scaled_dot_product_attention the heads of qkv(x) with {name} multiplied by {c:.4g} "
    "(1/√d_k = {root:.4g} for d_k = {d_k}). scaled_dot_product_attention divides Q Kᵀ by √d_k itself, so scaling "
    "{name} before it scales the scores twice: hand the heads of qkv(x) on as they are (handout §3, step 2; §7).")


def _scaled_heads(q, k, v):
    """("Q" or "K", c) when the call holds exactly the heads one of the tests expects, except for Q or K multiplied
    by one constant c (the scaling done twice); None otherwise."""
    for _, _, expected in _expected_heads(q, k, v):
        given = {"Q": q, "K": k, "V": v}
        for name in ("Q", "K"):
            others = [n for n in ("Q", "K", "V") if n != name]
            if not all(torch.allclose(given[n], expected[n], atol=1e-4, rtol=1e-4) for n in others):
                continue
            e, g = expected[name], given[name]
            c = float((g * e).sum() / (e * e).sum().clamp_min(1e-30))
            if abs(c - 1) > 1e-3 and torch.allclose(g, c * e, atol=1e-4, rtol=1e-4):
                return name, c
    return None


class _KnownAttention(torch.autograd.Function):
    """Forward: the stored answer. Backward: the stored slopes (one Jacobian per head) times the incoming gradient."""

    generate_vmap_rule = True  # torch.func's transforms see this call even on a slice (_slice_by_slice)

    @staticmethod
    def forward(Q, K, V, record, index):
        return (_select(record["out"], index).to(Q.dtype).clone(),
                _select(record["weights"], index).to(Q.dtype).clone())

    @staticmethod
    def setup_context(ctx, inputs, output):  # apart from forward: torch.func's transforms ask it (_slice_by_slice)
        Q, _, _, record, index = inputs
        ctx.record, ctx.index, ctx.dtype = record, index, Q.dtype

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
            _place(full_out, index, grad_out.to(torch.float64))
        if grad_weights is not None:
            _place(full_w, index, grad_weights.to(torch.float64))
        grads = torch.zeros(3, B, h, T, d, dtype=torch.float64)
        for b, i in heads:
            incoming = torch.cat([full_out[b, i].reshape(-1), full_w[b, i].reshape(-1)])
            grads[:, b, i] = (record["jacobian"][b, i].T @ incoming).reshape(3, T, d)
        return (*(_select(g, index).to(ctx.dtype) for g in grads), None, None)


def _stand_in_attention(Q, K, V, mask=None, dropout=None, *more, **named):
    """The attention the multi-head tests expect, looked up. `dropout`: a Dropout (or its probability) your
    MultiHeadAttention hands in for the weights (CONTRACT.md allows one there; the tests run your modules in eval
    mode, where a Dropout changes nothing)."""
    if dropout is None and "dropout_p" in named:
        dropout = named.pop("dropout_p")  # torch's own attention's name for it
    if more or named:
        given = [f"{len(more)} more positional argument(s)"] * bool(more) + [f"`{name}=`" for name in named]
        pytest.fail(f"your code called scaled_dot_product_attention with {', '.join(given)}, but the multi-head tests "
                    "give MultiHeadAttention a stand-in scaled_dot_product_attention, as the graders do (CONTRACT.md, "
                    "\"One bug costs one part\"), and it takes the contract's arguments only: Q, K, V, mask=None, and a "
                    "Dropout or its probability for the weights (dropout=, or dropout_p=)", pytrace=False)
    if _vmapped(Q, K, V, mask):
        return _slice_by_slice(Q, K, V, mask, dropout)
    record, index, order = _lookup(Q, K, V, mask)
    if order is None:
        answer = _KnownAttention.apply(Q, K, V, record, index)
    else:  # the record's order in, the call's order out: gradients flow back through both
        undo = torch.argsort(order)
        out, weights = _KnownAttention.apply(*(_in_order(t, order, (-2,)) for t in (Q, K, V)), record, index)
        answer = _in_order(out, undo, (-2,)), _in_order(weights, undo, (-2, -1))
    if dropout is not None and not callable(dropout):  # a probability, as torch's own attention takes one
        p = float(dropout)
        dropout = (lambda w: torch.nn.functional.dropout(w, p)) if p else None
    dropped = answer[1] if dropout is None else dropout(answer[1])
    # In training mode it would change the weights, and so the output, as it would in your own attention.
    return answer if dropped is answer[1] else (dropped @ V.to(dropped.dtype), dropped)


_functorch = torch._C._functorch


def _vmapped(*tensors) -> int:
    """The innermost torch.func.vmap level any of `tensors` is batched at (0: none)."""
    return max((_functorch.maybe_get_level(t) for t in tensors
                if isinstance(t, torch.Tensor) and _functorch.is_batchedtensor(t)), default=0)


def _slice_by_slice(Q, K, V, mask, dropout=None):
    """A MultiHeadAttention that runs its heads through torch.func.vmap calls this once for all of them, but the
    stand-in finds its answers by comparing values, which a vmapped function cannot do: each slice (one head, say) is
    answered as a call of its own, and the answers are batched again, as vmap would have them (held-out s46)."""
    level = _vmapped(Q, K, V, mask)
    size = next(_functorch.get_unwrapped(t).shape[_functorch.maybe_get_bdim(t)] for t in (Q, K, V, mask)
                if isinstance(t, torch.Tensor) and _functorch.maybe_get_level(t) == level)

    def slices(t):
        if not (isinstance(t, torch.Tensor) and _functorch.maybe_get_level(t) == level):
            return [t] * size  # the same for every slice
        return list(_functorch.get_unwrapped(t).movedim(_functorch.maybe_get_bdim(t), 0))

    answers = [_stand_in_attention(*call, dropout) for call in zip(*(slices(t) for t in (Q, K, V, mask)))]
    return tuple(_functorch._add_batch_dim(torch.stack(parts), 0, level) for parts in zip(*answers))


class _StandInSelfAttention(torch.nn.Module):
    """SelfAttention of the contract, as the graders lend it to a multihead.py that imports it (say, to subclass it):
    W_q, W_k, W_v and d_k as the contract gives them. Its forward runs the stand-in attention, so it knows only the
    heads of qkv(x) that the multi-head tests expect."""

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_k = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_v = torch.nn.Linear(d_model, d_k, bias=False)
        self.d_k = d_k

    def forward(self, x, mask=None):
        return _stand_in_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)


class _NotInTheStandIn:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        pytest.fail(f"the multi-head tests give MultiHeadAttention a stand-in self_attention.py that has no {self.name}: "
                    "use scaled_dot_product_attention (and the mask you are given)", pytrace=False)


def _stand_in(name):
    """The stand-in module `name`. It has every name of the contract's file, so a file that imports or subclasses
    any of them imports here as it does for the graders; causal_mask (Task 2's answer) only says it is not there."""
    module = types.ModuleType(name)
    module.__doc__ = f"the visible tests' stand-in for {name}.py"
    if name == "multihead":
        module.MultiHeadAttention = StandInAttention
    else:
        module.scaled_dot_product_attention = _stand_in_attention
        module.causal_mask = _NotInTheStandIn("causal_mask")
        module.SelfAttention = _StandInSelfAttention
    return module


def _own(value):
    """A tensor the tests pass in, as the graders pass it: a copy of its own, unless it is an input whose gradient
    is asked for (the graders' are leaves too, so changing one in place fails there as here)."""
    return value.clone() if isinstance(value, torch.Tensor) and not value.requires_grad else value


def _own_inputs(module, args, kwargs):
    return tuple(map(_own, args)), {k: _own(v) for k, v in kwargs.items()}


# The contract's block: block.py's TransformerBlock, whose attn is its MultiHeadAttention(d_model, n_heads).
BLOCK = ("block", "TransformerBlock")


def _attention_over_stand_in(built, args, kwargs):
    """Put StandInAttention in place of the built block's attn, wherever the block holds it, as the graders do.
    block.py is imported over a stand-in multihead.py, but a MultiHeadAttention it takes from a module of the
    student's own (a helper that multihead.py imports it from too) is their real one, and the block would be
    tested over it, run on the multi-head tests' stand-in attention. The graders put their stand-in in place of
    attn whatever module its class came from, so the block is tested on block.py alone here too."""
    own = getattr(built, "attn", None)
    if not isinstance(own, torch.nn.Module) or isinstance(own, StandInAttention):
        return  # already the stand-in (imported from multihead.py), or no attn: test_block_parts says so
    stand_in = StandInAttention(_init_arg(args, kwargs, "d_model", 0, 64), _init_arg(args, kwargs, "n_heads", 1, 4))
    for module in list(built.modules()):
        for key, child in list(module._modules.items()):
            if child is own:
                module._modules[key] = stand_in


def _init_arg(args, kwargs, name, position, default):
    """TransformerBlock's argument `name` as the graders read it (grader/day13/standins.py, _d_model): by name, else
    at its position, else its default."""
    if name in kwargs:
        return int(kwargs[name])
    return int(args[position]) if len(args) > position else default


class _InEvalMode:
    """Your module as the tests use it: every layer you build is switched to eval mode, as the graders do,
    so a dropout you added (fine: it is off in eval mode) never makes a result random. Each call gets copies of
    the tests' tensors, as each of the graders' calls gets its own: code that changes its input in place
    (x += ...) changes its copy, not the tensor the test goes on to use."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            block = (getattr(self._module, "__name__", None), name) == BLOCK

            def build(*args, **kwargs):
                built = value(*args, **kwargs)
                if block:
                    _attention_over_stand_in(built, args, kwargs)
                built.eval().register_forward_pre_hook(_own_inputs, with_kwargs=True)
                return built
            return functools.wraps(value, updated=())(build)
        if isinstance(value, types.FunctionType):
            def call(*args, **kwargs):
                args, kwargs = _own_inputs(None, args, kwargs)
                return value(*args, **kwargs)
            return functools.wraps(value)(call)
        return value


# Words that follow from a fact about an error: which fact, then the words (nothing here is said without it).
ERROR_HINTS = {
    "inplace_leaf": ("Hint: an in-place change (x += ..., x[...] = ..., .add_()) of a tensor whose gradient is asked "
                     "for: autograd cannot allow it, and it changes the caller's tensor too. Write x = x + ... instead."),
    # Also said when a module converted to float64 answers in another dtype (Check.in_float64).
    "dtype_error": ("Hint: a tensor made inside forward (torch.zeros, torch.ones, torch.tensor, torch.arange) is float32 "
                    "unless told otherwise: give it dtype=x.dtype and device=x.device, or use torch.zeros_like(x). The "
                    "graders also call your module after .to(torch.float64) (CONTRACT.md, \"Your module is graded as "
                    "you built it\")."),
    "broadcast_error.sum_without_keepdim": (
        "Hint: a sum over the last axis without keepdim=True drops that axis, so dividing by it lines the sums up "
        "with the wrong axis: write .sum(dim=-1, keepdim=True), and each row is divided by its own sum (§3, step 3)."),
    "matmul_error.batched_T": ("Hint: on a batch of matrices (3 or more dimensions) .T reverses every dimension, not the "
                               "last two; write K.transpose(-2, -1). See the handout, §3 \"A common error and its message\"."),
    "bool_arithmetic": ("Hint: torch refuses arithmetic such as 1 - m or -m on a tensor of booleans: write ~m or m == 0, "
                        "or convert it first with m.float(). The masks the tests give may be bool as well as 0/1 "
                        "numbers (CONTRACT.md, \"Masks\")."),
    "matmul_error": ("Hint: the inner sizes of a matrix product must match: print the shapes of both sides. "
                     "See the handout, §3 \"A common error and its message\"."),
}

MATMUL_WORDS = ("size of tensor", "batch2", "mat1 and mat2", "must match", "Expected size", "cannot be multiplied",
                "shapes cannot", "dimension")


DTYPE_WORDS = ("same dtype", "Float and Double", "Double and Float", "expected scalar type", "but expected Float",
               "but expected Double")


def _error_fact(error, line):
    """What the error and the line that raised it show: float32 and float64 tensors meeting (`dtype_error`); an
    in-place change autograd refuses (`inplace_leaf`); arithmetic torch refuses on a bool tensor (`bool_arithmetic`);
    a size mismatch on a line that divides by a sum kept without its axis (`broadcast_error.sum_without_keepdim`), or
    in a matrix product, on a line that uses .T (the fact `matmul_error.batched_T`) or another product
    (`matmul_error`); else None."""
    if isinstance(error, RuntimeError) and any(word in str(error) for word in DTYPE_WORDS):
        return "dtype_error"
    if isinstance(error, RuntimeError) and "in-place operation" in str(error):
        return "inplace_leaf"
    if isinstance(error, RuntimeError) and "bool tensor is not supported" in str(error):
        return "bool_arithmetic"
    if not (isinstance(error, (RuntimeError, ValueError)) and any(word in str(error) for word in MATMUL_WORDS)):
        return None
    compact = line.replace(" ", "")
    if ".sum(" in compact and "keepdim" not in compact and "/" in compact:
        return "broadcast_error.sum_without_keepdim"
    if ".T" in compact:
        return "matmul_error.batched_T"
    if "@" in line or "matmul" in line or "bmm" in line:
        return "matmul_error"
    return None


# Each part is tested on its own, as the graders grade it: multihead.py is imported with the stand-in
# attention above in place of self_attention.py, and block.py with a stand-in in place of multihead.py (and of
# the attn of each block it builds: _attention_over_stand_in), so a bug in one file fails that file's tests only.
# Tests run in the order of the tasks (README).
VISIBLE = feedback.VisibleTests(
    __file__, parts=("self_attention", "multihead", "positional", "block"),
    stand_ins={"multihead": ("self_attention",), "block": ("multihead",)}, make_stand_in=_stand_in,
    wrap=_InEvalMode, check=Check, error_fact=_error_fact, error_hints=ERROR_HINTS)
globals().update(VISIBLE.conftest_names())  # the part fixtures, `check`, and the hooks that shape the messages

# Library attention is not allowed (README, "Not allowed"). It is watched from here, before your files
# are imported, so that every use is seen however it was imported; the graders do the same.
VISIBLE.watch.watch(torch.nn.functional, "scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention")
VISIBLE.watch.watch(torch.nn.functional, "multi_head_attention_forward", "torch.nn.functional.multi_head_attention_forward")
for _cls in ("MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerEncoderLayer",
             "TransformerDecoder", "TransformerDecoderLayer"):
    VISIBLE.watch.watch(getattr(torch.nn, _cls), "__init__", f"torch.nn.{_cls}")


@pytest.fixture(autouse=True)
def _fixed_seed():
    # Random inputs are the same on every run, so a failure can be reproduced.
    # The CPU generator alone (the tests run on CPU): torch.manual_seed also queues a seed for every absent
    # device type, formatting the caller's stack each time (a sixth of a run's own time).
    torch.default_generator.manual_seed(0)
