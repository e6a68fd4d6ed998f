"""The facts a continuous query's checkpoint marker fingerprints (streaming/checkpoint_plan.py:
what counts, what does not, and why -- its module docstring): the bound query's relations
field by field, each catalog object's definition less its compatible fields, credentials
and operational options, a signal program's expressions, and the definitions of the
streams a signal defined by a query reads (:func:`query_streams`); each as readable text,
so that a refusal names what changed."""

from __future__ import annotations

import dataclasses
import json
import re

__all__ = ["chain", "facts", "label", "listed", "normalized_sql", "readable", "short"]

#: Definition fields that do not count (checkpoint_plan.py's docstring: compatible changes).
_SKIPPED_FIELDS = {"version", "created_at", "updated_at", "heartbeat_us", "watermark_us",
                   "schema", "bounded", "tree", "source_offset"}


#: Reader options that hold credentials (as planner/lower.py redacts them in EXPLAIN):
#: left out of the fingerprint -- the marker is plain text, and a rotated password is
#: a compatible change.
_SECRET = re.compile(r"password|secret|jaas|token|credential|\.key$", re.IGNORECASE)

#: Reader options that decide how much a micro-batch reads, or where a NEW query starts
#: (Spark reads a restarted query's position from its offset log), not what the state
#: means: left out of the fingerprint (checkpoint_plan.py's docstring). Kafka's
#: (sources/kafka.py ``_SOURCE_OPTIONS`` less ``includeHeaders`` and ``ending*``, which
#: change the rows) and Spark's file source's rate and clean-up options
#: (``fileNameOnly`` changes which files count as seen: it counts).
_OPERATIONAL = frozenset({
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "starting", "failondataloss",
    "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "minpartitions",
    "groupidprefix", "maxfilespertrigger", "maxbytespertrigger", "latestfirst", "maxfileage",
    "cleansource", "sourcearchivedir"})


def short(text: str, limit: int = 160) -> str:
    """``text``, cut to ``limit`` characters with ``...``."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def readable(relation, pairs) -> tuple[tuple[str, str], ...]:
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


def facts(bound, plan=None, *, emit_changes: bool = False,
          catalog=None) -> tuple[tuple[str, str], ...]:
    """The fingerprinted facts of a bound query, ``(name, value)`` in plan order
    (checkpoint_plan.py's docstring: what counts and what does not; a field at its default
    is listed but not hashed, so that a defaulted field a release adds keeps old
    fingerprints)."""
    return tuple((n, v) for n, v, _ in listed(bound, plan, emit_changes, catalog))


def listed(bound, plan, emit_changes: bool, catalog=None) -> list[tuple[str, str, bool]]:
    """:func:`facts`, each with whether it counts in the hash."""
    relation = getattr(bound, "relation", bound)
    out: list[tuple] = []
    _relation_facts(relation, out, catalog)
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


def _relation_facts(rel, out: list, catalog=None) -> None:
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
            _relation_facts(value, out, catalog)
        elif f.name == "inputs" and isinstance(rel, ir.SqlQuery):
            for _, child in value:
                _relation_facts(child, out, catalog)
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
            _definition_facts(node, value, out)
            if value.KIND == "SIGNAL" and value.source == "query" and catalog is not None:
                # its samples are its query's rows of a stream: that stream's definition
                # (path, format, columns, event time ...) is what the state was made of
                for stream in query_streams(catalog, value.path, {value.name.lower()}):
                    _definition_facts(f"{node} query's stream {stream.name}", stream, out)
        else:
            text = _text(value)
            if f.name.endswith("_sql") and text != "None":
                text = normalized_sql(None, text)
            out.append((f"{node}.{f.name}", text))


def _definition_facts(node: str, defn, out: list) -> None:
    """A catalog object's fields as facts named ``<node> <field>``, less the compatible
    ones (:data:`_SKIPPED_FIELDS`), credentials and operational options."""
    for g in dataclasses.fields(defn):
        item = getattr(defn, g.name)
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


def query_streams(catalog, text: str, seen: set) -> list:
    """The catalog streams a signal's query (``CREATE SIGNAL ... AS <text>``) reads, through
    views; ``seen``: names already followed. (Its text is in the signal's facts; a name
    the catalog no longer has is the runner's error, not the marker's.)"""
    from sqlglot import exp

    from wavesql.dialect import parse_one

    try:
        tree = parse_one(text)
    except Exception:  # noqa: BLE001 - text the runner will refuse with its own error
        return []
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    out = []
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if not name or name in ctes or name in seen:
            continue
        seen.add(name)
        defn = catalog.get(name)
        kind = getattr(defn, "KIND", None)
        if kind == "STREAM":
            out.append(defn)
        elif kind == "VIEW":
            out += query_streams(catalog, defn.sql, seen)
    return out


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


def chain(rel) -> list:
    """The relations of a plan, outermost first (for the explain line)."""
    out, todo = [], [rel]
    while todo:
        node = todo.pop(0)
        out.append(node)
        todo.extend(node.children())
    return out


def label(rel) -> str:
    from wavesql.planner import ir

    if isinstance(rel, ir.SqlQuery):
        return f"SqlQuery {short(normalized_sql(rel.tree, rel.sql), 120)}"
    return rel.label()
