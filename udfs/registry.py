"""The signal-function registry: one entry per function, the only place one is defined.

An entry declares what the planner needs to know without running anything: the kernel
(a plain numpy/scipy function over segment arrays, no Spark), the parameters (logical type,
default, literal-only), the type rule (argument types -> result type), and its semantics --
stateful (carries filter state across segments and batches), causal, look-back in samples,
output kind -- which streaming, fusion and parallel chunking depend on (cf.
datafusion-python's volatility and window-function flags).

Kernel calling conventions (the executor goes through :func:`call`, which applies them):

- stateless: ``kernel(value, *args) -> result``
- stateful: ``kernel(value, *args, state) -> (result, new_state)``; the first state comes
  from ``entry.init_state(*args)`` (all arguments after the first, which are literals), and
  ``entry.flush(state)`` returns output still pending at end of stream (or None).

States are plain picklable values (dicts of ints, floats, strings, tuples and numpy arrays)
because Spark carries them across micro-batches. Kernels never mutate a state they are
given, so re-running a batch from a saved state reproduces the same output.

Non-finite samples (NaN, +Inf, -Inf)
------------------------------------
Samples may be NaN or infinite (float WAV files hold them; so does arithmetic upstream).
One policy holds for every function, checked for each registered one by
``tests/test_kernels_nonfinite.py`` (segments with a NaN, a +Inf, a -Inf, all NaN, empty):

- **The result follows IEEE 754 / numpy propagation**, as each entry's doc and its family
  module say. Nothing is replaced, skipped or clipped silently, except where a function
  documents it (``trimpeak`` ignores NaN when looking for the peak, ``zero_crossings`` skips
  NaN like zeros, ``threshold_ranges`` counts NaN as not above, ``cfar`` ignores NaN
  scores). In short: shape functions move samples untouched; statistics are NaN when a
  sample is NaN (Inf follows IEEE: ``seg_max`` of [1, Inf] is Inf, ``seg_std`` NaN);
  pointwise functions and windows act per sample; spectra (``fft``, ``psd``,
  ``spectrogram``, ``band_energy``...) are NaN in every bin one non-finite sample reaches
  (all of them for ``fft``); wavelet coefficients are NaN/Inf where their support touches
  one; filters and ``resample`` carry it in their delay line -- an FIR for ``len(taps)``
  samples, an IIR (Butterworth, notch, ``iir``) **until a gap in sample numbers resets its
  state**, across segments and micro-batches.
- **No floating-point warnings**: kernels run under ``numpy.errstate(all='ignore')``
  (:func:`call`, the vectorised forms, and the program evaluator), so ``Inf - Inf`` gives
  NaN quietly instead of a warning per window in the executors' logs.
- **Never an exception from inside numpy, scipy or PyWavelets**: every registered kernel
  and vectorised form is wrapped so that, should one fail on an input holding non-finite
  samples, the failure is ``SignalError("NON_FINITE_SAMPLES")`` naming the function (the
  query's error, with its code, like any other signal-function error); the other errors are
  the documented codes (``EMPTY_SEGMENT``, ``SEGMENT_TOO_SHORT``, ...).

In a WHERE, a NaN result compares as Spark compares it -- equal to NaN and greater than
every number (``udfs/program.py``) -- so ``WHERE seg_rms(ch1) > 0.1`` keeps a window whose
samples hold a NaN; ``WHERE seg_rms(ch1) < 1e300`` keeps exactly the non-empty windows whose
samples are all finite.

Values kernels see: :class:`~wavesql.udfs.sigseg.SigSeg`,
:class:`~wavesql.udfs.kernels.values.Spectrum`, :class:`~wavesql.udfs.kernels.values.Ranges`,
Python ``float``/``int``/``bool``/``str`` and 1-D numpy arrays. The families register
themselves when :mod:`wavesql.udfs.kernels` is imported; every public function here loads
them on first use.

Examples
--------
>>> from wavesql.udfs import registry
>>> registry.lookup("SEG_AVG").result_type(["sigseg"])
'double'
>>> registry.lookup("lowpass").signature()
'lowpass(seg sigseg, cutoff_hz double literal, order int literal = 4) -> sigseg'
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .sigseg import SegBlock, SigSeg, SignalError

#: The logical types a type rule speaks (the lead engineer maps them onto Spark types).
LOGICAL_TYPES = ("sigseg", "spectrum", "double", "bigint", "int", "boolean", "string",
                 "array<double>", "ranges")

#: What one call returns, for the planner (one value per row in every case).
OUTPUT_KINDS = ("scalar", "segment", "spectrum", "ranges", "array")

# Error codes kernels raise (EMPTY_SEGMENT, INVALID_ARGUMENT, ...) are registered, with their
# meaning, in wavesql/errors.py like every other code; the kernel tests check that.


class _Required:
    """Marker for a parameter without a default."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()

