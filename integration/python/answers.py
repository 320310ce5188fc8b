"""Comparing answers: same rows, in order when the query orders them,
floats within a tolerance."""

import math


def _close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def _key(row):
    return tuple(
        (0, f"{v:.3e}") if isinstance(v, float) else (1, "") if v is None else (2, str(v))
        for v in row
    )


def rows(table):
    cols = [c.to_pylist() for c in table.columns]
    return [tuple(col[i] for col in cols) for i in range(table.num_rows)]


def assert_same(actual, expected, ordered):
    a, e = rows(actual), rows(expected)
    assert len(a) == len(e), f"{len(a)} rows, expected {len(e)}"
    if not ordered:
        a.sort(key=_key)
        e.sort(key=_key)
    for i, (ra, re) in enumerate(zip(a, e)):
        assert len(ra) == len(re) and all(map(_close, ra, re)), (
            f"row {i}: got {ra}, expected {re}"
        )


def is_ordered(sql):
    return "order by" in sql.lower()
