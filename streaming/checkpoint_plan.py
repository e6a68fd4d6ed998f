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

What the fingerprint of the other runners covers (:func:`facts`): the bound query --
every relation of its IR, each SQL part normalised by sqlglot so that whitespace,
comments and keyword case do not count -- its inputs (each stream's or signal's source,
location, format, reader options, columns, event time and punctuation column; a signal's
rate, segment and epoch), its CQL windows, signal programs and their parameters, SYNC
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
- operational reader options (:data:`_OPERATIONAL`: Kafka's ``maxOffsetsPerTrigger``,
  ``startingOffsets``, ``failOnDataLoss``, ``minPartitions``, ...; the file source's
  ``maxFilesPerTrigger``, ``latestFirst``, ``maxFileAge``, ``cleanSource``): how much a
  batch reads, or where a NEW query starts (a restart reads its position from Spark's
  offset log).

A checkpoint that holds nothing -- no batch in Spark's commit log, no file of WaveSQL's
own (:func:`holds_nothing`): the first batch failed -- takes any query: a refused marker
is rewritten, and the uncommitted offset log, which names the old plan's sources,
deleted.

Upgrades: a WaveSQL release may fingerprint the same query otherwise (a new IR field, a
binder rewrite, a sqlglot upgrade). A marker of another :data:`SCHEME` is re-marked --
adopted as a marker-less checkpoint is, not checked -- so an upgrade never refuses a
running query for that; a release that changes fingerprints raises :data:`SCHEME`. And
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

import dataclasses
import hashlib
import json
import re

from wavesql import storage
from wavesql.errors import WaveSQLError

__all__ = ["FORMAT", "MARKER", "SCHEME", "Mark", "check", "check_query", "facts", "mark_of"]

#: The marker file's name inside the checkpoint.
MARKER = "wavesql.json"
#: The marker's format; a marker without ``format`` is format 1 (the state-store runner's
#: original keys, unchanged).
FORMAT = 1
#: How :func:`facts` fingerprints a query (the markers with ``facts``; a marker without
#: ``scheme`` is scheme 1). A release that fingerprints otherwise raises it, and a checkpoint
#: of another scheme is re-marked, not refused (module docstring).
SCHEME = 2

_HINT = ("give the changed query a new checkpoint (and output) folder, or delete the old "
         "checkpoint to start from the beginning of the input; or run the query as it was")

#: Definition fields that do not count (module docstring: compatible changes).
_SKIPPED_FIELDS = {"version", "created_at", "updated_at", "heartbeat_us", "watermark_us",
                   "schema", "bounded", "tree", "source_offset"}


#: Reader options that hold credentials (as planner/lower.py redacts them in EXPLAIN):
#: left out of the fingerprint -- the marker is plain text, and a rotated password is
#: a compatible change.
_SECRET = re.compile(r"password|secret|jaas|token|credential|\.key$", re.IGNORECASE)