# Argument types a parameter of a given logical type accepts: Spark types a literal or a
# column may arrive as, widened implicitly the way Spark would cast them.
_INTEGRAL = frozenset({"int", "bigint", "smallint", "tinyint"})
_ACCEPTS: dict[str, frozenset[str]] = {
    "double": _INTEGRAL | {"double", "float"},
    "bigint": _INTEGRAL,
    "int": _INTEGRAL,
    "array<double>": frozenset({"array<double>", "array<float>", "array<int>",
                                "array<bigint>"}),
}


def accepts(param_type: str, arg_type: str) -> bool:
    """Whether an argument of ``arg_type`` may be passed where ``param_type`` is declared.

    Examples
    --------
    >>> accepts("double", "int"), accepts("int", "double"), accepts("double", "decimal(3,2)")
    (True, False, True)
    """
    arg = arg_type.strip().lower().replace(" ", "")
    if arg == param_type:
        return True
    if param_type == "double" and arg.startswith("decimal"):
        return True  # Spark types the literal 0.05 as decimal(2,2)
    return arg in _ACCEPTS.get(param_type, ())


@dataclass(frozen=True)
class Param:
    """One parameter of a signal function.

    Parameters
    ----------
    name : str
        Name used in documentation and error messages.
    type : str
        Logical type (one of :data:`LOGICAL_TYPES`).
    default : object
        Default for an optional trailing parameter; :data:`REQUIRED` if it must be given.
    literal : bool
        The argument must be a constant in the query (filter designs, policies, thresholds
        of stateful functions: their state is built from it once per stream).
    """

    name: str
    type: str
    default: Any = REQUIRED
    literal: bool = False

    @property
    def optional(self) -> bool:
        return self.default is not REQUIRED

    def describe(self) -> str:
        text = f"{self.name} {self.type}" + (" literal" if self.literal else "")
        return text + (f" = {self.default!r}" if self.optional else "")


