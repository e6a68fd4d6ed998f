"""The signal-function registry: one entry per function, the only place one is defined.

An entry declares what the planner needs to know without running anything: the kernel
(a plain numpy/scipy function over segment arrays, no Spark), the type rule (argument types
-> result type), and its semantics -- stateful (carries filter state across segments and
batches), causal, look-back in samples, output width -- which streaming, fusion and parallel
chunking depend on (cf. datafusion-python's volatility and window-function flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class SignalFunction:
    """One signal function.

    Parameters
    ----------
    name : str
        SQL name, lower case.
    kernel : callable
        numpy/scipy implementation over one segment's samples (no Spark import).
    result_type : callable
        Maps the argument type strings to the Spark SQL result type, or raises
        ``WaveSQLError("TYPE_ERROR", ...)``.
    stateful : bool
        Carries state (filter memory) from one segment to the next.
    causal : bool
        Output at sample n depends only on samples <= n.
    lookback : int
        Samples of history each output needs (0 for per-segment functions).
    doc : str
        One-paragraph description with a SQL example.
    """

    name: str
    kernel: Callable
    result_type: Callable[..., str]
    stateful: bool = False
    causal: bool = True
    lookback: int = 0
    doc: str = ""


_REGISTRY: dict[str, SignalFunction] = {}


def register(fn: SignalFunction) -> SignalFunction:
    """Add ``fn`` to the registry (names are unique, case-insensitive)."""
    key = fn.name.lower()
    if key in _REGISTRY:
        raise ValueError(f"signal function {fn.name!r} is defined twice")
    _REGISTRY[key] = fn
    return fn


def lookup(name: str) -> SignalFunction | None:
    """The registry entry for ``name``, or None."""
    return _REGISTRY.get(name.lower())


def names() -> list[str]:
    """All registered signal-function names, sorted."""
    return sorted(_REGISTRY)
