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


def signed_pairs(rows: pd.DataFrame, frm: np.ndarray, to: np.ndarray, among: np.ndarray,
                 start: int, progress: int, names: list[str],
                 preserve: tuple[bool, bool] = (False, False),
                 keys: tuple[tuple[int, int], ...] = ()) -> pd.DataFrame:
    """The pair events (module docstring) at instants in ``[start, progress)`` of the
    bucket's ``rows`` (both streams; ``frm``/``to`` their exact validity) among the rows
    ``among`` (a mask: the keys with a change), as encoded rows of columns ``names``;
    ``preserve``: the left / right stream's rows are NULL-padded where they have no pair
    (an outer join, :func:`_padded`); ``keys``: the key columns' positions (left, right)
    in each stream's columns (module docstring)."""
    if any(preserve) and not keys:
        raise ValueError("an outer join's pairs need its key columns")
    right = rows["right"].to_numpy(bool)
    nk = rows["nk"].to_numpy(bool)
    live = among & (frm < to)
    a, b = np.flatnonzero(live & ~nk & ~right), np.flatnonzero(live & ~nk & right)
    on = ["sk", "sh"] + [f"k{j}" for j in range(len(keys))]
    m = _key_values(rows, a, False, keys).assign(a=a).merge(
        _key_values(rows, b, True, keys).assign(b=b), on=on)
    ia, ib = m["a"].to_numpy(np.int64), m["b"].to_numpy(np.int64)
    s = np.maximum(frm[ia], frm[ib])
    e = np.minimum(to[ia], to[ib])
    held = s < e
    ia, ib, s, e = ia[held], ib[held], s[held], e[held]
    enter = (s >= start) & (s < progress)
    leave = (e >= start) & (e < progress)
    sign = np.concatenate([np.ones(enter.sum(), np.int64), -np.ones(leave.sum(), np.int64)])
    ja, jb = np.concatenate([ia[enter], ia[leave]]), np.concatenate([ib[enter], ib[leave]])
    out = rows.iloc[ja][names].reset_index(drop=True)
    theirs = [c for c in names if c[:1] == "r" and c[1:].lstrip("n").isdigit()]  # b's
    for c in theirs:
        out[c] = rows[c].to_numpy()[jb]
    out["ts"] = np.concatenate([s[enter], e[leave]])
    out["right"] = False
    out["pk"] = sign
    parts = [out]
    for side, (mine, partner) in enumerate(((ia, ib), (ib, ia))):
        if preserve[side]:
            alone = np.flatnonzero(live & (right == bool(side)))
            parts.append(_padded(rows, frm, to, alone, mine, s, e, start, progress, names))
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else out
    out["ph"] = np.arange(len(out), dtype=np.int64)
    return out


def _padded(rows: pd.DataFrame, frm, to, alone: np.ndarray, mine: np.ndarray, s, e,
            start: int, progress: int, names: list[str]) -> pd.DataFrame:
    """The events of the rows ``alone`` (one preserved stream's) NULL-padded: a row is
    padded while it is in its relation with no pair (``mine``: its pairs' row of that
    stream, held over ``[s, e)``) -- entering (+1) where that begins, leaving (-1) where
    it ends. Each row's own rows only (the other stream's columns NULL); ``nk`` true marks
    a padded event, ``right`` its stream."""
    idx = np.concatenate([alone, alone, mine, mine])
    t = np.concatenate([frm[alone], to[alone], s, e])
    inside = np.concatenate([np.ones(len(alone), np.int64), -np.ones(len(alone), np.int64),
                             np.zeros(2 * len(mine), np.int64)])
    pairs = np.concatenate([np.zeros(2 * len(alone), np.int64), np.ones(len(mine), np.int64),
                            -np.ones(len(mine), np.int64)])
    ev = (pd.DataFrame({"i": idx, "t": t, "inside": inside, "pairs": pairs})
          .groupby(["i", "t"], sort=True).sum().reset_index())
    per_row = ev.groupby("i", sort=False)
    now = (per_row["inside"].cumsum() > 0) & (per_row["pairs"].cumsum() == 0)
    before = now.groupby(ev["i"]).shift(1, fill_value=False).astype(bool)
    change = now.astype(np.int64) - before.astype(np.int64)
    at = ev["t"].to_numpy(np.int64)
    keep = (change.to_numpy() != 0) & (at >= start) & (at < progress)
    out = rows.iloc[ev["i"].to_numpy()[keep]][names].reset_index(drop=True)
    out["ts"] = at[keep]
    out["nk"] = True
    out["pk"] = change.to_numpy()[keep]
    return out