@dataclass(frozen=True)
class SignalFunction:
    """One signal function.

    Parameters
    ----------
    name : str
        SQL name, lower case (lookups are case-insensitive).
    kernel : callable
        numpy/scipy implementation (no Spark import); calling convention in the module doc.
    params : tuple of Param
        The documented signature; optional parameters trail the required ones.
    returns : str
        Logical result type.
    output : str
        One of :data:`OUTPUT_KINDS`.
    doc : str
        One paragraph and a line ``Example: SELECT ...``.
    stateful : bool
        Carries state from one segment to the next (and across micro-batches).
    causal : bool
        Output at sample n depends only on input samples <= n.
    lookback : int or None
        Samples of history each output needs: 0 for per-segment functions, None when
        unbounded or dependent on the rate and literal arguments (see ``lookback_rule``).
        A stateful function of finite look-back runs in parallel partitions, each warmed
        up on the look-back before it; an unbounded one makes the scan one ordered pass.
    init_state : callable, optional
        Stateful only: ``init_state(*args_after_the_first) -> state``; validates literals.
    flush : callable, optional
        Stateful only: ``flush(state) -> result or None``, output pending at end of stream.
    lookback_rule : callable, optional
        ``lookback_rule(rate, *args_after_the_first) -> int | str`` where the look-back
        depends on the signal's rate (Hz) and the literal arguments: samples, or the reason
        no finite number of samples will do (IIR filters: :mod:`.kernels.filters`).
    unbounded : str
        With ``lookback=None`` and no rule: why the function needs its whole past (shown by
        EXPLAIN as ``sequential: <reason>``).
    scan : callable, optional
        Stateful scalar functions only: the form over ``k`` rows in order,
        ``scan(values, *literal_args, state) -> ((k,) array, new_state)``, one call per block
        of rows instead of one per row. Must agree with ``kernel`` row by row (tested).
    batch : callable, optional
        Stateless only: the vectorised form over ``k`` equal-width windows,
        ``batch(block: SegBlock, *literal_args)`` -> ``(k,)`` array (scalar outputs) or a
        ``SegBlock`` (segment outputs). Must agree with ``kernel`` row by row (tested).
    """

    name: str
    kernel: Callable
    params: tuple[Param, ...]
    returns: str
    output: str
    doc: str
    stateful: bool = False
    causal: bool = True
    lookback: int | None = 0
    init_state: Callable | None = None
    flush: Callable | None = None
    lookback_rule: Callable | None = None
    unbounded: str = ""
    scan: Callable | None = None
    batch: Callable | None = None

    def __post_init__(self):
        # Registry entries are code, so a malformed one is a programming error: fail at import.
        if self.name != self.name.lower():
            raise ValueError(f"signal function names are lower case: {self.name!r}")
        types = [p.type for p in self.params] + [self.returns]
        bad = [t for t in types if t not in LOGICAL_TYPES]
        if bad:
            raise ValueError(f"{self.name}: unknown logical types {bad}")
        if self.output not in OUTPUT_KINDS:
            raise ValueError(f"{self.name}: unknown output kind {self.output!r}")
        seen_optional = False
        for p in self.params:
            if seen_optional and not p.optional:
                raise ValueError(f"{self.name}: required parameter {p.name} after an optional one")
            seen_optional = seen_optional or p.optional
        if self.stateful != (self.init_state is not None):
            raise ValueError(f"{self.name}: stateful functions (and only they) need init_state")
        if self.batch is not None and self.stateful:
            raise ValueError(f"{self.name}: stateful functions have no batch form")
        if self.scan is not None and not (self.stateful and self.output == "scalar"):
            raise ValueError(f"{self.name}: only stateful scalar functions have a scan form")
        if self.flush is not None and not self.stateful:
            raise ValueError(f"{self.name}: only stateful functions can flush")
        if self.stateful and self.lookback is None and self.lookback_rule is None \
                and not self.unbounded:
            raise ValueError(f"{self.name}: say why its look-back is unbounded (unbounded=...)")
        if "Example:" not in self.doc:
            raise ValueError(f"{self.name}: the doc needs an 'Example:' line")

    # -- signature ------------------------------------------------------------------------
    @property
    def over_rows(self) -> bool:
        """A stateful function over rows -- its first parameter a value, one state step
        per window -- with a form over a run of rows (``scan``): ``cfar``. Scans score the
        windows in parallel and run it in one ordered pass over the scores, or
        speculatively in the partitions, verified in order (:mod:`wavesql.udfs.row_state`,
        :mod:`wavesql.udfs.row_chain`)."""
        return self.stateful and self.scan is not None and \
            self.params[0].type in ("double", "bigint", "int", "boolean")

    @property
    def arg_types(self) -> tuple[str, ...]:
        """Logical types of all parameters, required then optional."""
        return tuple(p.type for p in self.params)

    @property
    def min_args(self) -> int:
        return sum(1 for p in self.params if not p.optional)

    @property
    def max_args(self) -> int:
        return len(self.params)

    @property
    def literal_positions(self) -> tuple[int, ...]:
        """0-based positions of the parameters that must be literals."""
        return tuple(i for i, p in enumerate(self.params) if p.literal)

    def signature(self) -> str:
        """Human-readable signature, e.g. ``width(seg sigseg) -> bigint``."""
        inner = ", ".join(p.describe() for p in self.params)
        return f"{self.name}({inner}) -> {self.returns}"

    # -- type rule ------------------------------------------------------------------------
    def result_type(self, arg_types: Sequence[str], literals: Sequence[bool] | None = None
                    ) -> str:
        """The logical result type for these argument types.

        Parameters
        ----------
        arg_types : sequence of str
            Logical (or Spark) type name of each argument as written in the call.
        literals : sequence of bool, optional
            Whether each argument is a constant; when given, literal-only parameters are
            checked too.

        Raises
        ------
        SignalError
            ``TYPE_ERROR`` for a wrong count or type, ``LITERAL_REQUIRED`` for a column
            where a constant is required.
        """
        n = len(arg_types)
        if not self.min_args <= n <= self.max_args:
            want = (str(self.min_args) if self.min_args == self.max_args
                    else f"{self.min_args} to {self.max_args}")
            raise SignalError("TYPE_ERROR", f"{self.name} takes {want} arguments, got {n}",
                              hint=self.signature())
        for i, (param, given) in enumerate(zip(self.params, arg_types)):
            if not accepts(param.type, given):
                raise SignalError(
                    "TYPE_ERROR",
                    f"argument {i + 1} ({param.name}) of {self.name} must be {param.type}, "
                    f"got {given}", hint=self.signature())
        if literals is not None:
            for i, (param, is_lit) in enumerate(zip(self.params, literals)):
                if param.literal and not is_lit:
                    raise SignalError(
                        "LITERAL_REQUIRED",
                        f"argument {i + 1} ({param.name}) of {self.name} must be a constant",
                        hint=self.signature())
        return self.returns

    def bind_args(self, args: Sequence[Any]) -> tuple:
        """``args`` with defaults filled in for omitted optional parameters."""
        if not self.min_args <= len(args) <= self.max_args:
            raise SignalError("TYPE_ERROR",
                              f"{self.name} takes {self.min_args} to {self.max_args} "
                              f"arguments, got {len(args)}", hint=self.signature())
        return tuple(args) + tuple(p.default for p in self.params[len(args):])

    def lookback_of(self, rate: float, *args) -> int | str:
        """Look-back in samples at ``rate`` Hz for these arguments (``args`` after the
        first), or the reason it is unbounded."""
        if self.lookback_rule is not None:
            return self.lookback_rule(rate, *self.bind_args((None,) + tuple(args))[1:])
        return self.unbounded if self.lookback is None else self.lookback


