"""Signal-function state as bytes that load without running code (no pickle).

Stateful kernels (``lowpass``, ``iir``, ``cfar``, ``threshold_ranges``, ``resample``, ...)
keep their state between micro-batches in the checkpoint, which a user (or anyone who can
write there) controls; a pickle would run whatever code it names when loaded. A state is a
tree of dicts, lists, tuples, numbers, strings, None and numeric numpy arrays, written as
JSON with tagged values::

    b"WSQLKST1" + JSON
    {"__tuple": [...]}                        a tuple
    {"__dict": [[key, value], ...]}           a dict whose keys are not all strings
    {"__nd": [dtype, shape, base64 bytes]}    a numpy array (numbers or booleans only)
    {"__float": "nan" | "inf" | "-inf"}       a float JSON cannot spell

Anything else (an object, an object array) is refused when written (``TypeError``, a bug
in a kernel) and a value that is not such a tree when read (``ValueError``).
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np

MAGIC = b"WSQLKST1"
#: numpy dtype kinds a state array may have: bool, signed/unsigned int, float, complex.
_KINDS = "biufc"


def dumps(state) -> bytes:
    return MAGIC + json.dumps(_encode(state), separators=(",", ":"), allow_nan=False).encode()


def loads(data: bytes):
    if not data.startswith(MAGIC):
        raise ValueError("not a WaveSQL signal-function state (an older pickled one, or "
                         "another file)")
    return _decode(json.loads(data[len(MAGIC):]))


def _encode(value):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else {"__float": repr(value)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _KINDS:
            raise TypeError(f"a state array of dtype {value.dtype} cannot be stored")
        data = np.ascontiguousarray(value)
        return {"__nd": [data.dtype.str, list(data.shape),
                         base64.b64encode(data.tobytes()).decode()]}
    if isinstance(value, tuple):
        return {"__tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v) for k, v in value.items()}
        return {"__dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    raise TypeError(f"a {type(value).__name__} in a signal-function state cannot be stored")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tuple" in value:
        return tuple(_decode(v) for v in value["__tuple"])
    if "__dict" in value:
        return {_key(_decode(k)): _decode(v) for k, v in value["__dict"]}
    if "__float" in value:
        if value["__float"] not in ("nan", "inf", "-inf"):
            raise ValueError(f"bad float {value['__float']!r} in a state")
        return float(value["__float"])
    if "__nd" in value:
        dtype, shape, data = value["__nd"]
        dt = np.dtype(dtype)
        if dt.kind not in _KINDS:
            raise ValueError(f"a state array of dtype {dtype} is not allowed")
        return np.frombuffer(base64.b64decode(data), dtype=dt).reshape(shape).copy()
    return {k: _decode(v) for k, v in value.items()}


def _key(key):
    return tuple(key) if isinstance(key, list) else key
