"""The bug catalogue: realistic mistakes of students reading the Day 13 handout (data only).

Each entry names its component, the hidden test it must fail (rubric id), and a mutant of the
reference that shows the bug: patches (file, exact text, replacement) applied to a copy of the
lesson's reference (lesson.toml `solutions`; tests/day13/test_graders.py checks that each text occurs
exactly once, so the catalogue cannot rot silently). Hint texts live in rubric.toml under
[hints."<id>"]. The engine builds the mutants and replays a failing student's calls on them to name
the misconception (grader/judging/mutants.py).
"""
from __future__ import annotations

from grader.day13 import tolerances as tol
from grader.judging.mutants import Bug

SA, MH, PE, BL = "self_attention.py", "multihead.py", "positional.py", "block.py"


def _b(id, component, test, *patches, forbidden=(), match=None):
    return Bug(id, component, f"{component}.{test}", tuple(patches), tuple(forbidden), match=match)


SCORES = "    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
FILL = '        scores = scores.masked_fill(mask == 0, float("-inf"))  # (..., T_q, T_k)\n'
SOFTMAX = "    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1\n"
OUT = "    out = weights @ V  # (..., T_q, d_v)\n"
TRIL = "    return torch.tril(torch.ones(T, T, device=device))"  # causal_mask's body
F_IMPORT = (SA, "import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n")
SPLIT = "        q, k, v = [t.view(B, T, self.h, self.d_k).transpose(1, 2) for t in (q, k, v)]  # (B, h, T, d_k)\n"
CTX = "        ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)\n"
CONCAT = "        ctx = ctx.transpose(1, 2).contiguous().view(B, T, D)  # (B, T, D): heads concatenated\n"
PE_EVEN = "    pe[:, 0::2] = torch.sin(angle)  # even features\n"
PE_ODD = "    pe[:, 1::2] = torch.cos(angle)  # odd features\n"
POST1 = "            x = self.ln1(x + self.attn(x, mask))  # (B, T, d_model)\n"
POST2 = "            x = self.ln2(x + self.ffn(x))  # (B, T, d_model)\n"
PRE1 = "            x = x + self.attn(self.ln1(x), mask)  # (B, T, d_model)\n"
PRE2 = "            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)\n"


MH_INLINE_IMPORT = (MH, "import torch.nn as nn\n", "import math\n\nimport torch\nimport torch.nn as nn\n")


def _mh_inline(scale: str, dim: str):
    """multihead.py with the attention written inline (as the handout's §7 code does), with a bug in it."""
    return (MH_INLINE_IMPORT,
            (MH, CTX, f"        scores = q @ k.transpose(-2, -1){scale}  # (B, h, T, T)\n"
                      "        if mask is not None:\n"
                      '            scores = scores.masked_fill(mask == 0, float("-inf"))\n'
                      f"        ctx = torch.softmax(scores, dim={dim}) @ v\n"))


