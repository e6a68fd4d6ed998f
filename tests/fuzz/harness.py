"""The front end's error contract, as checks the fuzz tests apply to every input.

For any text, ``parse_statements`` (and ``Session.bind``) must either succeed or raise a
``WaveSQLError`` that

* has a registered code,
* carries a span inside the text (only the codes in :data:`CODES_WITHOUT_SPAN` may lack one,
  because they are about the whole text, not a place in it),
* renders (``str(err)``, ``to_dict()``, ``with_query``) without raising,

and it must return within :data:`TIME_LIMIT` seconds. Any other exception -- IndexError,
AttributeError, RecursionError, sqlglot's ParseError/TokenError leaking through, a Py4J
error -- is a bug, reported as an :class:`FrontEndBug` naming the input.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

from wavesql.dialect import parse_one, parse_statements, to_sql
from wavesql.errors import ERROR_CODES, WaveSQLError

#: Seconds one input may take before it counts as a hang. Generous: the machine is loaded
#: and the slowest legitimate input (a whole .wsql file with a 5000-character identifier)
#: parses in well under 0.1 s.
TIME_LIMIT = 10.0

#: Codes that describe the whole text rather than a place in it, so may come without a span.
#: EMPTY_QUERY: ``Session.sql("-- nothing")`` -- there is no statement to point at.
CODES_WITHOUT_SPAN = frozenset({"EMPTY_QUERY"})


class FrontEndBug(AssertionError):
    """The front end broke its contract on an input."""


# ------------------------------------------------------------------------- known bugs
def _frames(exc: BaseException) -> set[str]:
    return {f"{frame.filename.rsplit('/', 1)[-1]}:{frame.name}"
            for frame in traceback.extract_tb(exc.__traceback__)}


def _in(exc: BaseException, *where: str) -> bool:
    frames = _frames(exc)
    return any(w in frames for w in where)


@dataclass(frozen=True)
class KnownBug:
    """A bug the fuzzer found that is not fixed yet.

    The property tests tolerate an input that fails *only* this way (and count it as a
    hypothesis ``event``), so that they keep guarding everything else; the strict-xfail test
    named ``test`` in ``tests/test_fuzz.py`` reproduces the bug, and turns into a failure
    (XPASS) once it is fixed -- then delete the entry here.
    """

    name: str
    test: str
    #: matches an exception other than WaveSQLError that leaked for input ``text``
    leak: Callable[[BaseException, str], bool] | None = None
    #: matches a WaveSQLError that breaks the contract (no span, span outside the text...)
    error: Callable[[WaveSQLError, str], bool] | None = None


# Every bug the fuzzers found so far is fixed (tests/test_fuzz.py keeps each one as a
# regression test); a new one is listed here, with its pinning test, until it is fixed.
KNOWN_BUGS: tuple[KnownBug, ...] = ()


def known_leak(exc: BaseException, text: str) -> KnownBug | None:
    return next((b for b in KNOWN_BUGS if b.leak is not None and b.leak(exc, text)), None)


def known_error(err: WaveSQLError, text: str) -> KnownBug | None:
    return next((b for b in KNOWN_BUGS if b.error is not None and b.error(err, text)), None)


class Hang(FrontEndBug):
    """An input took longer than the time limit."""


@contextlib.contextmanager
def time_limit(seconds: float = TIME_LIMIT, what: str = ""):
    """Raise :class:`Hang` in the block if it runs longer than ``seconds``.

    In the main thread a SIGALRM timer interrupts Python code where it is (so the traceback
    shows where it hung). As a backstop for a hang inside C code that never returns to the
    interpreter (a catastrophic regex), faulthandler dumps every thread's stack and exits
    the process after ``3 * seconds``: a loud failure instead of a CI job that never ends.
    """
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")
    if not main:
        yield
        return

    def on_alarm(signum, frame):
        raise Hang(f"no answer within {seconds:g} s: {what[:300]!r}")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(3 * seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


def check_error(err: WaveSQLError, text: str, where: str = "parse_statements") -> str:
    """Assert ``err`` honours the error contract for input ``text``.

    Returns ``"error"``, or ``"known bug: <name>"`` when it breaks the contract only in a
    way listed in :data:`KNOWN_BUGS`.
    """
    known = known_error(err, text)
    if known is not None:
        return f"known bug: {known.name}"

    def fail(why: str) -> None:
        raise FrontEndBug(f"{where}({text[:400]!r}): {why}\n{err.code}: {err.message}") from err

    if err.code not in ERROR_CODES:
        fail(f"unregistered code {err.code!r}")
    if err.span is None:
        if err.code not in CODES_WITHOUT_SPAN:
            fail("WaveSQLError without a position")
    elif not 0 <= err.span.start <= err.span.end <= len(text):
        fail(f"span {err.span} outside the text (length {len(text)})")
    if err.query is not None and err.query != text:
        fail("the error quotes a different query text")
    anchored = err if err.query is not None else err.with_query(text)
    try:
        rendered = str(anchored)
        anchored.to_dict()
    except Exception as exc:  # noqa: BLE001 - rendering must never fail
        raise FrontEndBug(f"{where}({text[:400]!r}): rendering the error raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if err.span is not None and (anchored.line is None or anchored.column is None
                                 or " --> line " not in rendered):
        fail("the rendered error shows no line and column")
    if not err.message or "<Token" in err.message or "<class '" in err.message:
        fail("the message is empty or leaks sqlglot internals")
    if "__wavesql_" in f"{err.message} {err.hint}" and "__wavesql_" not in text:
        fail("the message or hint names a WaveSQL-internal relation (__wavesql_...)")
    return "error"


def _leak(exc: BaseException, text: str, where: str) -> FrontEndBug:
    return FrontEndBug(f"{where}({text[:400]!r}) raised {type(exc).__name__}, not a "
                       f"WaveSQLError: {str(exc)[:300]}")


@dataclass
class Outcome:
    """What the front end did with one input: ``status`` is ``"ok"``, ``"error"`` (a
    contract-abiding WaveSQLError, in ``error``) or ``"known bug: <name>"``."""

    status: str
    value: object = None
    error: WaveSQLError | None = None


def _guarded(call, text: str, where: str, limit: float) -> Outcome:
    with time_limit(limit, text):
        try:
            return Outcome("ok", call())
        except WaveSQLError as err:
            return Outcome(check_error(err, text, where), error=err)
        except Hang:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else is the bug being hunted
            known = known_leak(exc, text)
            if known is not None:
                return Outcome(f"known bug: {known.name}")
            raise _leak(exc, text, where) from exc


def check_parse(text: str, *, lenient: bool = False, limit: float = TIME_LIMIT) -> Outcome:
    """``parse_statements(text)`` under the contract; ``value`` holds the statements."""
    where = f"parse_statements[lenient={lenient}]"
    outcome = _guarded(lambda: parse_statements(text, lenient=lenient), text, where, limit)
    for stmt in outcome.value or ():
        if not 0 <= stmt.start < stmt.end <= len(text) or text[stmt.start:stmt.end] != stmt.text:
            raise FrontEndBug(f"{where}({text[:400]!r}): statement offsets "
                              f"({stmt.start}, {stmt.end}) do not give its text {stmt.text!r}")
        if stmt.node is None:
            raise FrontEndBug(f"{where}({text[:400]!r}): a statement without a node")
        if stmt.error is not None:
            if not lenient:
                raise FrontEndBug(f"{where}({text[:400]!r}): error set in strict mode")
            check_error(stmt.error, text, where)
    return outcome


def check_parse_one(text: str, limit: float = TIME_LIMIT) -> Outcome:
    """``parse_one(text)`` under the contract (exactly one statement, or a positioned error)."""
    return _guarded(lambda: parse_one(text), text, "parse_one", limit)


def check_generate(statements, text: str, reparse: bool = True) -> str:
    """Every accepted statement generates back to text (``to_sql``) without raising and,
    with ``reparse``, that text parses again. Returns ``"ok"`` or ``"known bug: ..."``."""
    status = "ok"
    for stmt in statements:
        if stmt.error is not None:
            continue
        outcome = _guarded(lambda: to_sql(stmt.node), stmt.text, "to_sql(parse(...))",
                           TIME_LIMIT)
        if outcome.status != "ok":
            status = outcome.status
            continue
        if not reparse:
            continue
        generated = outcome.value
        again = _guarded(lambda: parse_statements(generated), generated,
                         "parse_statements(to_sql(...))", TIME_LIMIT)
        if again.status == "error":
            raise FrontEndBug(
                f"to_sql of an accepted statement does not parse again:\n"
                f"  input:     {stmt.text[:300]!r}\n  generated: {generated[:300]!r}\n"
                f"  error:     {again.error.message}")
        if again.status != "ok":
            status = again.status
    return status


def check_bind(session, text: str, base_dir: str, limit: float = 120.0) -> Outcome:
    """``session.bind(text)`` (parse + bind + rewrite, no job) under the contract."""
    return _guarded(lambda: session.bind(text, base_dir=base_dir), text, "Session.bind", limit)