_REGISTRY: dict[str, SignalFunction] = {}
_LOADED = False


def register(fn: SignalFunction) -> SignalFunction:
    """Add ``fn`` to the registry (names are unique, case-insensitive).

    The entry stored has its kernel and vectorised form wrapped by :func:`guarded` (the
    non-finite policy in the module docstring); the entry is returned as stored.
    """
    key = fn.name.lower()
    if key in _REGISTRY:
        raise ValueError(f"signal function {fn.name!r} is defined twice")
    fn = dataclasses.replace(
        fn, kernel=guarded(fn.name, fn.kernel),
        batch=guarded(fn.name, fn.batch, quiet=True) if fn.batch is not None else None)
    _REGISTRY[key] = fn
    return fn


def has_nonfinite(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` (segments, blocks, spectra, arrays, numbers) holds a NaN or
    an infinity."""
    for v in values:
        if isinstance(v, (SigSeg, SegBlock)):
            data = v.samples if isinstance(v, SigSeg) else v.data
        elif hasattr(v, "bins") and hasattr(v, "n"):  # a Spectrum
            data = v.bins
        elif isinstance(v, (float, np.floating, np.ndarray)):
            data = v
        else:
            continue
        try:
            if not np.all(np.isfinite(data)):
                return True
        except TypeError:
            continue
    return False


def guarded(name: str, kernel: Callable, quiet: bool = False) -> Callable:
    """``kernel`` that never fails from inside numpy/scipy/PyWavelets on non-finite input.

    A :class:`SignalError` passes through; any other exception raised while an argument
    holds NaN or Inf becomes ``SignalError("NON_FINITE_SAMPLES")`` naming ``name``; on
    finite input it is re-raised as it is (a bug to fix, not to hide). ``quiet`` also
    turns numpy's floating-point warnings off (the vectorised forms, once per block; the
    per-row kernels get it from :func:`call` and the program evaluator, once per block).
    """
    if getattr(kernel, "__wavesql_guarded__", False):
        return kernel

    @functools.wraps(kernel)
    def run(*args):
        try:
            if quiet:
                with np.errstate(all="ignore"):
                    return kernel(*args)
            return kernel(*args)
        except SignalError:
            raise
        except Exception as err:  # noqa: BLE001 - translated below, or re-raised unchanged
            if not has_nonfinite(args):
                raise
            raise SignalError(
                "NON_FINITE_SAMPLES",
                f"{name}: failed on NaN or infinite samples ({type(err).__name__}: {err})",
                hint="drop the windows holding NaN or Inf before it, e.g. WHERE "
                     "seg_rms(ch1) < 1e300 (NaN compares above every number)") from None

    run.__wavesql_guarded__ = True
    return run


def _ensure_loaded() -> None:
    """Import the kernel families (they register at import) once."""
    global _LOADED
    if not _LOADED:
        _LOADED = True  # set first: the family modules import this module
        # Relative to this package, so it works as `wavesql.udfs` (installed name).
        importlib.import_module(__name__.rsplit(".", 1)[0] + ".kernels")


def lookup(name: str) -> SignalFunction | None:
    """The registry entry for ``name`` (any case), or None."""
    _ensure_loaded()
    return _REGISTRY.get(name.lower())


def require(name: str) -> SignalFunction:
    """The registry entry for ``name``; ``SignalError("UNKNOWN_FUNCTION")`` if there is none."""
    fn = lookup(name)
    if fn is None:
        raise SignalError("UNKNOWN_FUNCTION", f"unknown signal function `{name}`")
    return fn


def names() -> list[str]:
    """All registered signal-function names, sorted."""
    _ensure_loaded()
    return sorted(_REGISTRY)


def all() -> list[SignalFunction]:  # noqa: A001 - the brief's name; shadows only here
    """All entries, sorted by name."""
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def call(name: str, *args, state: Any = None):
    """Run signal function ``name`` on one row's values.

    Parameters
    ----------
    name : str
        Function name (any case).
    *args
        The arguments; omitted optional trailing ones take their defaults.
    state : object, optional
        Stateful functions only: the state returned by the previous call on the same
        stream, or None to start a stream (``init_state`` builds the first one).

    Returns
    -------
    object
        Stateless: the result. Stateful: ``(result, new_state)``.

    Examples
    --------
    >>> import numpy as np
    >>> from wavesql.udfs.sigseg import SigSeg
    >>> call("seg_max", SigSeg(0, 8.0, np.array([1.0, 3.0, 2.0])))
    3.0
    >>> y, st = call("fir", SigSeg(0, 8.0, np.ones(3)), np.array([0.5, 0.5]))
    >>> y.samples.tolist()
    [0.5, 1.0, 1.0]
    >>> y, st = call("fir", SigSeg(3, 8.0, np.zeros(2)), np.array([0.5, 0.5]), state=st)
    >>> y.samples.tolist()
    [0.5, 0.0]
    """
    fn = require(name)
    full = fn.bind_args(args)
    with np.errstate(all="ignore"):  # IEEE propagation, quietly (module docstring)
        if fn.stateful:
            if state is None:
                state = fn.init_state(*full[1:])
            return fn.kernel(*full, state)
        if state is not None:
            raise SignalError("TYPE_ERROR", f"{fn.name} is stateless and takes no state")
        return fn.kernel(*full)


def flush(name: str, state: Any):
    """Output a stateful function still holds at end of stream (None if nothing)."""
    fn = require(name)
    if not fn.stateful:
        raise SignalError("TYPE_ERROR", f"{fn.name} is stateless and has nothing to flush")
    if fn.flush is None or state is None:
        return None
    return fn.flush(state)


# ---------------------------------------------------------------------------------------
# Descriptions: DESCRIBE FUNCTION and the generated reference (docs/functions.md)
# ---------------------------------------------------------------------------------------
def _doc_and_example(fn: SignalFunction) -> tuple[str, str]:
    text, _, example = fn.doc.partition("Example:")
    return " ".join(text.split()), example.strip()


def semantics(fn: SignalFunction) -> str:
    """One line: state, causality, look-back, output kind (what planning depends on)."""
    if not fn.stateful:
        state = "stateless (each segment on its own)"
    else:
        state = "stateful (state carried from segment to segment and across micro-batches"
        state += "; output pending at end of stream is flushed" if fn.flush else ""
        # a SYNC result's rows (planner/segment_stage.py: refuse_row_order says why)
        per_key = "" if fn.flush else ", or along each key's ranges in start order with " \
            "OVER (PARTITION BY k)"
        state += (f"; over a SYNC result: from rest at each range's first sample{per_key})"
                  if fn.params and fn.params[0].type == "sigseg" else
                  "; over a SYNC result, whose rows have no order, only along each key's "
                  "ranges in start order with OVER (PARTITION BY k): UNDEFINED_ORDER "
                  "without)")
    if fn.lookback_rule is not None:
        history = "look-back: depends on the signal's rate and the arguments (EXPLAIN shows it)"
    elif fn.lookback is None and fn.over_rows:
        history = (f"look-back: unbounded ({fn.unbounded}), so scans score the windows in "
                   "parallel and run it over the scores in order -- cfar speculatively in "
                   "each partition from a look-back of scores, verified in order (EXPLAIN "
                   "says which)")
    elif fn.lookback is None:
        history = f"look-back: unbounded, so scans run in one ordered pass ({fn.unbounded})"
    else:
        history = f"look-back: {fn.lookback} samples"
    return "; ".join([state, "causal" if fn.causal else "not causal", history,
                      f"output: {fn.output}"])


def describe_function(name: str, extended: bool = False) -> list[str]:
    """The rows of ``DESCRIBE FUNCTION [EXTENDED] name`` for a signal function, in the shape
    of Spark's (``Function:``, ``Class:``, ``Usage:``, then ``Extended Usage:``)."""
    fn = require(name)
    doc, example = _doc_and_example(fn)
    family = fn.kernel.__module__.rsplit(".", 1)[-1]
    lines = [f"Function: {fn.name}",
             f"Class: WaveSQL signal function (udfs/kernels/{family}.py)",
             f"Usage: {fn.signature()} - {doc}"]
    if extended:
        lines += ["Extended Usage:", f"    Semantics: {semantics(fn)}",
                  "    Examples:", f"      > {example}"]
    return lines


def reference_markdown() -> str:
    """docs/functions.md: every signal function from this registry, by family."""
    by_family: dict[str, list[SignalFunction]] = {}
    for fn in all():
        by_family.setdefault(fn.kernel.__module__.rsplit(".", 1)[-1], []).append(fn)
    out = ["# Signal functions", "",
           "Generated from the registry (`udfs/registry.py`, kernels in `udfs/kernels/`) by",
           "`python -m wavesql.udfs.reference`; `tests/test_functions_reference.py` keeps it",
           "equal to the registry. In SQL: `SHOW FUNCTIONS LIKE 'seg*'`, `DESCRIBE FUNCTION",
           "EXTENDED lowpass`. Types: `sigseg` is a segment (`struct<start, rate, samples>`);",
           "a `literal` parameter must be a constant.", ""]
    for family in sorted(by_family):
        out += [f"## {family} (`udfs/kernels/{family}.py`)", ""]
        for fn in by_family[family]:
            doc, example = _doc_and_example(fn)
            out += [f"### `{fn.name}`", "", f"`{fn.signature()}`", "", doc, "",
                    f"*{semantics(fn)}*", "", "```sql", example, "```", ""]
    return "\n".join(out)