#: Reader options that decide how much a micro-batch reads, or where a NEW query starts
#: (Spark reads a restarted query's position from its offset log), not what the state
#: means: left out of the fingerprint (module docstring). Kafka's (sources/kafka.py
#: ``_SOURCE_OPTIONS`` less ``includeHeaders`` and ``ending*``, which change the rows) and
#: Spark's file source's rate and clean-up options (``fileNameOnly`` changes which files
#: count as seen: it counts).
_OPERATIONAL = frozenset({
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "starting", "failondataloss",
    "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "minpartitions",
    "groupidprefix", "maxfilespertrigger", "maxbytespertrigger", "latestfirst", "maxfileage",
    "cleansource", "sourcearchivedir"})


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
    is written, nothing checked) or ``"refuse"``."""
    path = storage.join(checkpoint, MARKER)
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
            storage.write_text(path, mine.to_json())
            return theirs
        refusal = mismatch(theirs, mine)
        if refusal is None:
            return theirs
        if holds_nothing(checkpoint):
            # no batch committed (the first one failed): nothing to misread -- the query
            # now starting owns it, from the beginning as on a new checkpoint
            # (Spark's offset log of that batch names the old plan's sources, the file
            # list fixed for it the old query's view of the input; a derived part's own
            # checkpoint is checked, and cleared, by the part)
            for log in _UNCOMMITTED:
                storage.delete(storage.join(checkpoint, log), recursive=True)
            storage.write_text(path, mine.to_json())
            return None
        raise WaveSQLError("CHECKPOINT_MISMATCH",
                           f"the checkpoint {checkpoint} {refusal}", hint=_HINT)
    if legacy == "refuse" and any(storage.is_dir(storage.join(checkpoint, d))
                                  for d in ("state", "offsets")):
        raise WaveSQLError(
            "CHECKPOINT_MISMATCH", f"the checkpoint {checkpoint} was written by an earlier "
            f"WaveSQL runner for this query, whose state the {runner_name(mine.engine)} "
            "cannot read",
            hint="start the query with a new checkpoint folder (and output folder)")
    storage.write_text(path, mine.to_json())
    return None


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
                                           emit_changes=query.emit_changes, more=more))


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
            out.append(f"{name} ({_short(before[name])}) is gone")
        elif name not in before:
            out.append(f"{name} ({_short(after[name])}) is new")
        elif before[name] != after[name]:
            out.append(f"{name} changed from {_short(before[name])} to {_short(after[name])}")
    more = len(out) - most
    return out[:most] + ([f"and {more} more"] if more > 0 else [])


def _by_name(pairs) -> dict:
    return {str(n): str(v) for n, v in pairs}


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


# -- what the fingerprint covers -----------------------------------------------------------
def mark_of(engine: str, bound, plan=None, *, emit_changes: bool = False,
            more: tuple = ()) -> Mark:
    """The marker of a runner other than the state store's: ``bound`` the bound query (an
    ``ir.QueryStatement`` or relation), ``plan`` its :class:`~.plan.Plan` (each input's
    look-back), ``more`` facts of the runner's own."""
    every = _listed(bound, plan, emit_changes) + [(n, v, True) for n, v in more]
    listed = _readable(getattr(bound, "relation", bound), [(n, v) for n, v, _ in every])
    # a field at its default is listed (the refusal names "4096 to 1024") but not hashed
    counted = [[n, v] for n, v, counts in every if counts]
    digest = hashlib.sha256(json.dumps(counted).encode()).hexdigest()[:16]
    relation = getattr(bound, "relation", bound)
    explain = f"{engine} runner: " + " <- ".join(_label(r) for r in _chain(relation))
    return Mark(engine, digest, _short(explain, 400), listed, scheme=SCHEME)


def _readable(relation, pairs) -> tuple[tuple[str, str], ...]:
    """The facts as the marker lists them (for the refusal; the hash is of the facts as
    they are): a signal program's output named with the query's column it becomes
    (``_sig0 (column f)``), a generated window view in SQL as the user's window
    (``FROM ev [RANGE 10 SECONDS] AS ev``, not ``__wavesql_window_0``)."""
    from sqlglot import exp

    from wavesql.planner import ir

    columns: dict[str, str] = {}
    views: dict[str, str] = {}
    for rel in ir.walk(relation):
        if not isinstance(rel, ir.SqlQuery):
            continue
        for name, child in rel.inputs:
            if name.startswith("__wavesql") and isinstance(child, ir.WindowScan):
                views[name] = f"{child.stream} {child.window}"
        for alias in (rel.tree.find_all(exp.Alias) if rel.tree is not None else ()):
            if isinstance(alias.this, exp.Column) and alias.alias:
                columns.setdefault(alias.this.name, alias.alias)
    out = []
    for name, value in pairs:
        output = re.search(r" program output (\w+)$", name)
        if output and output.group(1) in columns:
            name += f" (column {columns[output.group(1)]})"
        if name.endswith(" SQL"):
            for view, shown in views.items():
                value = re.sub(rf"\b{re.escape(view)}\b", shown, value)
        out.append((name, value))
    return tuple(out)


