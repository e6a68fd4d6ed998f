"""A signal query's (or SYNC's) own OVER windows, cut into a part and the rest over its rows.

``SELECT start_time(ch1) AS t, avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS
BETWEEN 4 PRECEDING AND CURRENT ROW) AS a FROM mic [SAMPLES 4096]`` is one SELECT over a
signal's windows with an OVER window over them: the batch planner runs it (the window
functions over the windows' rows), the continuous signal runner cannot (each window's row
is final when the window is; nothing is carried across windows outside the signal
functions). :func:`over_split` cuts it as a user would write it with a CTE:

- **the part**: ``SELECT start_time(ch1) AS t, seg_rms(ch1) AS _w1 FROM mic [SAMPLES
  4096]`` -- every *per-window expression* (a maximal expression reading the signal's
  channels with no aggregate or window function in it) once, named by the user's alias
  when it is a column of the SELECT as it is, else ``_w1``, ``_w2``, ...; a
  ``start_time(<first channel>)`` column is added when none is there (the event time of
  its rows). Its FROM clause stays at its place in the text (the list is laid out in the
  room the user's list had, when it fits).
- **the rest**: the user's text with each per-window expression replaced by its column's
  name and the signal's FROM item by the part's name, each padded with blanks to the
  length it replaces: every other offset is kept, so the rest's errors point into the
  user's statement.

A SYNC's own SELECT with OVER windows (``SELECT c.id, c.t0 AS t, avg(seg_rms(m.ch1)) OVER
(ORDER BY c.t0 ROWS 2 PRECEDING) AS a FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)``)
is cut the same way into a SYNC part: its per-row expressions read the control's columns
or the signals' channels, and its event time is the control's EVENT TIME passed through
(``c.t0`` added when the SELECT has none). The SYNC runner keeps nothing between
micro-batches, so such a statement must be cut (streaming/sync.py refuses it whole).

A SYNC's own SELECT with a CQL window on its control (``SELECT c.id % 2 AS k, avg(seg_rms(
m.ch1)) AS r FROM ctl c [RANGE 4 SECONDS SLIDE 2 SECONDS] SYNC JOIN mic m ON RANGE (c.t0,
c.t1) GROUP BY c.id % 2``) is cut the same way, the window moving to the rest with the
aggregates, GROUP BY and HAVING: the rest windows the part's rows at the control's EVENT
TIME, as the batch planner windows the control's rows before syncing them (one window
instance per row and instant either way). A GROUP BY expression is one column of the
part (an expression around it stays in the rest, as Spark's grouping needs); the window
follows the part's name in the rest, at its own offset when the name fits before it.

Only the shapes the batch planner runs the same way are cut: one SELECT reading one
catalog signal in its FROM, or a catalog stream with an EVENT TIME -- or a catalog view,
subquery or the statement's one CTE row by row over one, passing it through (``FROM
(SELECT t0, t1, id FROM ctl WHERE id <> 3) c [RANGE ...]``: the part's FROM item, read as
a continuous SYNC reads such a control; the CTE kept in the part's text) -- SYNC JOINed to
catalog signals (no other join, subquery, CTE or set operation), with OVER windows of aggregate or window functions and no aggregate outside
them, no GROUP BY or HAVING -- or, over a SYNC, a CQL window on the control with any of
them. Any other shape --
a signal function's OVER (PARTITION BY k), which is its own per-key state; a computed
column without a name (Spark names it after its text, which the rest cannot say); an
expression whose text cannot be replaced safely (checked: it parses back to itself) -- is
not cut, and the runner's refusal stays, its hint spelling the CTE form.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import parse_statements
from wavesql.errors import Span, WaveSQLError

from .derived_hoist import put, read_names

#: nodes that are clauses or containers, never a per-window value themselves
_CONTAINERS = (exp.Alias, exp.Ordered, exp.Order, exp.Window, exp.WindowSpec, exp.Select,
               exp.From, exp.Where, exp.Table, exp.Star, exp.Identifier, exp.Join,
               exp.Group, exp.Having)


def over_split(stmt, text: str, catalog, split_cls, part_cls):
    """The split of ``stmt`` (``text``: the full text its positions index) when it is one
    SELECT over a signal's windows -- or over a SYNC of a catalog stream -- with OVER
    windows, or a SYNC with a CQL window on its control (module docstring), else None."""
    node = stmt.node
    if not isinstance(node, exp.Select):
        return None
    source = node.args.get("from_")
    table = source.this if source is not None else None
    joins = node.args.get("joins") or []
    with_ = node.args.get("with_")
    ctes = {c.alias_or_name.lower(): c.this for c in with_.expressions} if with_ else {}
    if with_ is not None and not (joins and isinstance(table, exp.Table)
                                  and table.name.lower() in ctes and len(ctes) == 1):
        return None  # (a WITH: only the SYNC's control, kept in the part's text)
    # a CQL window on a SYNC's control ([RANGE ...] after `ctl c`): the rest's, with the
    # aggregates and GROUP BY over it (a signal's [SAMPLES n] stays with the signal)
    window = table.args.get("window") if joins and isinstance(table, (exp.Table, exp.Subquery)) \
        else None
    if window is not None and window.args.get("kind") != "RANGE":
        return None  # (a time window only: rows in the control's order -- ROWS, PARTITION
        # BY ... ROWS, NOW -- are not the part's arrival order)
    if window is None and (node.args.get("group") or node.args.get("having")
                           or not any(True for _ in node.find_all(exp.Window))):
        return None
    if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
           for e in node.expressions):
        return None  # (a signal's * is its segments, a SYNC's its inputs' columns)
    if any(_signal_function(w.this) for w in node.find_all(exp.Window)):
        return None  # a signal function per key (OVER (PARTITION BY k)): its own state
    if any(isinstance(n, (exp.Subquery, exp.Union)) and not (joins and n is table)
           and n.find_ancestor(exp.Subquery) is not table for n in node.walk()) \
            or window is None and any(isinstance(a, exp.AggFunc) and not isinstance(
                a.parent, exp.Window) for a in node.find_all(exp.AggFunc)):
        return None
    first = catalog.get(table.name) if isinstance(table, exp.Table) \
        and not table.args.get("db") else None
    signals = [catalog.get(j.this.name) for j in joins if isinstance(j.this, exp.Table)
               and not j.this.args.get("db") and j.args.get("sync")]
    sync = bool(joins)
    if sync:  # FROM a control stream with an EVENT TIME, SYNC JOINs of catalog signals
        if not table.alias_or_name:
            return None  # (a subquery without an alias: its error comes from the binder)
        first = _control(table, first, catalog, ctes)
        if first is None or not (len(signals) == len(joins)
                                 and all(isinstance(g, cat.SignalDef) for g in signals)):
            return None
    elif not isinstance(first, cat.SignalDef):
        return None
    alias = table.alias_or_name.lower()
    aliases = {alias} | {j.this.alias_or_name.lower() for j in joins}
    owned = [c.name.lower() for g in ([first] if not sync else signals) for c in g.channels]
    if sync:
        owned += [c.lower() for c in first.columns]
    known = set(owned)

    def key(n) -> str:
        # one column however it is spelled (`id` in the SELECT, `c.id` in GROUP BY: one
        # column of the part, else the rest's GROUP BY names another than its SELECT),
        # when only one input has a column of that name
        if isinstance(n, exp.Column) and owned.count(n.name.lower()) == 1:
            return n.name.lower()
        return n.sql()

    def reads_channel(n) -> bool:
        return any(c.name.lower() in known and c.table.lower() in ({""} | aliases)
                   for c in n.find_all(exp.Column))

    # (around a GROUP BY expression, an expression is the rest's: `c.id % 2 + 1` over
    # GROUP BY c.id % 2 reads the group's column, not one of its own)
    grouped = {key(e) for e in (node.args.get("group") or exp.Group()).expressions}

    def per_window(n) -> bool:  # (a function sqlglot leaves Anonymous -- try_avg, every,
        # histogram_numeric -- may be an aggregate or a window's: only signal functions are
        # per-window, the others stay in the rest over the part's columns)
        return isinstance(n, exp.Expression) and not isinstance(n, _CONTAINERS) \
            and reads_channel(n) and not any(
                isinstance(d, (exp.AggFunc, exp.Window)) or isinstance(d, exp.Anonymous)
                and not _signal_function(d) or d is not n
                and not isinstance(d, exp.Identifier) and key(d) in grouped
                for d in n.walk())

    found = []  # every maximal per-window expression, in the statement's order

    def collect(n):
        if per_window(n):
            found.append(n)
            return
        for child in n.iter_expressions():
            if not isinstance(child, (exp.From, exp.Join, exp.With)):  # (the part's)
                collect(child)

    collect(node)
    if not found:
        return None
    tokens = _tokens(text)
    extents = [_extent(text, tokens, n) for n in found]
    if any(e is None for e in extents):
        return None
    # the columns: each distinct expression once, named as the user did when it is a
    # column of the SELECT as it is
    taken = {i.name.lower() for i in node.find_all(exp.Identifier)} | known
    names, columns = {}, []  # expression's SQL -> column name; (text, name) of the part
    for n in found:
        if isinstance(n.parent, exp.Alias) and n.parent.parent is node:
            names.setdefault(key(n), n.parent.alias)
        elif n.parent is node and isinstance(n, exp.Column):  # (a column keeps its name)
            names.setdefault(key(n), n.name)
        elif n.parent is node:  # named by Spark after its text, which the rest cannot say
            return None
    if len(set(names.values())) < len(names):
        return None
    inside = {id(n) for n in found}
    if any(not isinstance(e, (exp.Alias, exp.Column)) and any(id(d) in inside for d in e.walk())
           for e in node.expressions):
        return None  # an unnamed column around one: Spark names it after its text, which
        # the rewrite changes (`avg(_w1) OVER ...` for `avg(seg_rms(ch1)) OVER ...`)
    for n, (a, b) in zip(found, extents):
        k = key(n)
        if k not in names:
            names[k] = _fresh("_w", taken)
        taken.add(names[k].lower())
        if all(c[1] != names[k] for c in columns):
            columns.append((text[a:b], names[k]))
    if sync:  # its rows' time: the control's EVENT TIME passed through as it is
        time_column = next((names[key(n)] for n in found if isinstance(n, exp.Column)
                            and n.name.lower() == first.event_time.lower()
                            and n.table.lower() in ("", alias)), None)
        added = f"{table.alias_or_name}.{first.event_time}"
    else:
        time_column = next((names[key(n)] for n in found if isinstance(n, exp.Anonymous)
                            and str(n.this).lower() == "start_time"), None)
        added = f"start_time({first.channels[0].name})"
    if time_column is None:
        time_column = _fresh("_wt", taken)
        columns.append((added, time_column))
    # the FROM item (the signal with its window; or the control and its SYNC JOINs)
    tokens_item = [_span(table)] + [_span(j) for j in joins]
    if any(t is None for t in tokens_item):
        return None
    item_a = tokens_item[0][0]
    if isinstance(table, exp.Subquery):  # (its first positioned token is inside the "(")
        item_a = max((t.start for t in tokens if t.start < item_a
                      and t.token_type == TokenType.L_PAREN), default=item_a)
    item_b = _through(tokens, item_a, max(t[1] for t in tokens_item))
    if item_b is None:
        return None
    name = _fresh(f"{table.alias_or_name}_{'synced' if sync else 'windows'}",
                  taken | read_names(node, catalog))  # (not any catalog name: derived_hoist)
    if len(name) > item_b - item_a:
        return None
    named = {e.alias.lower() for e in node.expressions if isinstance(e, exp.Alias)}
    if any(c.table.lower() in aliases or not c.table and c.name.lower() not in named
           and not c.name.startswith("_") for c in node.find_all(exp.Column)
           if not any(_inside(_span(c), e) for e in extents + [(item_a, item_b)])
           and c.find_ancestor(exp.With) is None):
        return None  # an input's alias read outside the per-window expressions, or a
        # column no input has (planned whole: its error names the inputs' columns, not the
        # part's _w1, ...); the rest reads the SELECT's names, _time, and the part's
    # the rest: each expression by its column, the FROM item by the part's name (and the
    # control's window after it: at its own offset when the name fits before it)
    outer = text
    for (a, b), word in zip(extents, (names[key(n)] for n in found)):
        outer = put(outer, a, b, word)
        if outer is None:
            return None
    body = text[_from_at(tokens, item_a):item_b]
    span = _span(window) if window is not None else None
    if window is None:
        outer = put(outer, item_a, item_b, name)
    elif span is None:
        return None
    elif "\n" not in text[item_a:item_a + len(name)] and item_a + len(name) < span[0]:
        outer = put(outer, item_a, item_b, name)  # (at item_a: no newline in its way)
        outer = outer[:span[0]] + text[span[0]:span[1]] + outer[span[1]:]
    else:
        outer = put(outer, item_a, item_b, f"{name} {text[span[0]:span[1]]}")
    if outer is None:
        return None
    if span is not None:
        body = put(text, *span, "")[_from_at(tokens, item_a):item_b]
    # the part: its list where the user's was when it fits, the FROM item at its place;
    # a WITH of the control kept before it (in the rest, blanked: the rest reads the part)
    with_end = _through(tokens, *_span(with_)) if with_ is not None else 0
    if with_end is None:
        return None
    select_at = next(t.start for t in tokens if t.token_type == TokenType.SELECT
                     and t.start >= with_end)
    head = text[:select_at] if with_ is not None else ""
    if with_ is not None:
        outer = _keep_lines(text, " " * with_end) + outer[with_end:]
    at = _from_at(tokens, item_a)
    listed = "SELECT " + ", ".join(f"{e} AS {c}" for e, c in columns)
    if select_at + len(listed) < at:
        inner = _keep_lines(text, " " * select_at + listed + " " * (at - select_at
                                                                    - len(listed)))
        inner = head + inner[len(head):] + body
        inner = inner + _keep_lines(text[item_b:], " " * (len(text) - item_b))
    else:  # (a longer list: the FROM clause moves, only in the part)
        inner = head + listed + " " + body
    return split_cls((part_cls(name, inner, time_column, sync=sync, origin="SELECT"),), outer,
                     text)


class _Control:
    """A SYNC's control as the cut needs it: its columns' names and its EVENT TIME's."""

    def __init__(self, columns, event_time: str):
        self.columns, self.event_time = list(columns), event_time


