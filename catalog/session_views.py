"""Temporary views over catalog objects: ``CREATE TEMPORARY VIEW g AS SELECT ... FROM ppg``.

Spark keeps a temporary view as the plan of its query, but a catalog stream or signal is
only visible to Spark while a WaveSQL statement runs: a Spark temporary view over one would
point at a name that is gone. So a temporary view whose query reads catalog objects is kept
here, for the session, as a :class:`~.objects.ViewDef` -- bound again wherever it is read,
like a catalog view -- and never in the catalog file. Temporary views shadow catalog objects
of the same name while the session lasts, as Spark's shadow tables; a temporary view that
reads only Spark tables stays Spark's own.

:class:`WithTempViews` is the catalog the planner sees: the catalog with the session's
temporary views laid over it (``get``, ``require``, ``names``, ``__contains__``); every
other call goes to the catalog itself.
"""

from __future__ import annotations

from .objects import ViewDef, normalize_kind


class WithTempViews:
    """A catalog with this session's temporary views laid over it (module docstring)."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.temp_views: dict[str, ViewDef] = {}  # lower-case name -> definition

    def __getattr__(self, attr):  # create, drop, list, history, runs: the catalog's
        return getattr(self.catalog, attr)

    @staticmethod
    def _views_wanted(kind) -> bool:
        return kind is None or normalize_kind(kind) == "VIEW"

    def get(self, name: str):
        view = self.temp_views.get(name.lower())
        return view if view is not None else self.catalog.get(name)

    def require(self, name: str, kind=None):
        view = self.temp_views.get(name.lower())
        if view is not None and self._views_wanted(kind):
            return view
        return self.catalog.require(name, kind)

    def names(self, kind=None) -> list[str]:
        own = [v.name for v in self.temp_views.values()] if self._views_wanted(kind) else []
        return sorted(set(self.catalog.names(kind)) | set(own))

    def __contains__(self, name: object) -> bool:
        return (isinstance(name, str) and name.lower() in self.temp_views) \
            or name in self.catalog

    def is_temporary(self, name: str) -> bool:
        return name.lower() in self.temp_views
