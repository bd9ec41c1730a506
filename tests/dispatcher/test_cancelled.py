"""The cancelled-rows set of the replayer: single ordinals and ranges (cut records)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.dispatcher.replay import Cancelled


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 20)), max_size=15))
def test_cancelled_agrees_with_a_plain_set(ops):
    c, model = Cancelled(), set()
    for single, a, n in ops:
        if single:
            c.add(a)
            model.add(a)
        else:
            c.add_range(a, a + n)
            model.update(range(a, a + n))
    assert [i for i in range(-2, 90) if i in c] == sorted(model)