BUGS: tuple[Bug, ...] = (
    # ------------------------------------------------------------------ self_attention.py
    _b("sa.no_scale", "self_attention", "worked_values",
       (SA, SCORES, "    scores = Q @ K.transpose(-2, -1)  # (..., T_q, T_k)\n")),
    _b("sa.divide_by_dk", "self_attention", "worked_values",
       (SA, SCORES, "    scores = Q @ K.transpose(-2, -1) / d_k  # (..., T_q, T_k)\n")),
    # d_k read from axis 1, as for the handout's 2-D (T, d_k) queries: with a batch, (B, T, d_k), that is T. The
    # worked problems are 2-D, so the first test it fails is the reference's batched shapes.
    _b("sa.d_k_from_axis_1", "self_attention", "sdpa_reference",
       (SA, "    d_k = Q.size(-1)\n", "    d_k = Q.size(1)\n")),
    _b("sa.softmax_query_axis", "self_attention", "worked_values",
       (SA, SOFTMAX, "    weights = torch.softmax(scores, dim=-2)\n")),
    # Softmax by hand, its sum taken without keepdim: (..., T_q) broadcasts along the keys, so entry (i, j) is
    # divided by row j's sum (the softmax over the query axis when the scores are symmetric, an error when T_q != T_k).
    _b("sa.sum_without_keepdim", "self_attention", "worked_values",
       (SA, SOFTMAX, "    weights = torch.exp(scores)\n"
                     "    weights = weights / weights.sum(dim=-1)\n")),
    _b("sa.softmax_dim1", "self_attention", "sdpa_reference",
       (SA, SOFTMAX, "    weights = torch.softmax(scores, dim=1)\n")),
    _b("sa.inverted_mask", "self_attention", "sdpa_masks",
       (SA, FILL, '        scores = scores.masked_fill(mask == 1, float("-inf"))\n')),
    _b("sa.mask_fill_zero", "self_attention", "sdpa_masks",
       (SA, FILL, "        scores = scores.masked_fill(mask == 0, 0.0)\n")),
    # masked_fill called without keeping its result (held-out s44's mk1): it returns a new tensor and leaves scores as
    # they were, so every mask is ignored, and the masked weights are the unmasked ones.
    _b("sa.masked_fill_unassigned", "self_attention", "sdpa_masks",
       (SA, FILL, '        scores.masked_fill(mask == 0, float("-inf"))  # (..., T_q, T_k)\n')),
    _b("sa.returns_scores", "self_attention", "worked_values",
       (SA, "    return out, weights\n", "    return out, scores\n")),
    _b("sa.no_transpose_k", "self_attention", "worked_values",
       (SA, SCORES, "    scores = Q @ K / math.sqrt(d_k)\n")),
    _b("sa.scale_values", "self_attention", "worked_values",
       (SA, SCORES, "    scores = Q @ K.transpose(-2, -1)\n"),
       (SA, OUT, "    out = weights @ V / math.sqrt(d_k)\n")),
    _b("sa.softmax_then_mask", "self_attention", "sdpa_masks",
       (SA, "    if mask is not None:\n        # -inf", "    if False:\n        # -inf"),
       (SA, SOFTMAX, SOFTMAX + "    if mask is not None:\n        weights = weights.masked_fill(mask == 0, 0.0)\n")),
    _b("sa.mask_query_axis", "self_attention", "sdpa_masks",
       (SA, FILL, '        scores = scores.masked_fill(mask.transpose(-2, -1) == 0, float("-inf"))\n')),
    _b("sa.detached_scores", "self_attention", "sdpa_gradients",
       (SA, SOFTMAX, "    weights = torch.softmax(scores.detach(), dim=-1)\n")),
    _b("sa.inplace_nan_guard", "self_attention", "sdpa_gradients",
       (SA, SOFTMAX, "    weights = torch.softmax(scores, dim=-1)\n    weights.nan_to_num_(0.0)  # fully blocked rows\n")),
    # F.dropout on the weights inside the function: its training argument is True unless given, and a function has no
    # eval mode, so weights are dropped in every call (the grader seeds each call alike, so the replay matches).
    _b("sa.functional_dropout", "self_attention", "worked_values",
       F_IMPORT,
       (SA, OUT, "    weights = F.dropout(weights, p=0.1)\n" + OUT)),
    # The same on the output instead (held-out s39's ka): the weights are right, the output is dropped in every call.
    _b("sa.functional_dropout_output", "self_attention", "sdpa_reference",
       F_IMPORT,
       (SA, OUT, "    out = F.dropout(weights @ V, p=0.1)  # (..., T_q, d_v)\n")),
    _b("sa.causal_triu", "self_attention", "causal_mask",
       (SA, TRIL, "    return torch.triu(torch.ones(T, T, device=device))")),
    _b("sa.causal_no_diagonal", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.tril(torch.ones(T, T, device=device), diagonal=-1)")),
    # 1 where a token may NOT look: the convention of the masks torch's own layers take as bool (True = blocked).
    _b("sa.causal_blocked_ones", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.triu(torch.ones(T, T, device=device), diagonal=1)")),
    # An additive mask (0 where allowed, -inf where blocked) is what torch's own layers take; the contract's
    # causal_mask is the handout's 1/0 one, which a 0-entry-blocks rule reads.
    _b("sa.causal_additive", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.triu(torch.full((T, T), float(\"-inf\"), device=device), diagonal=1)")),
    # The same additive mask with a large negative number for -inf (-1e9, as much published code writes it): matched by
    # value, -inf matches no finite number, so it needs its own mutant.
    _b("sa.causal_additive_large_negative", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.triu(torch.full((T, T), -1e9, device=device), diagonal=1)")),
    # The other large negatives published code writes: -1e4 (safe in float16) and the dtype's most negative number.
    _b("sa.causal_additive_minus_1e4", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.triu(torch.full((T, T), -1e4, device=device), diagonal=1)")),
    _b("sa.causal_additive_finfo_min", "self_attention", "causal_mask",
       (SA, TRIL,
        "    return torch.triu(torch.full((T, T), torch.finfo(torch.float32).min, device=device), diagonal=1)")),
    _b("sa.biased_projections", "self_attention", "module_reference",
       (SA, "        self.W_q = nn.Linear(d_model, d_k, bias=False)\n        self.W_k = nn.Linear(d_model, d_k, bias=False)\n"
            "        self.W_v = nn.Linear(d_model, d_k, bias=False)\n",
        "        self.W_q = nn.Linear(d_model, d_k)\n        self.W_k = nn.Linear(d_model, d_k)\n"
        "        self.W_v = nn.Linear(d_model, d_k)\n")),
    _b("sa.key_from_query", "self_attention", "module_reference",
       (SA, "        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)", "        Q, K, V = self.W_q(x), self.W_q(x), self.W_v(x)")),
    _b("sa.module_drops_mask", "self_attention", "module_reference",
       (SA, "        return scaled_dot_product_attention(Q, K, V, mask)", "        return scaled_dot_product_attention(Q, K, V)")),
    # mask=None read as "a decoder": the module builds a causal mask itself. The contract's None is no mask at all.
    _b("sa.module_causal_by_default", "self_attention", "module_reference",
       (SA, "        return scaled_dot_product_attention(Q, K, V, mask)",
        "        if mask is None:\n            mask = causal_mask(x.size(1), device=x.device)\n"
        "        return scaled_dot_product_attention(Q, K, V, mask)")),
    _b("sa.module_no_grad", "self_attention", "module_gradients",
       (SA, "        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # each (B, T, d_k)\n",
        "        with torch.no_grad():\n            Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)\n")),
    _b("sa.torch_sdpa", "self_attention", "sdpa_reference",
       (SA, OUT, "    out = torch.nn.functional.scaled_dot_product_attention(\n"
                 "        Q, K, V, attn_mask=None if mask is None else mask != 0)\n"),
       forbidden=("scaled_dot_product_attention",)),
    # ------------------------------------------------------------------ multihead.py
    _b("mh.sqrt_d_model", "multihead", "reference", *_mh_inline(" / math.sqrt(D)", "-1")),
    _b("mh.no_scale", "multihead", "reference", *_mh_inline("", "-1")),
    _b("mh.softmax_over_heads", "multihead", "reference", *_mh_inline(" / math.sqrt(self.d_k)", "1")),
    # q divided by √d_k before an attention that divides Q Kᵀ by √d_k again (tutorials that scale q up front write
    # their own attention without the division): the scores end up divided by d_k.
    _b("mh.scaled_twice", "multihead", "reference",
       (MH, "import torch.nn as nn\n", "import math\n\nimport torch.nn as nn\n"),
       (MH, SPLIT, SPLIT + "        q = q / math.sqrt(self.d_k)\n")),
    _b("mh.split_without_transpose", "multihead", "reference",
       (MH, SPLIT, "        q, k, v = [t.reshape(B, self.h, T, self.d_k) for t in (q, k, v)]\n")),
    _b("mh.heads_not_transposed", "multihead", "reference",
       (MH, SPLIT, "        q, k, v = [t.view(B, T, self.h, self.d_k) for t in (q, k, v)]  # (B, T, h, d_k)\n"),
       (MH, CONCAT, "        ctx = ctx.contiguous().view(B, T, D)\n")),
    _b("mh.no_transpose_back", "multihead", "reference",
       (MH, CONCAT, "        ctx = ctx.contiguous().view(B, T, D)\n")),
    _b("mh.missing_out_projection", "multihead", "reference",
       (MH, "        return self.out(ctx)  # (B, T, D)\n", "        return ctx\n")),
    _b("mh.no_head_split", "multihead", "reference",
       (MH, SPLIT, "        q, k, v = [t.unsqueeze(1) for t in (q, k, v)]  # (B, 1, T, D)\n")),
    _b("mh.chunk_order", "multihead", "reference",
       (MH, "        q, k, v = self.qkv(x).chunk(3, dim=-1)", "        q, v, k = self.qkv(x).chunk(3, dim=-1)")),
    _b("mh.interleaved_heads", "multihead", "reference",
       (MH, SPLIT, "        q, k, v = [t.view(B, T, self.d_k, self.h).permute(0, 3, 1, 2) for t in (q, k, v)]\n")),
    _b("mh.mask_dropped", "multihead", "masks",
       (MH, CTX, "        ctx, _ = scaled_dot_product_attention(q, k, v)\n")),
    # The mask turned into torch's own bool form (True = blocked) before an attention that blocks where it is 0.
    _b("mh.mask_inverted", "multihead", "masks",
       (MH, CTX, "        if mask is not None:\n            mask = mask == 0\n" + CTX)),
    _b("mh.no_divisibility_check", "multihead", "rejects_bad_heads",
       (MH, "        if d_model % n_heads != 0:\n", "        if False:\n")),
    # The check with its operands reversed (held-out s44's mk4): n_heads % d_model is n_heads whenever there are fewer
    # heads than features, so every valid size raises and only d_model == n_heads (or a multiple) constructs. Named
    # from the error it raises, which is the reference's message: a student's own wording of it is not named.
    _b("mh.divisibility_reversed", "multihead", "rejects_bad_heads",
       (MH, "        if d_model % n_heads != 0:\n", "        if n_heads % d_model != 0:\n")),
    # d_k by true division (held-out s44's mk3): d_model / n_heads is a float, 4.0, which view() refuses as a size, so
    # every forward crashes (the attributes test passes: 4.0 == 4). Named from the crash, as pe.T_from_feature_axis is.
    _b("mh.d_k_true_division", "multihead", "reference",
       (MH, "        self.h, self.d_k = n_heads, d_model // n_heads\n",
        "        self.h, self.d_k = n_heads, d_model / n_heads\n")),
    _b("mh.no_bias", "multihead", "attributes",
       (MH, "        self.qkv = nn.Linear(d_model, 3 * d_model)", "        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)"),
       (MH, "        self.out = nn.Linear(d_model, d_model)", "        self.out = nn.Linear(d_model, d_model, bias=False)")),
    # ------------------------------------------------------------------ positional.py
    _b("pe.sin_cos_swapped", "positional", "worked_values",
       (PE, PE_EVEN, "    pe[:, 0::2] = torch.cos(angle)\n"), (PE, PE_ODD, "    pe[:, 1::2] = torch.sin(angle)\n")),
    _b("pe.exponent_i_over_d", "positional", "worked_values",
       (PE, "    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)",
        "    two_i = torch.arange(0, d_model // 2, dtype=torch.float32)")),
    _b("pe.feature_index_exponent", "positional", "worked_values",
       (PE, "    angle = pos / (10000 ** (two_i / d_model))  # (T, d_model/2)\n",
        "    feature = torch.arange(d_model, dtype=torch.float32)  # (d_model,)\n"
        "    full = pos / (10000 ** (feature / d_model))  # (T, d_model)\n"),
       (PE, PE_EVEN, "    pe[:, 0::2] = torch.sin(full[:, 0::2])\n"),
       (PE, PE_ODD, "    pe[:, 1::2] = torch.cos(full[:, 1::2])\n")),
    # The feature index 2i doubled once more: arange(0, d_model, 2) already counts 2i. Hidden only: on §8's
    # d_model = 4 (the first visible test) its numbers are also those of a denominator d_model - 2, and the visible
    # tests' facts already point at the exponent; the hidden tolerance hides that fact, so the grading names it.
    Bug("pe.exponent_doubled", "positional", "positional.worked_values",
        ((PE, "    angle = pos / (10000 ** (two_i / d_model))", "    angle = pos / (10000 ** (2 * two_i / d_model))"),),
        visible=False),
    # The parentheses of §8's formula left out: pos / 10000 ** (2i) / d_model divides by 10000^(2i) and then by d_model,
    # so even the first pair's angle is pos / d_model.
    _b("pe.exponent_precedence", "positional", "worked_values",
       (PE, "    angle = pos / (10000 ** (two_i / d_model))", "    angle = pos / 10000 ** two_i / d_model")),
    _b("pe.base_1000", "positional", "worked_values",
       (PE, "    angle = pos / (10000 ** (two_i / d_model))", "    angle = pos / (1000 ** (two_i / d_model))")),
    _b("pe.all_sine", "positional", "worked_values",
       (PE, PE_ODD, "    pe[:, 1::2] = torch.sin(angle)\n")),
    # Some published code (tensor2tensor's timing signal) puts all the sines first, then all the cosines.
    _b("pe.sin_then_cos_halves", "positional", "worked_values",
       (PE, PE_EVEN, "    pe[:, : d_model // 2] = torch.sin(angle)\n"),
       (PE, PE_ODD, "    pe[:, d_model // 2 :] = torch.cos(angle)\n")),
    _b("pe.positions_from_one", "positional", "worked_values",
       (PE, "    pos = torch.arange(T, dtype=torch.float32)", "    pos = torch.arange(1, T + 1, dtype=torch.float32)")),
    _b("pe.parameter", "positional", "buffer",
       (PE, '        self.register_buffer("pe", positional_encoding(max_len, d_model))',
        "        self.pe = nn.Parameter(positional_encoding(max_len, d_model), requires_grad=False)")),
    _b("pe.first_batch_only", "positional", "module_forward",
       (PE, "        return x + self.pe[:T]", "        x = x.clone()\n        x[0] = x[0] + self.pe[:T]\n        return x")),
    _b("pe.float64_table", "positional", "dtype_shape",
       (PE, "    pos = torch.arange(T, dtype=torch.float32)", "    pos = torch.arange(T, dtype=torch.float64)"),
       (PE, "    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)",
        "    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)"),
       (PE, "    pe = torch.zeros(T, d_model)", "    pe = torch.zeros(T, d_model, dtype=torch.float64)")),
    _b("pe.no_slice", "positional", "module_forward",
       (PE, "        return x + self.pe[:T]", "        return x + self.pe")),
    # Published code scales the token embeddings by √d_model (the Annotated Transformer's Embeddings), and
    # students copy that into the positional encoding's forward.
    _b("pe.scales_x", "positional", "module_forward",
       (PE, "        return x + self.pe[:T]", "        return x * x.size(-1) ** 0.5 + self.pe[:T]")),
    # x is batch-first, (B, T, d_model): T read from the first axis is the batch size.
    _b("pe.T_from_batch_axis", "positional", "module_forward",
       (PE, "        T = x.size(1)", "        T = x.size(0)")),
    # T read from the last axis, the features: pe[:d_model] is added, which crashes unless T == d_model (held-out s42).
    _b("pe.T_from_feature_axis", "positional", "module_forward",
       (PE, "        T = x.size(1)", "        T = x.size(-1)")),
    # The PyTorch tutorial's layout: a (max_len, 1, d_model) table for sequence-first x, sliced by x.size(0). On
    # batch-first x, pe[:B] is (B, 1, d_model) and broadcasts: sentence b gets PE[b] on every token. With one sentence
    # its numbers are pe.T_from_batch_axis's; with more, that one's (max_len, d_model) table crashes and this one's does not.
    _b("pe.seq_first_table", "positional", "module_forward",
       (PE, '        self.register_buffer("pe", positional_encoding(max_len, d_model))',
        '        self.register_buffer("pe", positional_encoding(max_len, d_model).unsqueeze(1))'),
       (PE, "        T = x.size(1)", "        T = x.size(0)")),
    # ------------------------------------------------------------------ block.py
    _b("blk.pre_post_swapped", "block", "post_ln",
       (BL, "        if self.pre_ln:\n", "        if not self.pre_ln:\n")),
    _b("blk.no_attn_residual", "block", "post_ln",
       (BL, POST1, "            x = self.ln1(self.attn(x, mask))\n")),
    _b("blk.post_ln_no_ffn_residual", "block", "post_ln",
       (BL, POST2, "            x = self.ln2(self.ffn(x))\n")),
    # Post-LN's second sub-layer written the Pre-LN way: the norm before the FFN, the residual left unnormed (s42's y2).
    _b("blk.post_ln_second_pre_ln", "block", "post_ln",
       (BL, POST2, "            x = x + self.ffn(self.ln2(x))  # (B, T, d_model)\n")),
    _b("blk.no_ffn_residual", "block", "pre_ln",
       (BL, PRE2, "            x = self.ffn(self.ln2(x))\n")),
    _b("blk.relu", "block", "post_ln",
       (BL, "            nn.GELU(),\n", "            nn.ReLU(),\n")),
    _b("blk.no_activation", "block", "post_ln",
       (BL, "            nn.GELU(),\n", "")),
    # GPT-2's GELU, the tanh approximation: the block's outputs move by ~1.4e-4, 7x the tests' tolerance, so it is
    # matched at CLOSE_MATCH, not MATCH (a student just past the tolerance for another reason is not it).
    _b("blk.gelu_tanh", "block", "post_ln",
       (BL, "            nn.GELU(),\n", '            nn.GELU(approximate="tanh"),\n'), match=tol.CLOSE_MATCH),
    # One activation too many: a GELU after the second Linear as well, so the FFN's output can never be below about -0.17.
    _b("blk.ffn_trailing_activation", "block", "post_ln",
       (BL, "            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)\n",
        "            nn.Linear(d_ff, d_model),  # project back: (B, T, d_model)\n            nn.GELU(),\n")),
    # Post-LN whose second residual adds the sum before ln1 (the FFN still reads ln1 of it).
    _b("blk.post_ln_unnormed_residual", "block", "post_ln",
       (BL, POST1 + POST2, "            h = x + self.attn(x, mask)  # (B, T, d_model)\n"
                           "            x = self.ln2(h + self.ffn(self.ln1(h)))  # (B, T, d_model)\n")),
    # One residual kept from the top of forward and added by both sub-layers: the second adds the block's input.
    _b("blk.stale_residual", "block", "post_ln",
       (BL, "        if self.pre_ln:\n", "        residual = x\n        if self.pre_ln:\n"),
       (BL, PRE1, "            x = residual + self.attn(self.ln1(x), mask)\n"),
       (BL, PRE2, "            x = residual + self.ffn(self.ln2(x))\n"),
       (BL, POST1, "            x = self.ln1(residual + self.attn(x, mask))\n"),
       (BL, POST2, "            x = self.ln2(residual + self.ffn(x))\n")),
    _b("blk.norm_inside_residual", "block", "post_ln",
       (BL, POST1, "            x = x + self.ln1(self.attn(x, mask))\n")),
    # Held-out s52 (b_ln2_inside_residual): the same in the second sub-layer, a mistake no entry named.
    _b("blk.norm_inside_second_residual", "block", "post_ln",
       (BL, POST2, "            x = x + self.ln2(self.ffn(x))\n")),
    _b("blk.shared_layernorm", "block", "post_ln",
       (BL, "        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)",
        "        self.ln1 = self.ln2 = nn.LayerNorm(d_model)")),
    _b("blk.ffn_reads_block_input", "block", "post_ln",
       (BL, POST1, "            h = self.ln1(x + self.attn(x, mask))\n"),
       (BL, POST2, "            x = self.ln2(h + self.ffn(x))\n")),
    _b("blk.d_ff_ignored", "block", "d_ff",
       (BL, "        d_ff = 4 * d_model if d_ff is None else d_ff", "        d_ff = 4 * d_model")),
    _b("blk.mask_dropped", "block", "mask_passthrough",
       (BL, POST1, "            x = self.ln1(x + self.attn(x))\n")),
    _b("blk.pre_ln_wrong_norm", "block", "pre_ln",
       (BL, PRE2, "            x = x + self.ffn(self.ln1(x))\n")),
    _b("blk.pre_ln_normed_residual", "block", "pre_ln",
       (BL, PRE1, "            x = self.ln1(x)\n            x = x + self.attn(x, mask)\n")),
)