def facts(bound, plan=None, *, emit_changes: bool = False) -> tuple[tuple[str, str], ...]:
    """The fingerprinted facts of a bound query, ``(name, value)`` in plan order (module
    docstring: what counts and what does not; a field at its default is listed but not
    hashed, so that a defaulted field a release adds keeps old fingerprints)."""
    return tuple((n, v) for n, v, _ in _listed(bound, plan, emit_changes))


def _listed(bound, plan, emit_changes: bool) -> list[tuple[str, str, bool]]:
    """:func:`facts`, each with whether it counts in the hash."""
    relation = getattr(bound, "relation", bound)
    out: list[tuple] = []
    _relation_facts(relation, out)
    out.append(("output columns", ", ".join(f"{f.name} {f.type}"
                                            for f in relation.schema.fields)))
    out.append(("EMIT", "CHANGES" if emit_changes else "FINAL"))
    if plan is not None:
        out.append(("mode", str(plan.mode)))
        for inp in plan.inputs:
            out.append((f"look-back of input {inp.index} ({inp.stream.name})",
                        "; ".join(str(rule) for rule in inp.lookback) or "nothing"))
    seen: dict[str, int] = {}
    unique = []
    for name, value, *default in out:  # (a stream read twice: its facts numbered)
        seen[name] = seen.get(name, 0) + 1
        unique.append((name if seen[name] == 1 else f"{name} #{seen[name]}", value,
                       not default))
    return unique


def _relation_facts(rel, out: list) -> None:
    from wavesql.planner import ir

    # named by the node alone (a nested query's facts are numbered): readable
    # in the refusal, and the path's generated view names would be noise
    node = _node_name(rel)
    for f in dataclasses.fields(rel):
        if f.name in _SKIPPED_FIELDS or not f.compare:
            continue
        value = getattr(rel, f.name)
        if _is_default(f, value):  # listed, not hashed (facts)
            if value not in (None, (), ""):
                out.append((f"{node}.{f.name}", _text(value), "default"))
            continue
        if isinstance(value, ir.Relation):
            _relation_facts(value, out)
        elif f.name == "inputs" and isinstance(rel, ir.SqlQuery):
            for _, child in value:
                _relation_facts(child, out)
        elif isinstance(rel, ir.SqlQuery) and f.name == "sql":
            out.append((f"{node} SQL", normalized_sql(rel.tree, rel.sql)))
        elif f.name == "program" and value is not None:  # each output, named readably
            out.append((f"{node} program channels", ", ".join(value.channels)))
            for o in value.outputs:
                out.append((f"{node} program output {o.name}",
                            f"{_expr_text(o.expr)} {o.type}" +
                            (f" epoch {o.epoch_us}" if o.epoch_us else "")))
            out.append((f"{node} program filter",
                        " AND ".join(_expr_text(t) for t in value.filters) or "none"))
        elif isinstance(rel, ir.ViewRef) and f.name == "view":
            continue  # its stored text: the bound body (a child) is what counts
        elif dataclasses.is_dataclass(value) and hasattr(value, "KIND"):  # a catalog object
            for g in dataclasses.fields(value):
                item = getattr(value, g.name)
                if g.name not in _SKIPPED_FIELDS and g.name != "name":
                    if g.name == "options":  # credentials rotate; never in the marker
                        item = _kept_options(item)
                    text = _text(item)
                    if g.name in ("sql", "query"):
                        text = normalized_sql(None, text)
                    if not _is_default(g, item):
                        out.append((f"{node} {g.name}", text))
                    elif item not in (None, (), ""):  # listed, not hashed (facts)
                        out.append((f"{node} {g.name}", text, "default"))
        else:
            text = _text(value)
            if f.name.endswith("_sql") and text != "None":
                text = normalized_sql(None, text)
            out.append((f"{node}.{f.name}", text))


def _is_default(f, value) -> bool:
    """Whether dataclass field ``f`` holds its default."""
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return False
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:  # noqa: BLE001 - a value that cannot be compared: written
        return False


