"""Hidden tests for positional.py (handout §8). Points: rubric.toml [positional.*]."""
import numpy as np

from grader.day13 import tolerances as tol
from grader.day13.tests import checks as ck


def test_worked_values(student, reference):
    res = student.positional_encoding(3, 4)
    pe = ck.output(res, 0, "positional_encoding(3, 4)", count=1)
    ck.check(pe.shape == (3, 4), f"positional_encoding(3, 4): expected shape (3, 4), got {pe.shape}")
    feature = {"axes": ("feature",)}
    ck.close(pe[0], [0, 1, 0, 1], tol.WORKED_3DP, "§8 position 0 (d_model = 4)", facts=feature)
    ck.close(pe[1], [0.841, 0.540, 0.010, 1.000], tol.WORKED_3DP, "§8 position 1 (d_model = 4)", facts=feature)
    ck.close(pe[2, :2], [0.909, -0.416], tol.WORKED_3DP, "§8 position 2, first two features (d_model = 4)",
             facts=feature)


TABLE_CASES = [(1, 8), (50, 16), (7, 6), (5000, 64)]


def test_table_reference(student, reference):
    pairs = [((T, d), student.positional_encoding(T, d), reference.positional_encoding(T, d)) for T, d in TABLE_CASES]
    for (T, d), got, exp in pairs:
        what = f"positional_encoding({T}, {d})"
        ck.close(ck.output(got, 0, what, count=1), ck.output(exp, 0, "reference"), tol.PE_TABLE, what,
                 facts={"axes": ("position", "feature")})


def test_dtype_shape(student, reference):
    """Shape and dtype, worth points only for a table that encodes the positions (zeros have both)."""
    res = student.positional_encoding(10, 8)
    pe = ck.output(res, 0, "positional_encoding(10, 8)", count=1)
    ck.check(pe.shape == (10, 8), f"positional_encoding(10, 8): expected shape (10, 8), got {pe.shape}")
    ck.require_real_table(pe, "positional_encoding(10, 8)'s shape and dtype")
    dtype = ck.dtype_of(res, 0)
    ck.check(dtype == "float32", f"positional_encoding(10, 8): expected a float32 tensor, got {dtype}")


def _module_cases():
    return [  # (what, x, d_model, max_len)
        ("PositionalEncoding(16, max_len=100), B=3, T=7", ck.randn(1100, 3, 7, 16), 16, 100),
        ("PositionalEncoding(8) (max_len 5000), B=2, T=5", ck.randn(1101, 2, 5, 8), 8, None),
        ("PositionalEncoding(6, max_len=4), B=2, T=4 (T = max_len)", ck.randn(1102, 2, 4, 6), 6, 4),
    ]


def test_module_forward(student, reference):
    """x + PE[:T] with the reference table, or with the student's own positional_encoding when that
    table encodes the positions (then a formula bug is charged to the table tests only); and the gradient reaches x
    unchanged, as the visible test asks (held-out s44's `x += self.pe[:T]` changed its leaf in place: visible failed,
    hidden passed)."""
    cases = _module_cases()
    calls = [(what, x, student.pe_module(x, d, n), reference.pe_module(x, d, n),
              student.positional_encoding(x.shape[1], d)) for what, x, d, n in cases]
    own_tables = _charged_elsewhere(student, reference, [((x.shape[1], d), call[-1])
                                                        for (_, x, d, _), call in zip(cases, calls)])
    x, g = ck.randn(1103, 2, 5, 8), ck.randn(1104, 2, 5, 8)
    backward = (student.pe_module(x, 8, 50, grad_out=g), reference.pe_module(x, 8, 50, grad_out=g))
    for what, x, got, exp, own in calls:
        out = ck.output(got, 0, what, count=1)
        dtype = ck.dtype_of(got, 0)
        ck.check(dtype == "float32", f"{what}: a float32 x must come back float32, got {dtype}")
        table = own.array(0) if not own.error and own_tables else None
        if table is not None and table.shape == x.shape[1:] and not ck.table_reasons(table):
            try:
                ck.close(out, x.astype(np.float64) + table, tol.PE_TABLE, what)
                continue
            except ck.GradeFailure:
                pass
        ck.close(out, ck.output(exp, 0, "reference"), tol.PE_TABLE, f"{what}: x + PE[:T]", facts={"axes": ck.TOKENS})
    ck.same_grads(*backward, "PositionalEncoding(8, max_len=50) backward, B=2, T=5", ("x",))


def _charged_elsewhere(student, reference, tables) -> bool:
    """Whether the module test may take the student's own tables ([((T, d_model), answer)]) as its yardstick: where
    they differ from the handout's, a test that judges positional_encoding by the handout's numbers must fail, so that
    the difference is charged there. One that passes them and is wrong only on the module test's sizes would cancel a
    module bug exactly there (red team s56r; s58r: with one entry the worked test does not read made wrong)."""
    def same(size, own):
        exp = reference.positional_encoding(*size)
        if own.error or exp.error or own.array(0) is None or own.array(0).shape != exp.array(0).shape:
            return False
        try:
            ck.close(own.array(0), exp.array(0), tol.PE_TABLE, "")
        except ck.GradeFailure:
            return False
        return True

    if all(same(size, own) for size, own in tables):
        return True  # the yardstick is the handout's table there
    return any(ck.fails(test, student, reference) for test in (test_worked_values, test_table_reference))


def test_buffer(student, reference):
    res = student.inspect("positional", "PositionalEncoding", [16, 50])
    info = ck.ok(res, "PositionalEncoding(16, max_len=50)").inspect
    params = info["parameters"]
    ck.check(not params, f"PositionalEncoding must have no parameters (the table is fixed), found {sorted(params)}: "
                         "use register_buffer", pattern="not_a_buffer")
    tables = [n for n, shape in info["buffers"].items() if [s for s in shape if s != 1] == [50, 16]]
    # A buffer of another shape is a table built wrong, which the message shows, not a table that is no buffer.
    ck.check(bool(tables), "PositionalEncoding(16, max_len=50) must hold its (50, 16) table as a buffer; "
                           f"buffers found: {info['buffers'] or 'none'}",
             pattern="shape" if info["buffers"] else "not_a_buffer")
