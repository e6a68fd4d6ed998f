"""Sample-by-sample kernels (udfs/kernels/pointwise.py): square."""

from __future__ import annotations

import doctest
import importlib

import numpy as np

from tests.data import raises
from wavesql.udfs import registry
from wavesql.udfs.sigseg import SegBlock, SigSeg


def test_square_squares_every_sample_and_keeps_start_and_rate():
    x = np.array([-2.0, 0.5, np.nan, np.inf, 0.0], dtype=np.float32)
    out = registry.call("square", SigSeg(7, 200.0, x))
    assert (out.start, out.rate) == (7, 200.0)
    np.testing.assert_array_equal(out.samples, [4.0, 0.25, np.nan, np.inf, 0.0])
    assert out.samples.dtype == np.float64
    assert registry.call("square", SigSeg(3, 200.0, np.zeros(0))).samples.shape == (0,)
    raises("TYPE_ERROR", registry.call, "square", 1.5)


def test_square_batch_form_agrees_with_the_kernel():
    rng = np.random.default_rng(0)
    block = SegBlock(np.array([0, 64, 128]), 100.0, rng.normal(size=(3, 64)).astype(np.float32))
    batched = registry.lookup("square").batch(block)
    for i in range(block.k):
        row = registry.call("square", SigSeg(int(block.starts[i]), 100.0, block.data[i]))
        np.testing.assert_array_equal(batched.data[i], row.samples)


def test_square_docstring_examples_run():
    mod = importlib.import_module("wavesql.udfs.kernels.pointwise")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
