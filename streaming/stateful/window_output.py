"""The output streams of the window kernel: RSTREAM, ISTREAM and DSTREAM.

RSTREAM emits every result row; ISTREAM and DSTREAM emit what changed from the key's
previous instant, which the state keeps as ``last`` (each key's result at its latest final
instant) so that the next micro-batch can tell.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .window_columns import (concat_arrays, concat_columns, key_codes, key_columns, key_hash,
                             keys_from, np_column, take_keys, to_table)
from .window_types import Operator, Results


def present_only(last: pa.Table | None) -> pa.Table | None:
    if last is None or last.num_rows == 0:
        return last
    return last.filter(pa.array(np_column(last, "present")))


def emit(op: Operator, obs: dict, keys: list, last: pa.Table | None, final_lo, final_hi,
          s: int, final: bool) -> Results:
    """The rows ``op.output`` makes of the observations (present windows, or every
    observation with ``present``), given each key's previous result ``last``."""
    code, k, row = obs["code"], obs["k"], obs["row"]
    present = obs.get("present", np.ones(len(code), bool))
    values = obs["values"]
    out_keys = take_keys(keys, row)
    if op.output == "RSTREAM":
        idx = np.flatnonzero(present)
        return Results(k[idx] * s, np.full(len(idx), final),
                       take_keys(out_keys, idx), [(v[idx], m[idx]) for v, m in values])
    seq = _sequence(op, code, k, present, values, out_keys, last, final_lo, final_hi)
    code, k, present, values, out_keys, virtual = seq
    same_key = np.zeros(len(code), bool)
    same_key[1:] = code[1:] == code[:-1]
    prev_present = np.zeros(len(code), bool)
    prev_present[1:] = present[:-1] & same_key[1:]
    differs = np.zeros(len(code), bool)
    for v, m in values:
        d = np.zeros(len(code), bool)
        d[1:] = ~_equal(v[1:], m[1:], v[:-1], m[:-1])
        differs |= d
    real = ~virtual
    if op.output == "ISTREAM":
        emit = real & present & (~prev_present | differs)
        idx = np.flatnonzero(emit)
        src = idx
    else:  # DSTREAM: the previous result, at the instant it stopped holding
        emit = real & prev_present & (~present | differs)
        idx = np.flatnonzero(emit)
        src = idx - 1
    return Results(k[idx] * s, np.full(len(idx), final), take_keys(out_keys, src),
                   [(v[src], m[src]) for v, m in values])


def _equal(a, am, b, bm) -> np.ndarray:
    """Row values equal as a multiset difference sees them: NULL = NULL, NaN = NaN."""
    both_null = am & bm
    if a.dtype == object:  # arrays (a holistic aggregate's): equal element by element
        same = np.fromiter((_same_array(x, y) for x, y in zip(a, b)), bool, len(a))
    elif a.dtype.kind == "f":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    else:
        same = a == b
    return both_null | (~am & ~bm & same)