def _control(table, defn, catalog, ctes: dict) -> _Control | None:
    """The control of a SYNC in its own SELECT: a catalog stream with an EVENT TIME, or a
    catalog view, CTE (of ``ctes``) or subquery row by row over one that passes its EVENT
    TIME through unchanged (its rows are the stream's, filtered and projected: the SYNC
    part reads it as a continuous SYNC reads such a control, streaming/sync.py); else
    None."""
    if isinstance(table, exp.Table) and table.name.lower() in ctes:
        query = ctes[table.name.lower()]
    elif isinstance(defn, cat.StreamDef):
        return _Control([c.name for c in defn.columns], defn.event_time) \
            if defn.event_time is not None else None
    elif isinstance(defn, cat.ViewDef):
        try:
            (body,) = parse_statements(defn.sql)
        except WaveSQLError:
            return None
        query = body.node
    elif isinstance(table, exp.Subquery):
        query = table.this
    else:
        return None
    if not isinstance(query, exp.Select) or query.args.get("with_") or any(
            isinstance(n, (exp.Subquery, exp.Join, exp.AggFunc, exp.Window, exp.Group,
                           exp.Distinct, exp.Limit, wn.StreamWindow)) for n in query.walk()):
        return None
    source = query.args.get("from_")
    inner = source.this if source is not None else None
    stream = catalog.get(inner.name) if isinstance(inner, exp.Table) \
        and not inner.args.get("db") else None
    if not isinstance(stream, cat.StreamDef) or stream.event_time is None:
        return None
    if query.is_star:
        return _Control([c.name for c in stream.columns], stream.event_time)
    named = [p.alias_or_name for p in query.selects]
    passed = next((p.alias_or_name for p in query.selects if isinstance(p, exp.Column)
                   and p.name.lower() == stream.event_time.lower()), None)
    return _Control(named, passed) if passed is not None else None


