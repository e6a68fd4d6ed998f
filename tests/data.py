"""Data and helpers the tests share (the data ships in the repository, so a fresh clone has it)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: XStream's Table I input: 9 s, 44.1 kHz, mono int16, a voice counting one to five.
COUNTING_WAV = str(ROOT / "examples" / "data" / "counting_44k1.wav")


def counting_voice():
    """The counting recording as one SigSeg of float64 samples in [-1, 1)."""
    import numpy as np
    from scipy.io import wavfile

    from wavesql.udfs.sigseg import SigSeg

    rate, data = wavfile.read(COUNTING_WAV)
    return SigSeg(0, float(rate), data.astype(np.float64) / 32768.0)


def raises(code: str, fn, *args, **kwargs):
    """``fn(*args)`` raises SignalError with ``code``, a code registered in wavesql.errors."""
    import pytest

    from wavesql.errors import ERROR_CODES
    from wavesql.udfs.sigseg import SignalError

    assert code in ERROR_CODES, f"{code} is not a registered error code"
    with pytest.raises(SignalError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, (info.value.code, str(info.value))
    return info.value
