"""The rules of a catalog write, shared by every backend.

What ``CREATE [OR REPLACE | IF NOT EXISTS]``, ``DROP`` and a lookup may do given what is
stored is the same whether the catalog is an SQLite file (:mod:`.store`) or a Hive metastore
(:mod:`.spark_metastore`); only how "read, check, write" is made atomic differs. So the
checks, and the errors with their stable codes and hints, live here once.
"""

from __future__ import annotations

from wavesql.errors import WaveSQLError, did_you_mean

from .objects import Definition


def what(kind: str | None) -> str:
    """``"stream"`` for ``"STREAM"``; ``"object"`` for no kind."""
    return kind.lower() if kind else "object"


def check_create_call(defn: object, replace: bool, if_not_exists: bool,
                      expected_version: int | None) -> None:
    """The arguments of ``Catalog.create`` that are wrong whatever is stored."""
    if not isinstance(defn, Definition):
        raise TypeError(f"expected a catalog definition, got {type(defn).__name__}")
    if replace and if_not_exists:
        raise WaveSQLError("INVALID_OPTION",
                           "OR REPLACE and IF NOT EXISTS cannot be used together",
                           hint="keep one: OR REPLACE overwrites, IF NOT EXISTS keeps")
    if expected_version is not None and not replace:
        raise ValueError("expected_version only applies with replace=True")


def decide_create(old: Definition | None, defn: Definition, *, replace: bool,
                  if_not_exists: bool, expected_version: int | None) -> Definition | None:
    """Given the live definition ``old`` (None if the name is free), return ``old`` when
    ``IF NOT EXISTS`` keeps it, None when the write may go ahead, or raise."""
    kind, noun, name = defn.kind, defn.kind.lower(), defn.name
    if old is None:
        if expected_version not in (None, 0):
            raise conflict(name, noun, expected_version, None)
        return None
    if old.kind != kind and (replace or if_not_exists):
        raise WaveSQLError(
            "WRONG_OBJECT_KIND", f"`{old.name}` is a {old.kind.lower()}, not a {noun}",
            hint=f"DROP {old.kind} {old.name} first, or choose another name",
        )
    if old.kind != kind:
        raise WaveSQLError(
            "DUPLICATE_OBJECT",
            f"cannot create {noun} `{name}`: a {old.kind.lower()} named `{old.name}` already "
            f"exists",
            hint=f"choose another name, or DROP {old.kind} {old.name} first",
        )
    if if_not_exists:
        return old
    if not replace:
        raise WaveSQLError(
            "DUPLICATE_OBJECT", f"{noun} `{old.name}` already exists",
            hint=f"use CREATE OR REPLACE {kind} {name} to replace it, or "
                 f"CREATE {kind} IF NOT EXISTS to keep the existing one",
        )
    if expected_version is not None and old.version != expected_version:
        raise conflict(old.name, noun, expected_version, old.version)
    return None


def conflict(name: str, noun: str, expected: int, found: int | None) -> WaveSQLError:
    state = "it no longer exists" if found is None else f"it is at version {found}"
    return WaveSQLError(
        "CONFLICT",
        f"{noun} `{name}` was changed concurrently: expected version {expected}, but {state}",
        hint="read it again (Catalog.get) and retry the change",
    )


def unknown(name: str, kind: str | None, candidates: list[str]) -> WaveSQLError:
    return WaveSQLError("UNKNOWN_OBJECT", f"unknown {what(kind)} `{name}`",
                        hint=did_you_mean(name, candidates, f"{what(kind)}s"))


def check_drop_kind(old: Definition, kind: str | None) -> None:
    if kind is not None and old.kind != kind:
        raise WaveSQLError(
            "WRONG_OBJECT_KIND", f"`{old.name}` is a {old.kind.lower()}, not a {kind.lower()}",
            hint=f"use DROP {old.kind} {old.name}",
        )


def check_required_kind(defn: Definition, name: str, kind: str | None,
                        candidates: list[str]) -> Definition:
    if kind is not None and defn.kind != kind:
        raise WaveSQLError(
            "WRONG_OBJECT_KIND", f"`{defn.name}` is a {defn.kind.lower()}, not a {kind.lower()}",
            hint=did_you_mean(name, candidates, f"{kind.lower()}s"),
        )
    return defn


def check_prune(keep_versions: int | None, keep_runs: int | None) -> None:
    """``Catalog.prune``'s arguments: each kept count at least 1 (the newest version of a
    name carries its numbering on after a DROP; the newest run keeps run ids from being
    used twice)."""
    for what, value in (("versions of each name", keep_versions),
                        ("runs of each file", keep_runs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise WaveSQLError("INVALID_OPTION", f"keep {value!r} {what}: at least 1 is kept",
                               hint="e.g. wavesql catalog prune --keep 10 --keep-runs 100")