def _signal_function(call) -> bool:
    from wavesql.udfs import registry

    return isinstance(call, exp.Anonymous) and registry.lookup(call.name) is not None


def _from_at(tokens, item_a: int) -> int:
    """Where the FROM keyword before the FROM item at ``item_a`` is."""
    return max(t.start for t in tokens if t.token_type == TokenType.FROM and t.start < item_a)


def _fresh(base: str, taken: set) -> str:
    name, k = (base + "1", 1) if base.startswith("_w") and base != "_wt" else (base, 1)
    while name.lower() in taken:
        k += 1
        name = f"{base}{k}" if base.startswith("_w") else f"{base}_{k}"
    return name


def _keep_lines(text: str, inner: str) -> str:
    """``inner`` with the newlines of ``text`` where it has blanks (line numbers kept)."""
    return "".join("\n" if c == " " and i < len(text) and text[i] == "\n" else c
                   for i, c in enumerate(inner))


def _tokens(text: str):
    from wavesql.dialect.dialect import WaveSQL

    return WaveSQL().tokenizer().tokenize(text)


def _span(n) -> tuple[int, int] | None:
    """The offsets of the first and past the last positioned token of ``n``."""
    spans = [Span.of(d) for d in n.walk() if (getattr(d, "meta", None) or {}).get("end")
             is not None]
    spans = [s for s in spans if s is not None]
    if not spans:
        return None
    return min(s.start for s in spans), max(s.end for s in spans)


def _through(tokens, a: int, b: int) -> int | None:
    """``b`` moved past the tokens closing what opened between ``a`` and it (a call's or
    a RANGE's ")"), or None when more closes than opens there."""
    depth = 0
    for t in tokens:
        if t.start < a:
            continue
        if t.start >= b and depth <= 0:
            break
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
        if depth < 0:
            return None
        b = max(b, t.end + 1)
    return b


def _extent(text: str, tokens, n) -> tuple[int, int] | None:
    """Where expression ``n`` is written in ``text``: from its first token to the ")" that
    closes the last open call -- checked: the text parses back to ``n`` (else None)."""
    from wavesql.dialect.dialect import WaveSQL

    span = _span(n)
    if span is None:
        return None
    a, b = span[0], _through(tokens, *span)
    if b is None:
        return None
    try:
        back = exp.maybe_parse(text[a:b], dialect=WaveSQL)
    except Exception:  # noqa: BLE001 (any parse failure: not replaceable safely)
        return None
    return (a, b) if back.sql() == n.sql() else None


def _inside(span, extent) -> bool:
    return span is not None and extent[0] <= span[0] and span[1] <= extent[1]
