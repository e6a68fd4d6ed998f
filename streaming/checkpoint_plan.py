"""The plan marker of a continuous query's checkpoint: what state the checkpoint holds.

Every runner calls :func:`check` once when it starts, before Spark runs anything. The
marker is ``<checkpoint>/wavesql.json``, one JSON object:

``engine``   the runner that wrote the checkpoint (``re-evaluating``, ``signal``,
             ``kafka-signal``, ``query-signal``, ``real-time``, or a state-store engine
             such as ``stateful-window``);
``plan``     the fingerprint: a hash of what the checkpointed state and outputs depend on;
``explain``  the plan in words, for the error message;
``facts``    (every runner but the state-store ones, which name their plan in ``explain``)
             the fingerprinted facts one by one, ``[name, value]``, so that a refusal
             names what changed ("WindowScan trades.window changed from [RANGE 10 SECONDS]
             to [RANGE 20 SECONDS]");
``format``   the marker's format (:data:`FORMAT`; a marker without it is format 1);
``scheme``   (the markers with ``facts``) how the fingerprint was computed (:data:`SCHEME`;
             a marker without it is scheme 1);

and a runner's own keys (the state-store runner's ``buckets`` and ``resume``, whose
meaning is its own: ``streaming/stateful/query.py``). Restarting on a checkpoint whose
marker names another runner or another fingerprint is ``CHECKPOINT_MISMATCH``, naming
both runners or what changed, with how to start fresh.

What the fingerprint of the other runners covers (:func:`facts`,
:mod:`.checkpoint_facts`): the bound query -- every relation of its IR, each SQL part
normalised by sqlglot so that whitespace, comments and keyword case do not count -- its
inputs (each stream's or signal's source, location, format, reader options, columns,
event time and punctuation column; a signal's rate, segment and epoch; for a signal
defined by a query, its query and the definition of the stream it reads, through views
too, under the same rules), its CQL windows, signal programs and their parameters, SYNC
ranges, the output schema, ``EMIT`` and the runner's look-back of each input.

Compatible changes -- not fingerprinted, a restart runs on -- because the checkpointed
state (buffered rows, per-input progress, signal-function state, file indexes) means the
same thing after them:

- whitespace, comments, keyword case of the query text;
- the trigger (``availableNow``, ``every 10 seconds``) and ``max_files_per_trigger``:
  they decide how much each micro-batch reads, not what the state is;
- a stream's ``HEARTBEAT``: it advances progress while an input is idle; progress never
  goes back, so the state a later batch starts from is valid either way. One exception:
  a HEARTBEAT under a trigger ``every ...`` adds a ticker (Spark's rate source) to the
  streaming query, and Spark's offset log cannot take a source on or off -- so whether
  tickers run is a fact of the plan (the state-store runner's ``tickers`` key, checked
  where its marker has it), and a HEARTBEAT or trigger change that adds or removes one
  is refused by name;
- a stream's ``WATERMARK``: likewise a rule for advancing progress -- rows behind the
  progress already promised stay late, whatever the new delay;
- where the results, late rows and quarantine go (output / ``LATE INTO``): the state does
  not depend on them (the output's batch numbering continues);
- re-creating a stream or signal with the same definition (its catalog version), or
  with other credentials (options named like ``password``, ``secret``, ``jaas``,
  ``token``, ``credential``, ``*.key``: never written to the marker) -- also where the
  stream is named in another node's field (a windowed join's ``joint``): relations and
  catalog objects there are named, never written field by field;
- operational reader options (:data:`.checkpoint_facts._OPERATIONAL`: Kafka's
  ``maxOffsetsPerTrigger``, ``startingOffsets``, ``failOnDataLoss``, ``minPartitions``,
  ...; the file source's ``maxFilesPerTrigger``, ``latestFirst``, ``maxFileAge``,
  ``cleanSource``): how much a
  batch reads, or where a NEW query starts (a restart reads its position from Spark's
  offset log).

A checkpoint that holds nothing -- no batch in Spark's commit log, no file of WaveSQL's
own (:func:`holds_nothing`): the first batch failed -- takes any query: a refused marker
is rewritten, and the uncommitted offset log, which names the old plan's sources,
deleted.

A query of several parts (streaming/derived.py: signal or SYNC parts, each with its own
checkpoint under ``<checkpoint>/derived/``, and the rest) checks every part's marker and
the rest's before any part runs (:func:`probing`): a part must not advance under a query
another part then refuses.

Upgrades: a WaveSQL release may fingerprint the same query otherwise (a new IR field, a
binder rewrite, a sqlglot upgrade). A marker of another :data:`SCHEME` is re-marked --
adopted as a marker-less checkpoint is, not checked -- so an upgrade never refuses a
running query for that; a release that changes fingerprints raises :data:`SCHEME` (3:
a signal defined by a query adds its stream's definition). And
a field at its default is listed in ``facts`` but not hashed, so that a defaulted field
a release adds leaves older fingerprints as they were. (A changed *runner* is still
refused: the state is another runner's.)

Checkpoints written before markers: the state-store runner always wrote one, so a
checkpoint with Spark's ``offsets`` or WaveSQL's ``state`` but no marker came from another
runner and it refuses it (``legacy="refuse"``); every other runner adopts such a
checkpoint -- writes the marker of the query now starting -- without checking it (nothing
recorded what it was written by). From then on it is checked.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json

from wavesql import storage
from wavesql.errors import WaveSQLError

from .checkpoint_facts import chain, facts, label, listed, normalized_sql, readable, short

__all__ = ["FORMAT", "MARKER", "SCHEME", "Accepted", "Mark", "check", "check_query", "facts",
           "mark_of", "normalized_sql", "probing"]

#: The marker file's name inside the checkpoint.
MARKER = "wavesql.json"
#: The marker's format; a marker without ``format`` is format 1 (the state-store runner's
#: original keys, unchanged).
FORMAT = 1
#: How :func:`facts` fingerprints a query (the markers with ``facts``; a marker without
#: ``scheme`` is scheme 1). A release that fingerprints otherwise raises it, and a checkpoint
#: of another scheme is re-marked, not refused (module docstring).
SCHEME = 3

_HINT = ("give the changed query a new checkpoint (and output) folder, or delete the old "
         "checkpoint to start from the beginning of the input; or run the query as it was")

@dataclasses.dataclass(frozen=True)
class Mark:
    """What a runner writes to and compares with a checkpoint's marker."""

    engine: str
    plan: str  # the fingerprint
    explain: str
    facts: tuple[tuple[str, str], ...] = ()
    #: a runner's own keys, written after ``explain`` (the state-store runner's)
    extra: tuple[tuple[str, object], ...] = ()
    #: those of ``extra`` compared too, where the checkpoint's marker has them (keys added
    #: after its first markers were written: older ones are not checked for them)
    checked: tuple[str, ...] = ()
    #: the fingerprint scheme (:data:`SCHEME`; None: the state-store runner's marker, whose
    #: ``plan`` is its own and whose keys stay as they were)
    scheme: int | None = None

    def to_json(self) -> str:
        data = {"engine": self.engine, "plan": self.plan, "explain": self.explain}
        data.update(dict(self.extra))
        data["format"] = FORMAT
        if self.scheme is not None:
            data["scheme"] = self.scheme
        if self.facts:
            data["facts"] = [list(f) for f in self.facts]
        return json.dumps(data)


