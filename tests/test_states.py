"""Signal-function state in the checkpoint (udfs/states.py): every stateful kernel's state
round-trips exactly, and nothing that would run code -- a pickle -- is ever loaded."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from wavesql.udfs import registry
from wavesql.udfs import states
from wavesql.udfs.sigseg import SigSeg


def _seg(start: int, n: int, rate: float = 1000.0, seed: int = 0) -> SigSeg:
    rng = np.random.default_rng(seed)
    return SigSeg(start, rate, rng.standard_normal(n).astype(np.float32))


CALLS = [("lowpass", (50.0, 4)), ("highpass", (20.0, 2)), ("bandpass", (10.0, 60.0, 2)),
         ("notch", (50.0, 30.0)), ("fir", ([0.25, 0.5, 0.25],)), ("iir", ([0.2, 0.2], [1.0, -0.6])),
         ("resample", (400.0,)), ("cfar", (3.0, 0.1, 8)), ("threshold_ranges", (1.5, 3))]


@pytest.mark.parametrize("name, args", CALLS, ids=[c[0] for c in CALLS])
def test_a_kernel_state_round_trips_and_continues_identically(name, args):
    fn = registry.require(name)
    first, second = _seg(0, 300), _seg(300, 300, seed=1)
    if name == "cfar":  # scores, not segments
        first, second = 1.0, 2.5
    _, state = registry.call(name, first, *args, state=None)
    stored = states.loads(states.dumps(state))
    a, _ = registry.call(name, second, *args, state=state)
    b, _ = registry.call(name, second, *args, state=stored)
    if isinstance(a, SigSeg):
        np.testing.assert_array_equal(a.samples, b.samples)
        assert (a.start, a.rate) == (b.start, b.rate)
    else:
        assert repr(a) == repr(b)
    assert fn.stateful


def test_tags_survive_and_foreign_bytes_are_refused():
    state = {"a": (1, 2.5, None), "nan": float("nan"), "arr": np.arange(6, dtype=np.int16)
             .reshape(2, 3), 3: "int key", "__odd": [True, np.float64(-np.inf)]}
    back = states.loads(states.dumps(state))
    assert back["a"] == (1, 2.5, None) and back[3] == "int key"
    assert np.isnan(back["nan"]) and back["__odd"] == [True, -np.inf]
    assert back["arr"].dtype == np.int16 and back["arr"].tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError):
        states.loads(pickle.dumps(state))  # an (older) pickled state is never unpickled
    with pytest.raises(ValueError):
        states.loads(states.MAGIC + b'{"x": {"__nd": ["|O", [1], "AA=="]}}')
    with pytest.raises(TypeError):
        states.dumps({"x": object()})
    with pytest.raises(TypeError):
        states.dumps({"x": np.array([object()])})


def test_a_checkpoint_with_pickled_signal_state_is_refused(tmp_path):
    from wavesql.sources import wav_scan
    from wavesql.udfs.wav import WavError

    state_file = wav_scan.state_file(str(tmp_path), 7)
    (tmp_path / "k=000000000000007.pkl").write_bytes(pickle.dumps({"zi": None}))
    with pytest.raises(WavError) as err:
        wav_scan.load_states(state_file)
    assert err.value.code == "CHECKPOINT_MISMATCH"
    with open(state_file, "wb") as f:
        f.write(b"garbage")
    with pytest.raises(WavError) as err:
        wav_scan.load_states(state_file)
    assert err.value.code == "CORRUPT_FILE"
