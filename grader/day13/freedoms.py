"""The freedoms the contract gives (assignments/day13/CONTRACT.md), each with a correct variant (data only).

A freedom is a way of writing a part that the contract allows and that differs from the reference in
something the grader reads or feeds: a name, the form of a container, an extra module that does nothing
in eval mode, a dtype inside, where a table comes from, the form of a mask. Each entry says where the
contract allows it and holds patches (file, exact text, replacement) over the lesson's reference, as the
bug catalogue's do, that take that freedom and nothing else. `COMBINATIONS` takes several at once.

tests/day13/test_freedoms.py builds every variant and every combination, grades each with the hidden
tests and runs the visible tests on it: each must get full marks in both. A freedom listed here without
patches that change the reference fails that test, and so does one whose variant loses a point.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.day13.catalogue import BL, CONCAT, FILL, MH, PE, SA, SCORES, SOFTMAX


@dataclass(frozen=True)
class Freedom:
    id: str
    component: str
    contract: str  # where CONTRACT.md gives this freedom, in its words
    patches: tuple  # ((file, find, replace), ...) over the reference
    # Other files the variant changes or adds for its part: another part's file it puts a helper of its own in (the
    # part imports it), or a module of its own beside the contract's files and the files that import from it.
    helpers_in: tuple = ()


FFN = ("        self.ffn = nn.Sequential(\n"
       "            nn.Linear(d_model, d_ff),  # expand: (B, T, d_ff)\n"
       "            nn.GELU(),\n"
       "            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)\n"
       "        )\n")
SA_INIT = ("        self.W_q = nn.Linear(d_model, d_k, bias=False)\n"
           "        self.W_k = nn.Linear(d_model, d_k, bias=False)\n"
           "        self.W_v = nn.Linear(d_model, d_k, bias=False)\n")
SA_FORWARD = "        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # each (B, T, d_k)\n"
SA_RETURN = "        return scaled_dot_product_attention(Q, K, V, mask)  # (B, T, d_k), (B, T, T)\n"
MH_CHECK = ("        if d_model % n_heads != 0:\n"
            "            raise ValueError(\n"
            '                f"d_model={d_model} is not divisible by n_heads={n_heads}: "\n'
            '                "every head needs d_model // n_heads features (handout §7)"\n'
            "            )\n")
MH_OUT_INIT = "        self.out = nn.Linear(d_model, d_model)  # W_O\n"
MH_OUT_CALL = "        return self.out(ctx)  # (B, T, D)\n"
MH_CTX = "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n"
PE_BODY = ("    pos = torch.arange(T, dtype=torch.float32).unsqueeze(1)  # (T, 1)\n"
           "    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model/2,)\n"
           "    angle = pos / (10000 ** (two_i / d_model))  # (T, d_model/2)\n"
           "    pe = torch.zeros(T, d_model)  # (T, d_model)\n"
           "    pe[:, 0::2] = torch.sin(angle)  # even features\n"
           "    pe[:, 1::2] = torch.cos(angle)  # odd features\n"
           "    return pe\n")
PE_BUFFER = '        self.register_buffer("pe", positional_encoding(max_len, d_model))  # (max_len, d_model)\n'
PE_ADD = "        return x + self.pe[:T]  # (B, T, d_model) + (T, d_model) broadcasts over B\n"
POST = ("            x = self.ln1(x + self.attn(x, mask))  # (B, T, d_model)\n"
        "            x = self.ln2(x + self.ffn(x))  # (B, T, d_model)\n")
PRE = ("            x = x + self.attn(self.ln1(x), mask)  # (B, T, d_model)\n"
       "            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)\n")
BL_IMPORT = "import torch.nn as nn\n"
LN = "        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)\n"
MH_SIZES = "        self.h, self.d_k = n_heads, d_model // n_heads\n"
MH_SPLIT = "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n"
SA_DK = "        self.d_k = d_k\n"
# multihead.py from its imports on: the class a variant moves into a module of its own.
MH_MODULE = ('import torch.nn as nn\n'
             '\n'
             'from self_attention import scaled_dot_product_attention\n'
             '\n'
             '\n'
             'class MultiHeadAttention(nn.Module):\n'
             '    """h attention heads in parallel, concatenated and mixed by W_O (handout §7).\n'
             '\n'
             '    d_k = d_model // h per head. qkv = nn.Linear(d_model, 3·d_model) computes Q, K, V\n'
             '    for all heads at once: q, k, v = qkv(x).chunk(3, dim=-1), and head i uses\n'
             '    features i·d_k:(i+1)·d_k of each. out = nn.Linear(d_model, d_model) is W_O.\n'
             '    x: (B, T, d_model) -> (B, T, d_model).\n'
             '    mask: None or broadcastable to (B, h, T, T): a (T, T) causal mask or a\n'
             '    (B, 1, 1, T) padding mask.\n'
             '    Attributes: h, d_k, qkv, out. d_model % n_heads != 0 raises ValueError.\n'
             '    """\n'
             '\n'
             '    def __init__(self, d_model, n_heads):\n'
             '        super().__init__()\n'
             '        # BEGIN SOLUTION (Task 4 · MultiHeadAttention.__init__)\n'
             '        if d_model % n_heads != 0:\n'
             '            raise ValueError(\n'
             '                f"d_model={d_model} is not divisible by n_heads={n_heads}: "\n'
             '                "every head needs d_model // n_heads features (handout §7)"\n'
             '            )\n'
             '        self.h, self.d_k = n_heads, d_model // n_heads\n'
             '        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_Q, W_K, W_V for all heads at once\n'
             '        self.out = nn.Linear(d_model, d_model)  # W_O\n'
             '        # END SOLUTION\n'
             '\n'
             '    def forward(self, x, mask=None):\n'
             '        """x: (B, T, d_model); mask: None or broadcastable to (B, h, T, T).\n'
             '\n'
             '        Returns (B, T, d_model).\n'
             '        """\n'
             '        # BEGIN SOLUTION (Task 4 · MultiHeadAttention.forward)\n'
             '        B, T, D = x.shape\n'
             '        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, T, D)\n'
             '        # Split D into h heads of d_k features, then move heads next to the batch.\n'
             '        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n'
             '        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n'
             '        ctx = ctx.transpose(1, 2).contiguous().view(B, T, D)  # (B, T, D): heads concatenated\n'
             '        return self.out(ctx)  # (B, T, D)\n'
             '        # END SOLUTION\n')