def check(checkpoint: str, mine: Mark, *, legacy: str = "adopt") -> dict | None:
    """Compare ``mine`` with ``checkpoint``'s marker and raise ``CHECKPOINT_MISMATCH`` if the
    checkpoint was written by another runner or plan; write the marker if there is none.
    Returns the checkpoint's marker as it was (None: there was none, or the checkpoint
    held nothing -- :func:`holds_nothing` -- and is now this query's). A marker of
    another fingerprint :data:`SCHEME` (same runner) is re-marked, not compared.

    ``legacy``: what a checkpoint with state but no marker gets -- ``"adopt"`` (the marker
    is written, nothing checked) or ``"refuse"``.

    Under :func:`probing`, nothing is written: what would be is kept for later, and
    :class:`Accepted` is raised (the runner's start ends there)."""
    theirs, writes = _judge(checkpoint, mine, legacy)
    pending = _PROBING.get()
    if pending is not None:
        pending.extend(writes)
        raise Accepted(checkpoint)
    for write in writes:
        write()
    return theirs


class Accepted(Exception):
    """Raised by :func:`check` under :func:`probing`: the checkpoint takes the marker."""


_PROBING: contextvars.ContextVar[list | None] = contextvars.ContextVar("probing",
                                                                     default=None)


@contextlib.contextmanager
def probing():
    """Check checkpoints without starting anything: a runner started in this block stops
    at its :func:`check` -- which raises the refusal, or :class:`Accepted` -- before Spark
    runs anything (every runner checks first). Yields the list of the accepted checks'
    writes (new markers, an empty checkpoint's logs deleted), each a callable, to be run
    once every part of a query is accepted (streaming/derived.py: a derived query's parts
    and rest are all checked before any part runs a batch)."""
    pending: list = []
    token = _PROBING.set(pending)
    try:
        yield pending
    finally:
        _PROBING.reset(token)