def _same_array(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind == "f" and y.dtype.kind == "f":
        return bool(np.array_equal(x, y, equal_nan=True))
    return len(x) == len(y) and bool(np.array_equal(x, y))


def _sequence(op: Operator, code, k, present, values, keys, last, final_lo, final_hi):
    """Each key's observations in instant order, after its previous result (``virtual``
    rows from ``last``), with the absences a slid window implies: a key present at ``k``
    and not at ``k + 1`` is observed absent there."""
    n_real = len(code)
    parts_code, parts_k, parts_present = [code], [k], [present]
    parts_values = [list(values)]
    parts_keys = [keys]
    parts_virtual = [np.zeros(n_real, bool)]
    if last is not None and last.num_rows:
        lk = keys_from(last, op.keys)
        both = concat_columns(keys, lk) if keys else []
        all_codes = key_codes(both, n_real + last.num_rows)
        # codes of the real observations must be comparable with the last rows' codes
        code = all_codes[:n_real]
        parts_code[0] = code
        parts_code.append(all_codes[n_real:])
        parts_k.append(np_column(last, "t"))
        parts_present.append(np_column(last, "present"))
        parts_values.append([(np_column(last, f"g{j}"), np_column(last, f"gn{j}"))
                             for j in range(len(op.aggregates))])
        parts_keys.append(lk)
        parts_virtual.append(np.ones(last.num_rows, bool))
    elif keys:
        code = key_codes(keys, n_real)
        parts_code[0] = code
    code = np.concatenate(parts_code)
    k = np.concatenate(parts_k)
    present = np.concatenate(parts_present)
    virtual = np.concatenate(parts_virtual)
    values = [(concat_arrays(*[p[j][0] for p in parts_values]),
               np.concatenate([p[j][1] for p in parts_values]))
              for j in range(len(op.aggregates))]
    keys = parts_keys[0]
    for extra in parts_keys[1:]:
        keys = concat_columns(keys, extra)
    if op.window == "SLIDE" and final_hi is not None:
        # absences: after each present observation whose next instant is not observed
        order = np.lexsort((k, code))
        code, k, present, virtual = code[order], k[order], present[order], virtual[order]
        values = [(v[order], m[order]) for v, m in values]
        keys = take_keys(keys, order)
        nxt_same = np.zeros(len(code), bool)
        nxt_same[:-1] = (code[1:] == code[:-1]) & (k[1:] == k[:-1] + 1)
        gap = present & ~nxt_same & (k + 1 <= final_hi)
        if final_lo is not None:
            gap &= k + 1 >= final_lo
        idx = np.flatnonzero(gap)
        if len(idx):
            code = np.concatenate([code, code[idx]])
            k = np.concatenate([k, k[idx] + 1])
            present = np.concatenate([present, np.zeros(len(idx), bool)])
            virtual = np.concatenate([virtual, np.zeros(len(idx), bool)])
            values = [(np.concatenate([v, v[idx]]), np.concatenate([m, m[idx]]))
                      for v, m in values]
            keys = concat_columns(keys, take_keys(keys, idx))
    # a key's previous result (virtual) first, then its observations in instant order
    order = np.lexsort((k, ~virtual, code)) if len(code) else np.zeros(0, np.int64)
    return (code[order], k[order], present[order], [(v[order], m[order]) for v, m in values],
            take_keys(keys, order), virtual[order])


def new_last(op: Operator, obs: dict, keys: list, last: pa.Table | None, final_hi,
              s: int) -> pa.Table | None:
    """Each key's result at its latest final observation (ISTREAM/DSTREAM diff against it
    in the next step); keys without a new observation keep theirs."""
    if op.output == "RSTREAM":
        return None
    code, k, row = obs["code"], obs["k"], obs["row"]
    present = obs.get("present", np.ones(len(code), bool))
    values = obs["values"]
    out_keys = take_keys(keys, row)
    seq = _sequence(op, code, k, present, values, out_keys, last, None, final_hi)
    code, k, present, values, out_keys, _ = seq
    if not len(code):
        return last
    is_last = np.ones(len(code), bool)
    is_last[:-1] = code[1:] != code[:-1]
    idx = np.flatnonzero(is_last)
    chosen = take_keys(out_keys, idx)
    cols = {**key_columns(chosen), "h": key_hash(chosen, len(idx)), "t": k[idx],
            "present": present[idx]}
    for j, (v, m) in enumerate(values):
        cols[f"g{j}"], cols[f"gn{j}"] = v[idx], m[idx]
    return to_table(cols)


def concat_results(parts: list[Results], op: Operator) -> Results:
    parts = [p for p in parts if len(p)]
    if not parts:
        return Results(np.zeros(0, np.int64), np.zeros(0, bool), [], [])
    if len(parts) == 1:
        return parts[0]
    keys = parts[0].keys
    for p in parts[1:]:
        keys = concat_columns(keys, p.keys)
    values = [(concat_arrays(*[p.values[j][0] for p in parts]),
               np.concatenate([p.values[j][1] for p in parts]))
              for j in range(len(op.aggregates))]
    return Results(np.concatenate([p.time for p in parts]),
                   np.concatenate([p.final for p in parts]), keys, values)