FREEDOMS: tuple[Freedom, ...] = (
    # ------------------------------------------------------------------ self_attention.py
    Freedom("sa.recap_names", "self_attention",
            "SelfAttention: the handout's recap writes Wq, Wk, Wv: both spellings are accepted",
            ((SA, SA_INIT, SA_INIT.replace("W_", "W")), (SA, SA_FORWARD, SA_FORWARD.replace("W_", "W")))),
    Freedom("sa.causal_bool", "self_attention",
            "Masks: causal_mask may return a bool tensor or a float/integer tensor of 0s and 1s",
            ((SA, "    return torch.tril(torch.ones(T, T, device=device))",
              "    return torch.ones(T, T, dtype=torch.bool, device=device).tril()"),)),
    Freedom("sa.mask_as_bool", "self_attention",
            "mask: a 0 (or False) entry blocks that position; any other value lets it through",
            ((SA, FILL, '        scores = scores.masked_fill(~mask.bool(), float("-inf"))  # (..., T_q, T_k)\n'),)),
    Freedom("sa.large_negative", "self_attention",
            "Blocked positions get a weight of exactly 0 (a fill of -1e9 underflows to exactly 0 after softmax)",
            ((SA, FILL, "        scores = scores.masked_fill(mask == 0, -1e9)  # (..., T_q, T_k)\n"),)),
    Freedom("sa.float64_inside", "self_attention",
            "float32 is enough; working in float64 inside is fine when the output has the input's dtype",
            ((SA, SCORES, "    scores = Q.double() @ K.double().transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)\n"),
             (SA, SOFTMAX, "    weights = torch.softmax(scores, dim=-1).to(Q.dtype)  # back to the input's dtype\n"))),
    Freedom("sa.float32_softmax", "self_attention",
            "float32 is enough: tolerances leave room for float32 rounding (a softmax taken in float32 in a float64 call)",
            ((SA, SOFTMAX, "    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)  # (..., T_q, T_k)\n"),)),
    Freedom("sa.module_dropout", "self_attention",
            "an extra module that does nothing in eval mode (dropout on the output)",
            ((SA, SA_DK, SA_DK + "        self.dropout = nn.Dropout(0.1)\n"),
             (SA, SA_RETURN, "        out, weights = scaled_dot_product_attention(Q, K, V, mask)\n"
                             "        return self.dropout(out), weights\n"))),
    Freedom("sa.import_side_effects", "self_attention",
            "Printing, seeding, or drawing random numbers when your file is imported is fine",
            ((SA, "import torch.nn as nn\n",
              "import torch.nn as nn\n\ntorch.manual_seed(1234)\n_warm = torch.randn(4)\nprint('self_attention loaded')\n"),)),
    # ------------------------------------------------------------------ multihead.py
    Freedom("mh.assert_divisible", "multihead",
            "d_model not divisible by n_heads raises ValueError (an AssertionError, as in the handout, is accepted too)",
            ((MH, MH_CHECK, '        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"\n'),)),
    Freedom("mh.out_named_W_o", "multihead",
            "out is W_O: the names W_o, Wo and W_O are accepted too",
            ((MH, MH_OUT_INIT, "        self.W_o = nn.Linear(d_model, d_model)\n"),
             (MH, MH_OUT_CALL, "        return self.W_o(ctx)  # (B, T, D)\n"))),
    Freedom("mh.mask_to_bool", "multihead",
            "any mask this page allows may reach you in either form (bool or 0/1)",
            ((MH, MH_CTX, "        mask = None if mask is None else mask != 0  # True where a key may be seen\n" + MH_CTX),)),
    # Held-out s46 (e08): the visible stand-in attention looked its answers up by value, which a vmapped call cannot.
    Freedom("mh.heads_through_vmap", "multihead",
            "the layout is fixed (qkv(x).chunk(3, dim=-1), head i reads features i*d_k to (i+1)*d_k); how the heads "
            "then go through scaled_dot_product_attention is not (all at once, one by one, through torch.func.vmap)",
            ((MH, "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
             (MH, MH_CTX, "        mask = None if mask is None else mask.expand(B, self.h, T, T)  # a mask for each head\n"
                          "        per_head = torch.func.vmap(scaled_dot_product_attention, in_dims=(1, 1, 1, None if mask "
                          "is None else 1), out_dims=(1, 1))\n"
                          "        ctx, _ = per_head(q, k, v, mask)  # (B, h, T, d_k), one head at a time\n"))),
    Freedom("mh.attention_dropout", "multihead",
            "an extra module that does nothing in eval mode (dropout on the heads' output)",
            ((MH, MH_SIZES, MH_SIZES + "        self.drop = nn.Dropout(0.1)\n"),
             (MH, CONCAT, CONCAT + "        ctx = self.drop(ctx)\n"))),
    # Held-out s52 (c_sdpa_dropout_kw): the Annotated Transformer's attention(query, key, value, mask, dropout), its
    # MultiHeadAttention handing its Dropout in; the stand-in attention took no dropout, and every call raised.
    Freedom("mh.dropout_through_attention", "multihead",
            "A `Dropout` anywhere (attention weights, ...) is fine: multihead.py may hand its Dropout to your "
            "scaled_dot_product_attention, which applies it to the weights",
            ((SA, "def scaled_dot_product_attention(Q, K, V, mask=None):\n",
              "def scaled_dot_product_attention(Q, K, V, mask=None, dropout=None):\n"),
             (SA, SOFTMAX, SOFTMAX + "    if dropout is not None:\n        weights = dropout(weights)  # (..., T_q, T_k)\n"),
             (MH, MH_SIZES, MH_SIZES + "        self.dropout = nn.Dropout(0.1)\n"),
             (MH, MH_CTX, "        ctx, _ = scaled_dot_product_attention(q, k, v, mask, dropout=self.dropout)  # (B, h, T, d_k)\n")),
            helpers_in=(SA,)),
    # Red team s53r: a probability handed in instead (torch's own attention takes dropout_p), 0 in eval mode.
    Freedom("mh.dropout_probability_through_attention", "multihead",
            "A `Dropout` anywhere (attention weights, ...) is fine: multihead.py may hand your "
            "scaled_dot_product_attention a dropout probability, 0 outside training",
            ((SA, "def scaled_dot_product_attention(Q, K, V, mask=None):\n",
              "def scaled_dot_product_attention(Q, K, V, mask=None, dropout=0.0):\n"),
             (SA, SOFTMAX, SOFTMAX + "    if dropout:\n        weights = torch.nn.functional.dropout(weights, dropout)\n"),
             (MH, MH_CTX, "        p = 0.1 if self.training else 0.0  # dropout on the weights while training only\n"
                          "        ctx, _ = scaled_dot_product_attention(q, k, v, mask, dropout=p)  # (B, h, T, d_k)\n")),
            helpers_in=(SA,)),
    # Held-out s54: the same under torch's own name for it.
    Freedom("mh.dropout_p_through_attention", "multihead",
            "multihead.py may hand your scaled_dot_product_attention a dropout probability as dropout_p=, torch's name",
            ((SA, "def scaled_dot_product_attention(Q, K, V, mask=None):\n",
              "def scaled_dot_product_attention(Q, K, V, mask=None, dropout_p=0.0):\n"),
             (SA, SOFTMAX, SOFTMAX + "    if dropout_p:\n        weights = torch.nn.functional.dropout(weights, dropout_p)\n"),
             (MH, MH_CTX, "        ctx, _ = scaled_dot_product_attention(q, k, v, mask, dropout_p=0.0)  # (B, h, T, d_k)\n")),
            helpers_in=(SA,)),
    Freedom("mh.helper_from_self_attention", "multihead",
            "Your files may import each other: a helper of your own in self_attention.py, imported by name",
            ((SA, "import torch.nn as nn\n",
              "import torch.nn as nn\n\n\ndef merge_heads(ctx):\n"
              "    B, h, T, d_k = ctx.shape  # (B, h, T, d_k)\n"
              "    return ctx.transpose(1, 2).contiguous().view(B, T, h * d_k)  # (B, T, h·d_k)\n"),
             (MH, "from self_attention import scaled_dot_product_attention\n",
              "from self_attention import merge_heads, scaled_dot_product_attention\n"),
             (MH, CONCAT, "        ctx = merge_heads(ctx)  # (B, T, D)\n")), helpers_in=(SA,)),
    # Held-out s47r: with a child a part, block's child must hold what multihead.py is imported over.
    Freedom("blk.helper_from_multihead", "block",
            "Your files may import each other: a helper of your own in multihead.py, imported by block.py",
            ((MH, "from self_attention import scaled_dot_product_attention\n",
              "from self_attention import scaled_dot_product_attention\n\n\ndef expanded(d_model, d_ff=None):\n"
              "    return 4 * d_model if d_ff is None else d_ff  # the FFN's inner width (§9)\n"),
             (BL, "from multihead import MultiHeadAttention\n", "from multihead import MultiHeadAttention, expanded\n"),
             (BL, "        d_ff = 4 * d_model if d_ff is None else d_ff\n", "        d_ff = expanded(d_model, d_ff)\n")),
            helpers_in=(MH,)),
    Freedom("mh.star_import", "multihead",
            "Your files may import each other: `from self_attention import *`, with an __all__ naming a helper",
            ((SA, "import torch.nn as nn\n",
              "import torch.nn as nn\n\n__all__ = [\"scaled_dot_product_attention\", \"causal_mask\", \"SelfAttention\", "
              "\"split_heads\"]\n\n\ndef split_heads(t, h):\n"
              "    B, T, D = t.shape  # (B, T, D)\n"
              "    return t.view(B, T, h, D // h).transpose(1, 2)  # (B, h, T, d_k)\n"),
             (MH, "from self_attention import scaled_dot_product_attention\n", "from self_attention import *  # noqa: F403\n"),
             (MH, MH_SPLIT, "        q, k, v = [split_heads(t, self.h) for t in (q, k, v)]  # (B, h, T, d_k)\n")), helpers_in=(SA,)),
    # A held-out MultiHeadAttention subclassed the student's own SelfAttention: graded full marks hidden (the grader
    # lends a real class), but the visible stand-in module held no class, so every visible multi-head test failed
    # at import.
    Freedom("mh.subclasses_self_attention", "multihead",
            "Your files may import each other: MultiHeadAttention may subclass your SelfAttention, using only the "
            "contract's interface of it",
            ((MH, "from self_attention import scaled_dot_product_attention\n",
              "from self_attention import SelfAttention, scaled_dot_product_attention\n"),
             (MH, "class MultiHeadAttention(nn.Module):\n", "class MultiHeadAttention(SelfAttention):\n"),
             (MH, "    def __init__(self, d_model, n_heads):\n        super().__init__()\n",
              "    def __init__(self, d_model, n_heads):\n"
              "        super().__init__(d_model, d_model // n_heads)  # SelfAttention(d_model, d_k) sets d_k\n"
              "        del self.W_q, self.W_k, self.W_v  # qkv holds every head's projections instead\n"))),
    # Held-out s54 (c_random_token_order): hidden 25/25, but the visible stand-in knew its calls in the recorded token
    # order only, and 9 visible tests told it to split its heads as it already did.
    Freedom("mh.token_order_of_its_own", "multihead",
            "the layout fixes qkv and each head's features, not the order in which the tokens reach the attention: "
            "attention treats its tokens as a set, so an order of your own (the mask moved alike), undone after, is "
            "correct",
            ((MH, "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
             (MH, MH_CTX,
              "        order = torch.randperm(T, device=x.device)  # a token order of its own, undone below\n"
              "        if mask is not None:\n"
              "            mask = torch.broadcast_to(mask, (B, self.h, T, T))[:, :, order][:, :, :, order]\n"
              "        ctx, _ = scaled_dot_product_attention(q[:, :, order], k[:, :, order], v[:, :, order], mask)\n"
              "        ctx = ctx[:, :, torch.argsort(order)]  # (B, h, T, d_k): the tokens in their own order again\n"))),
    Freedom("mh.reversed_heads_one_by_one", "multihead",
            "the layout fixes qkv and each head's features, not how the attention is called: one head at a time, "
            "its tokens (and the mask) reversed and put back",
            ((MH, "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
             (MH, MH_CTX,
              "        full = None if mask is None else mask.expand(B, self.h, T, T)  # (B, h, T, T)\n"
              "        ctx = torch.stack([scaled_dot_product_attention(\n"
              "            q[:, i].flip(1), k[:, i].flip(1), v[:, i].flip(1),\n"
              "            None if full is None else full[:, i].flip(1, 2))[0].flip(1)  # (B, T, d_k)\n"
              "            for i in range(self.h)], dim=1)  # (B, h, T, d_k)\n"))),
    # ------------------------------------------------------------------ positional.py
    Freedom("pe.numpy_table", "positional",
            "the imports allow numpy: the table may be computed in numpy (float64) and returned as float32",
            ((PE, "import torch\n", "import numpy as np\nimport torch\n"),
             (PE, PE_BODY, "    pos = np.arange(T)[:, None]\n"
                           "    two_i = np.arange(0, d_model, 2)\n"
                           "    angle = pos / np.power(10000.0, two_i / d_model)\n"
                           "    table = np.zeros((T, d_model))\n"
                           "    table[:, 0::2] = np.sin(angle)\n"
                           "    table[:, 1::2] = np.cos(angle)\n"
                           "    return torch.from_numpy(table).float()\n"))),
    Freedom("pe.non_persistent", "positional",
            "A buffer registered with persistent=False counts as a buffer",
            ((PE, PE_BUFFER, '        self.register_buffer("pe", positional_encoding(max_len, d_model), persistent=False)\n'),)),
    Freedom("pe.batch_buffer", "positional",
            "the table is a buffer under any name, with a leading batch dimension of 1 if you like",
            ((PE, PE_BUFFER, '        self.register_buffer("table", positional_encoding(max_len, d_model).unsqueeze(0))\n'),
             (PE, PE_ADD, "        return x + self.table[:, :T]  # (B, T, d_model)\n"))),
    Freedom("pe.sequence_first_buffer", "positional",
            "the table is a buffer under any name; axes of size 1 are a layout choice (the PyTorch tutorial keeps "
            "a (max_len, 1, d_model) table)",
            ((PE, PE_BUFFER, '        self.register_buffer("pe", positional_encoding(max_len, d_model).unsqueeze(1))\n'),
             (PE, PE_ADD, "        return x + self.pe[:T].transpose(0, 1)  # (1, T, d_model)\n"))),
    Freedom("pe.follows_input_dtype", "positional",
            "the output has the input's dtype: the table may be cast to x's dtype before adding",
            ((PE, PE_ADD, "        return x + self.pe[:T].to(x.dtype)\n"),)),
    Freedom("pe.module_dropout", "positional",
            "an extra module that does nothing in eval mode (dropout after adding, as in the PyTorch tutorial)",
            ((PE, PE_BUFFER, PE_BUFFER + "        self.dropout = nn.Dropout(0.1)\n"),
             (PE, PE_ADD, "        return self.dropout(x + self.pe[:T])\n"))),
    # ------------------------------------------------------------------ block.py
    Freedom("blk.ffn_ordered_dict", "block",
            "ffn is an nn.Sequential of Linear, GELU, Linear in this order, whatever its layers are called",
            ((BL, BL_IMPORT, "from collections import OrderedDict\n\n" + BL_IMPORT),
             (BL, FFN, "        self.ffn = nn.Sequential(OrderedDict(\n"
                       "            fc1=nn.Linear(d_model, d_ff), act=nn.GELU(), fc2=nn.Linear(d_ff, d_model)))\n"))),
    Freedom("blk.ffn_add_module", "block",
            "ffn is an nn.Sequential of Linear, GELU, Linear in this order, however it is built",
            ((BL, FFN, "        self.ffn = nn.Sequential()\n"
                       '        self.ffn.add_module("expand", nn.Linear(d_model, d_ff))\n'
                       '        self.ffn.add_module("gelu", nn.GELU())\n'
                       '        self.ffn.add_module("project", nn.Linear(d_ff, d_model))\n'),)),
    Freedom("blk.ffn_inert_layers", "block",
            "extra layers that do nothing in eval mode inside ffn (Dropout, Identity)",
            ((BL, FFN, "        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(0.1),\n"
                       "                                 nn.Linear(d_ff, d_model), nn.Identity())\n"),)),
    Freedom("blk.layernorm_eps", "block",
            "LayerNorm's eps may be any positive value up to the handout's 1e-5, such as the 1e-6 or 1e-12 of published models",
            ((BL, LN, LN.replace("nn.LayerNorm(d_model)", "nn.LayerNorm(d_model, eps=1e-6)")),)),
    # A held-out block kept its norms' parameters in float64 and cast their results back: the visible wiring test
    # applied those norms to float32 x itself and crashed (grader and visible tests now agree).
    Freedom("blk.norms_in_float64", "block",
            "float32 is enough; working in float64 inside is fine when the output has the input's dtype",
            ((BL, LN, LN.replace("nn.LayerNorm(d_model)", "nn.LayerNorm(d_model, dtype=torch.float64)")),
             (BL, "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
             (BL, "            x = x + self.attn(self.ln1(x), mask)  # (B, T, d_model)\n"
                  "            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)\n",
                  "            x = x + self.attn(self.ln1(x.double()).to(x.dtype), mask)\n"
                  "            x = x + self.ffn(self.ln2(x.double()).to(x.dtype))\n"),
             (BL, "            x = self.ln1(x + self.attn(x, mask))  # (B, T, d_model)\n"
                  "            x = self.ln2(x + self.ffn(x))  # (B, T, d_model)\n",
                  "            x = self.ln1((x + self.attn(x, mask)).double()).to(x.dtype)\n"
                  "            x = self.ln2((x + self.ffn(x)).double()).to(x.dtype)\n"))),
    Freedom("blk.sublayers_in_module_dict", "block",
            "forward runs the modules attn and ffn hold: through them, or through a ModuleDict or ModuleList that "
            "holds the same modules",
            ((BL, FFN, FFN + '        self.sublayers = nn.ModuleDict({"attn": self.attn, "ffn": self.ffn})\n'),
             (BL, POST, '            x = self.ln1(x + self.sublayers["attn"](x, mask))\n'
                        '            x = self.ln2(x + self.sublayers["ffn"](x))\n'),
             (BL, PRE, '            x = x + self.sublayers["attn"](self.ln1(x), mask)\n'
                       '            x = x + self.sublayers["ffn"](self.ln2(x))\n'))),
    Freedom("blk.residual_dropout", "block",
            "an extra module that does nothing in eval mode (dropout on each sub-layer's output)",
            ((BL, LN, LN + "        self.drop = nn.Dropout(0.1)\n"),
             (BL, POST, "            x = self.ln1(x + self.drop(self.attn(x, mask)))\n"
                        "            x = self.ln2(x + self.drop(self.ffn(x)))\n"),
             (BL, PRE, "            x = x + self.drop(self.attn(self.ln1(x), mask))\n"
                       "            x = x + self.drop(self.ffn(self.ln2(x)))\n"))),
    # Held-out s44: MultiHeadAttention in a helper module, imported from there by multihead.py and block.py. Graded
    # full marks hidden (the block is graded over a stand-in attention, whatever module its class came from); the
    # visible tests put their stand-in in place of multihead.py only, so the block ran the student's own class over
    # the multi-head tests' stand-in attention and six block tests failed.
    Freedom("blk.mha_from_helper_module", "block",
            "Your files may import each other and helper modules of your own placed beside them: MultiHeadAttention "
            "may live in a helper module that multihead.py and block.py both import it from",
            (("attention_layers.py", "", '"""My attention layers: multihead.py and block.py import them from here."""\n'
              + "".join(line for line in MH_MODULE.splitlines(True) if "SOLUTION" not in line)),
             (MH, MH_MODULE, "from attention_layers import MultiHeadAttention  # noqa: F401 (the class is in my helper)\n"),
             (BL, "from multihead import MultiHeadAttention\n", "from attention_layers import MultiHeadAttention\n")),
            helpers_in=(MH, "attention_layers.py")),
)

# Several freedoms taken at once, one submission each (no two of them patch the same text).
COMBINATIONS: tuple[tuple[str, ...], ...] = (
    ("sa.recap_names", "sa.causal_bool", "sa.mask_as_bool", "mh.assert_divisible", "mh.out_named_W_o",
     "mh.mask_to_bool", "pe.numpy_table", "pe.non_persistent", "blk.ffn_ordered_dict", "blk.residual_dropout"),
    ("sa.float64_inside", "sa.large_negative", "sa.module_dropout", "sa.import_side_effects", "mh.attention_dropout",
     "pe.batch_buffer", "blk.ffn_add_module"),
    ("sa.recap_names", "mh.out_named_W_o", "mh.attention_dropout", "pe.follows_input_dtype", "blk.ffn_inert_layers"),
)


def by_id() -> dict[str, Freedom]:
    return {f.id: f for f in FREEDOMS}


def combined(ids: tuple[str, ...]) -> Freedom:
    """One variant that takes every freedom of `ids` (their patches in order)."""
    chosen = [by_id()[i] for i in ids]
    return Freedom("+".join(ids), ",".join(sorted({f.component for f in chosen})), "; ".join(f.contract for f in chosen),
                   tuple(p for f in chosen for p in f.patches))