def _judge(checkpoint: str, mine: Mark, legacy: str) -> tuple[dict | None, list]:
    """:func:`check`'s answer and the writes it makes (callables), or its refusal."""
    path = storage.join(checkpoint, MARKER)

    def mark():
        storage.write_text(path, mine.to_json())

    def clear():
        for log in _UNCOMMITTED:
            storage.delete(storage.join(checkpoint, log), recursive=True)

    if storage.is_file(path):
        try:
            theirs = json.loads(storage.read_text(path))
        except ValueError:
            theirs = None
        if not isinstance(theirs, dict):
            raise WaveSQLError("CHECKPOINT_CORRUPT", f"`{path}` is not the marker WaveSQL "
                               "wrote (not a JSON object: truncated or edited)",
                               hint="restore the checkpoint folder from a backup, or start "
                                    "the query with a new checkpoint (and output) folder")
        fmt = theirs.get("format", 1)
        if (mine.scheme is not None and theirs.get("engine") == mine.engine
                and isinstance(fmt, int) and fmt <= FORMAT
                and theirs.get("scheme", 1) != mine.scheme):
            # fingerprinted by another WaveSQL release: its plan cannot be compared with
            # this one's, so the checkpoint is re-marked as a marker-less one is adopted
            return theirs, [mark]
        refusal = mismatch(theirs, mine)
        if refusal is None:
            return theirs, []
        if holds_nothing(checkpoint):
            # no batch committed (the first one failed): nothing to misread -- the query
            # now starting owns it, from the beginning as on a new checkpoint
            # (Spark's offset log of that batch names the old plan's sources, the file
            # list fixed for it the old query's view of the input; a derived part's own
            # checkpoint is checked, and cleared, by the part)
            return None, [clear, mark]
        raise WaveSQLError("CHECKPOINT_MISMATCH",
                           f"the checkpoint {checkpoint} {refusal}", hint=_HINT)
    if legacy == "refuse" and any(storage.is_dir(storage.join(checkpoint, d))
                                  for d in ("state", "offsets")):
        raise WaveSQLError(
            "CHECKPOINT_MISMATCH", f"the checkpoint {checkpoint} was written by an earlier "
            f"WaveSQL runner for this query, whose state the {runner_name(mine.engine)} "
            "cannot read",
            hint="start the query with a new checkpoint folder (and output folder)")
    return None, [mark]


#: The checkpoint's logs of batches before they commit: Spark's (``offsets``: offsets,
#: sources, and the commit log) and the file lists fixed for each batch before it runs
#: (``files``, streaming/files.py).
_UNCOMMITTED = ("offsets", "files")


def holds_nothing(checkpoint: str) -> bool:
    """Whether ``checkpoint`` holds no committed batch: nothing in Spark's commit logs
    (``offsets/commits``, a derived part's ``derived/<cte>/offsets/commits`` too) and
    nothing of WaveSQL's own (state, signal state, late rows, ...) -- only markers and the
    logs of batches that never committed (:data:`_UNCOMMITTED`)."""
    for entry in storage.list_files(checkpoint, recursive=True):
        where = entry.location
        where = where[len(checkpoint):] if where.startswith(checkpoint) else where
        parts = where.replace("\\", "/").split("/")
        if parts[-1] == MARKER:
            continue
        if not set(_UNCOMMITTED) & set(parts[:-1]):
            return False  # WaveSQL's own files: state of some batch
        if parts[-2] == "commits" and parts[-1].isdigit():
            return False
    return True