def _kept_options(options) -> tuple:
    """A definition's reader options less credentials (rotate; never in the plain-text
    marker) and operational ones (:data:`_OPERATIONAL`)."""
    return tuple((k, v) for k, v in options
                 if not _SECRET.search(k) and k.lower() not in _OPERATIONAL)


def _reference(value) -> str:
    """A relation or catalog object held in a field of another (``WindowScan.joint``), by
    name: its own facts are the node's where it is in the plan, and field by field it would
    write a definition's version, times and credentials."""
    from wavesql.planner import ir

    if isinstance(value, ir.WindowScan):
        return f"{value.stream} {value.window} on {value.time_column}"
    if isinstance(value, ir.Relation):
        return _node_name(value)
    return f"{type(value).__name__} {value.name}"


def _expr_text(tree) -> str:
    """A signal program's expression tree as text: every key of it, so that a parameter
    anywhere in it counts (``lowpass(x, 100.0)``)."""
    if isinstance(tree, list):
        return "[" + ", ".join(_expr_text(t) for t in tree) + "]"
    if not isinstance(tree, dict):
        return repr(tree)
    if set(tree) == {"col"}:
        return str(tree["col"])
    if set(tree) == {"lit"}:
        return repr(tree["lit"])
    rest = dict(tree)
    args = [_expr_text(a) for a in rest.pop("args", [])]
    head = ""
    if "call" in rest:
        head = f"{rest.pop('call')}({', '.join(args)})"
    elif "op" in rest:
        op = rest.pop("op")
        head = f"{op} {args[0]}" if len(args) == 1 else "(" + f" {op} ".join(args) + ")"
    elif args:
        head = "(" + ", ".join(args) + ")"
    extra = ", ".join(f"{k}={_expr_text(v)}" for k, v in sorted(rest.items()))
    return head + (f" [{extra}]" if extra else "")


def _node_name(rel) -> str:
    kind = type(rel).__name__
    for attr in ("stream", "signal", "view"):
        target = getattr(rel, attr, None)
        name = target if isinstance(target, str) else getattr(target, "name", None)
        if isinstance(name, str):
            return f"{kind} {name}"
    return kind


def _text(value) -> str:
    """A value as stable text: its own ``__str__`` where it has one (a window's
    ``[RANGE 10 SECONDS]``), containers and dataclasses field by field, never an address."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=_text)
    from wavesql.planner import ir

    if isinstance(value, ir.Relation) or (dataclasses.is_dataclass(value)
                                          and hasattr(value, "KIND")):
        return _reference(value)
    if type(value).__str__ is not object.__str__ and not dataclasses.is_dataclass(value):
        return str(value)
    if dataclasses.is_dataclass(value):
        if "__str__" in type(value).__dict__:
            return str(value)
        return type(value).__name__ + "(" + ", ".join(
            f"{g.name}={_text(getattr(value, g.name))}" for g in dataclasses.fields(value)
            if g.compare and not _is_default(g, getattr(value, g.name))) + ")"
    return type(value).__name__


def normalized_sql(tree, text: str) -> str:
    """SQL without its whitespace, comments and keyword case: sqlglot's rendering of the
    tree (or of ``text`` parsed), else ``text`` with its whitespace collapsed."""
    try:
        if tree is None:
            from wavesql.dialect import parse_one

            tree = parse_one(text)
        return tree.sql(dialect="spark", comments=False)
    except Exception:  # noqa: BLE001 - text sqlglot cannot read or render: compared as is
        return " ".join(str(text).split())


def _chain(rel) -> list:
    """The relations of a plan, outermost first (for the explain line)."""
    out, todo = [], [rel]
    while todo:
        node = todo.pop(0)
        out.append(node)
        todo.extend(node.children())
    return out


def _label(rel) -> str:
    from wavesql.planner import ir

    if isinstance(rel, ir.SqlQuery):
        return f"SqlQuery {_short(normalized_sql(rel.tree, rel.sql), 120)}"
    return rel.label()
