"""The pairs entering and leaving an inner per-instant join of windowed streams, one bucket
of keys, one micro-batch (numpy and pandas, no Spark).

When the query is additive over the join keys and the SQL around an **inner** join is row
by row (:attr:`.window_join.WindowJoinOperator.keyed`), ``ISTREAM`` / ``DSTREAM`` need no
per-instant relation. A pair ``(a, b)`` of rows of one key is in ``R_a(t) JOIN R_b(t)``
exactly while both are in their relations, over the intersection of their validity
intervals ``[max(from_a, from_b), min(to_a, to_b))`` (empty: never), and the query's
WHERE/ON/SELECT apply to each pair alone. So at an instant ``t`` the result is the one of
the instant before minus the pairs ``L_t`` ending at ``t`` plus those ``E_t`` starting
there, and per projected row value ``v`` (bags)::

    ISTREAM(t)(v) = max(0, E_t(v) - L_t(v))     DSTREAM(t)(v) = max(0, L_t(v) - E_t(v))

(the instant before ``t`` holds the relations of just before ``t``: they change only at
instants). :func:`signed_pairs` gives, for the instants ``[start, P)`` a micro-batch makes
final, every such pair event of the bucket as one encoded row: the left stream's columns
from ``a``, the right one's from ``b``, ``ts`` the instant, ``pk`` the sign (+1 entering,
-1 leaving) and ``ph`` the event's number within the call (the driver makes it unique over
the micro-batch with the bucket, a function of the key hashes). The driver runs the
user's SELECT over each event's pair alone, sums the signs per instant and projected row
and emits ``max(0, n)`` (ISTREAM) or ``max(0, -n)`` (DSTREAM) copies.

A NULL key joins nothing (``nk``). Two rows are of one key when their key values are
equal (``keys``: the positions of the key columns among each stream's, whose values the
rows carry -- encoded exactly, :mod:`.encoding`, compared as SQL's ``=`` does: NaN equal
to NaN, -0.0 to 0.0), not only their two hashes: an outer join's preserved row is padded
while no row of its own key is there, and a row of another key with equal hashes must not
end that (a wrong, missing row). Without ``keys`` (an inner join built by older code) the
hashes alone pair rows, which the user's SQL after drops where the keys differ.

Outer joins (ON of key equalities only, so a pair of equal keys is a match): a preserved
row is NULL-padded while it is in its relation with none of its pairs held -- intervals
too; its padded events carry its own stream's columns only, ``nk`` true and ``right``
its stream (the driver hands each stream's frame the rows it holds).

Exact ends of ``[ROWS n]`` windows: a row leaves when the ``n``-th later row of its
partition arrives; rows at one instant are ordered by their column values in declared
order, NULLs first (``planner/windows.py``, as Spark's ``lead`` over that order), a NaN
after every number. Every row below progress ``P`` is in (a later one is late), so an end
below ``P`` is final.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: "Never leaves" (as :data:`.window_join.FOREVER`).
FOREVER = np.iinfo(np.int64).max


def _order_codes(values: np.ndarray) -> np.ndarray:
    """Codes ordering ``values`` as Spark sorts them (NaN after every number)."""
    codes, _ = pd.factorize(pd.Series(values), sort=True, use_na_sentinel=True)
    codes = codes.astype(np.int64)
    codes[codes < 0] = codes.max(initial=-1) + 1  # NaN: largest
    return codes


def rows_ends(rows: pd.DataFrame, side: str, width: int, n: int,
              part: np.ndarray) -> np.ndarray:
    """The exact instant each of one stream's ``rows`` leaves its ``[ROWS n]`` window
    (:data:`FOREVER`: not yet); ``side`` its columns' prefix (``l``/``r``), ``width`` their
    number, ``part`` its partition number per row."""
    ts = rows["ts"].to_numpy(np.int64)
    if not len(ts):
        return ts.copy()
    keys = [np.asarray(part, np.int64), ts]
    for i in range(width):
        keys.append(~rows[f"{side}n{i}"].to_numpy(bool))  # NULLs first
        keys.append(_order_codes(rows[f"{side}{i}"].to_numpy()))
    order = np.lexsort(keys[::-1])  # the last key is lexsort's primary
    p, t = keys[0][order], ts[order]
    pos = np.arange(len(t)) + n
    inside = pos < np.searchsorted(p, p, "right")  # the n-th later row is in the partition
    ends = np.full(len(t), FOREVER, np.int64)
    ends[inside] = t[pos[inside]]
    out = np.empty(len(t), np.int64)
    out[order] = ends
    return out


def _key_values(rows: pd.DataFrame, idx: np.ndarray, right: bool,
                keys: tuple[tuple[int, int], ...]) -> pd.DataFrame:
    """The join hashes and key values of the rows ``idx`` of one stream (``right``), as
    columns ``sk``, ``sh``, ``k0``... alike for both streams."""
    side = "r" if right else "l"
    out = {"sk": rows["sk"].to_numpy(np.int64)[idx], "sh": rows["sh"].to_numpy(np.int64)[idx]}
    for j, pair in enumerate(keys):
        out[f"k{j}"] = rows[f"{side}{pair[int(right)]}"].to_numpy()[idx]
    return pd.DataFrame(out)


class _ByKey:
    """Rows of one stream sorted by (key code, an instant of theirs): how many of a key's
    rows have their instant at or before ``t``, and which (``searchsorted`` on the code
    and the instant's rank in ``timeline``, the sorted instants of the call)."""

    def __init__(self, rows: np.ndarray, code: np.ndarray, at: np.ndarray,
                 timeline: np.ndarray):
        self.timeline, self.width = timeline, len(timeline) + 1
        order = np.lexsort((at, code))
        self.rows = rows[order]
        self.sorted = code[order] * self.width + np.searchsorted(timeline, at[order])

    def _bounds(self, code: np.ndarray, t: np.ndarray, inclusive: bool):
        lo = np.searchsorted(self.sorted, code * self.width, "left")
        hi = np.searchsorted(self.sorted, code * self.width + np.searchsorted(self.timeline, t),
                             "right" if inclusive else "left")
        return lo, hi

    def count(self, code: np.ndarray, t: np.ndarray, inclusive: bool) -> np.ndarray:
        """Per query: the rows of key ``code`` whose instant is ``<= t`` (``< t``: not
        ``inclusive``)."""
        lo, hi = self._bounds(code, t, inclusive)
        return hi - lo

    def upto(self, code: np.ndarray, t: np.ndarray, inclusive: bool):
        """``(query, row)`` for every row :meth:`count` counts."""
        lo, hi = self._bounds(code, t, inclusive)
        n = hi - lo
        query = np.repeat(np.arange(len(n)), n)
        first = np.repeat(np.cumsum(n) - n, n)
        return query, self.rows[lo[query] + np.arange(len(query)) - first]


def _key_codes(rows: pd.DataFrame, a: np.ndarray, b: np.ndarray,
               keys: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    """One number per key (equal hashes and equal key values) for the left rows ``a`` and
    the right rows ``b``."""
    frame = pd.concat([_key_values(rows, a, False, keys), _key_values(rows, b, True, keys)],
                      ignore_index=True)
    if not len(frame):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # groupby keeps NaN as a key equal to itself and -0.0 equal to 0.0, as SQL's = does
    code = frame.groupby(list(frame.columns), dropna=False, sort=False).ngroup()
    code = code.to_numpy(np.int64)
    return code[:len(a)], code[len(a):]


def signed_pairs(rows: pd.DataFrame, frm: np.ndarray, to: np.ndarray, among: np.ndarray,
                 start: int, progress: int, names: list[str],
                 preserve: tuple[bool, bool] = (False, False),
                 keys: tuple[tuple[int, int], ...] = ()) -> pd.DataFrame:
    """The pair events (module docstring) at instants in ``[start, progress)`` of the
    bucket's ``rows`` (both streams; ``frm``/``to`` their exact validity) among the rows
    ``among`` (a mask: the keys with a change), as encoded rows of columns ``names``;
    ``preserve``: the left / right stream's rows are NULL-padded where they have no pair
    (an outer join, :func:`_padded`); ``keys``: the key columns' positions (left, right)
    in each stream's columns (module docstring).

    Only pairs with an event in the range are built: a pair enters at the later of its
    rows' ``from`` and leaves at the earlier ``to``, so each event is found from the row
    whose ``from`` (``to``) it is -- an **anchor** with that instant in the range -- as the
    partners of its key valid at that instant (the partner's ``from`` at or before it
    through one ``searchsorted``, then its ``to`` checked). Work: the events, plus per
    anchor the partners of its key that left in the range before it; not |a| x |b|."""
    if any(preserve) and not keys:
        raise ValueError("an outer join's pairs need its key columns")
    right = rows["right"].to_numpy(bool)
    nk = rows["nk"].to_numpy(bool)
    # a row whose interval ends before ``start`` or begins at or after ``progress`` has no
    # pair with an event in the range, nor a padded one
    live = among & (frm < to) & (frm < progress) & (to >= start)
    a, b = np.flatnonzero(live & ~nk & ~right), np.flatnonzero(live & ~nk & right)
    code = np.full(len(rows), -1, np.int64)  # -1: a NULL key, of no pair
    code[a], code[b] = _key_codes(rows, a, b, keys)
    timeline = np.unique(np.concatenate([frm[live], to[live]]))
    by_from = {0: _ByKey(a, code[a], frm[a], timeline), 1: _ByKey(b, code[b], frm[b], timeline)}
    in_range = (frm >= start) & (frm < progress), (to >= start) & (to < progress)
    found = []  # (left rows, right rows, instant, sign)
    for side, (mine, other) in enumerate(((a, 1), (b, 0))):
        # enters at my ``from``: partners entered at or before it (strictly before, for
        # the right stream's anchors: a tie is the left anchor's) and still valid there
        anchors = mine[in_range[0][mine]]
        q, partner = by_from[other].upto(code[anchors], frm[anchors], inclusive=side == 0)
        starts = frm[anchors][q]
        held = to[partner] > starts
        found.append((anchors[q][held], partner[held], starts[held], 1, side))
        # leaves at my ``to``: partners entered before it and leaving no earlier (later,
        # for the right stream's anchors: a tie is the left anchor's)
        anchors = mine[in_range[1][mine]]
        q, partner = by_from[other].upto(code[anchors], to[anchors], inclusive=False)
        ends = to[anchors][q]
        held = to[partner] >= ends if side == 0 else to[partner] > ends
        found.append((anchors[q][held], partner[held], ends[held], -1, side))
    ja = np.concatenate([x if side == 0 else y for x, y, _, _, side in found])
    jb = np.concatenate([y if side == 0 else x for x, y, _, _, side in found])
    at = np.concatenate([t for _, _, t, _, _ in found]).astype(np.int64)
    sign = np.concatenate([np.full(len(x), s, np.int64) for x, _, _, s, _ in found])
    out = rows.iloc[ja][names].reset_index(drop=True)
    theirs = [c for c in names if c[:1] == "r" and c[1:].lstrip("n").isdigit()]  # b's
    for c in theirs:
        out[c] = rows[c].to_numpy()[jb]
    out["ts"] = at
    out["right"] = False
    out["pk"] = sign
    parts = [out]
    for side in (0, 1):
        if preserve[side]:
            alone = np.flatnonzero(live & (right == bool(side)))
            partners = b if side == 0 else a
            parts.append(_padded(rows, frm, to, code, alone, partners, timeline, start,
                                 progress, names))
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else out
    out["ph"] = np.arange(len(out), dtype=np.int64)
    return out


def _padded(rows: pd.DataFrame, frm, to, code, alone: np.ndarray, partners: np.ndarray,
            timeline: np.ndarray, start: int, progress: int,
            names: list[str]) -> pd.DataFrame:
    """The events of the rows ``alone`` (one preserved stream's) NULL-padded at instants in
    ``[start, progress)``: a row is padded while it is in its relation and no row of
    ``partners`` (the other stream's) of its key is -- entering (+1) where that begins,
    leaving (-1) where it ends. Each row's own rows only (the other stream's columns
    NULL); ``nk`` true marks a padded event, ``right`` its stream.

    ``C(t)``, how many partners of a key are valid at ``t``, is the same for all its rows:
    from two ``searchsorted`` (partners entered at or before ``t`` minus those left). A
    row's padding changes at its own ``from`` (to ``C(from) == 0``), at its ``to`` (from
    ``C`` just before it ``== 0``), and inside its interval where ``C`` becomes or stops
    being 0 -- only at a partner's ``from`` or ``to`` in the range."""
    entered = _ByKey(partners, code[partners], frm[partners], timeline)
    left = _ByKey(partners, code[partners], to[partners], timeline)

    def zero(c, t, inclusive):  # no partner valid at t (just before t: not inclusive)
        return entered.count(c, t, inclusive) - left.count(c, t, inclusive) == 0

    # the instants in the range where some key's count becomes or stops being 0
    pf = partners[(frm[partners] >= start) & (frm[partners] < progress)]
    pt = partners[(to[partners] >= start) & (to[partners] < progress)]
    z = pd.DataFrame({"c": np.concatenate([code[pf], code[pt]]),
                      "t": np.concatenate([frm[pf], to[pt]])}).drop_duplicates()
    zc, zt = z["c"].to_numpy(np.int64), z["t"].to_numpy(np.int64)
    now, before = zero(zc, zt, True), zero(zc, zt, False)
    turns = now != before
    zc, zt, dz = zc[turns], zt[turns], now[turns].astype(np.int64) - before[turns]
    # rows of those keys inside their interval there: entered before, leaving after
    q, row = _ByKey(alone, code[alone], frm[alone], timeline).upto(zc, zt, inclusive=False)
    inside = to[row] > zt[q]
    own = alone[(frm[alone] >= start) & (frm[alone] < progress)]
    own = own[zero(code[own], frm[own], True)]
    gone = alone[(to[alone] >= start) & (to[alone] < progress)]
    gone = gone[zero(code[gone], to[gone], False)]
    idx = np.concatenate([own, gone, row[inside]])
    out = rows.iloc[idx][names].reset_index(drop=True)
    out["ts"] = np.concatenate([frm[own], to[gone], zt[q][inside]]).astype(np.int64)
    out["nk"] = True
    out["pk"] = np.concatenate([np.ones(len(own), np.int64), -np.ones(len(gone), np.int64),
                                dz[q][inside]])
    return out