def check_query(query, engine: str, *more: tuple[str, str]) -> dict | None:
    """:func:`check` for a running query of the ``engine`` runner (a
    :class:`~.query.ContinuousQuery`: its bound query, plan and EMIT; ``more``: facts of
    the runner's own, such as the re-evaluating runner's heartbeat ticker)."""
    return check(query.checkpoint, mark_of(engine, query.bound, query.plan,
                                           emit_changes=query.emit_changes, more=more,
                                           catalog=query.session.catalog))


def mismatch(theirs: dict, mine: Mark) -> str | None:
    """Why a checkpoint whose marker is ``theirs`` cannot run ``mine`` (completing "the
    checkpoint ... "), or None: it can."""
    fmt = theirs.get("format", 1)
    if not isinstance(fmt, int) or fmt > FORMAT:
        return (f"has a plan marker of format {fmt!r}; this WaveSQL reads format {FORMAT} "
                "(a newer WaveSQL wrote it)")
    engine = theirs.get("engine")
    if engine != mine.engine:
        return (f"was written by the {runner_name(engine)} ({theirs.get('explain')}); "
                f"this query runs on the {runner_name(mine.engine)} (EXPLAIN STREAM says "
                "why), which cannot read that state")
    if theirs.get("plan") == mine.plan:
        own = dict(mine.extra)
        changed = [f"its {key} changed from {theirs[key]!r} to {own[key]!r}"
                   for key in mine.checked if key in theirs and theirs[key] != own[key]]
        return ("was written by this plan with another Spark query: " + "; ".join(changed)
                if changed else None)
    changes = describe_changes(theirs.get("facts"), mine.facts)
    if changes:
        return (f"was written by another plan of this query on the "
                f"{runner_name(mine.engine)}: "
                + "; ".join(changes))
    return (f"was written by another query plan ({theirs.get('explain', engine)}); this one "
            f"is: {mine.explain}")


def runner_name(engine) -> str:
    """``stateful-window`` -> "state-store runner (stateful-window)", ``signal`` -> "signal
    runner"."""
    if not engine:
        return "unknown runner"
    if str(engine).startswith("stateful"):
        return f"state-store runner ({engine})"
    return f"{engine} runner"


def describe_changes(old, new, most: int = 3) -> list[str]:
    """What differs between two fact lists, in words (at most ``most`` items)."""
    if not isinstance(old, list):
        return []
    before = _by_name(tuple(tuple(f) for f in old if isinstance(f, list) and len(f) == 2))
    after = _by_name(new)
    out = []
    for name in list(before) + [n for n in after if n not in before]:
        if name not in after:
            out.append(f"{name} ({short(before[name])}) is gone")
        elif name not in before:
            out.append(f"{name} ({short(after[name])}) is new")
        elif before[name] != after[name]:
            out.append(f"{name} changed from {short(before[name])} to {short(after[name])}")
    more = len(out) - most
    return out[:most] + ([f"and {more} more"] if more > 0 else [])


def _by_name(pairs) -> dict:
    return {str(n): str(v) for n, v in pairs}


# -- what the fingerprint covers -----------------------------------------------------------
def mark_of(engine: str, bound, plan=None, *, emit_changes: bool = False,
            more: tuple = (), catalog=None) -> Mark:
    """The marker of a runner other than the state store's: ``bound`` the bound query (an
    ``ir.QueryStatement`` or relation), ``plan`` its :class:`~.plan.Plan` (each input's
    look-back), ``more`` facts of the runner's own, ``catalog`` where the streams a signal
    defined by a query reads are defined (:func:`.checkpoint_facts.query_streams`)."""
    every = listed(bound, plan, emit_changes, catalog) + [(n, v, True) for n, v in more]
    shown = readable(getattr(bound, "relation", bound), [(n, v) for n, v, _ in every])
    # a field at its default is listed (the refusal names "4096 to 1024") but not hashed
    counted = [[n, v] for n, v, counts in every if counts]
    digest = hashlib.sha256(json.dumps(counted).encode()).hexdigest()[:16]
    relation = getattr(bound, "relation", bound)
    explain = f"{engine} runner: " + " <- ".join(label(r) for r in chain(relation))
    return Mark(engine, digest, short(explain, 400), shown, scheme=SCHEME)
