"""The planner: ``parse -> bind -> optimize -> lower``, each a public function.

>>> from wavesql.planner import parse, bind, optimize, lower   # doctest: +SKIP
>>> stmt = parse("SELECT * FROM trades")[0]                   # doctest: +SKIP
>>> df = lower(optimize(bind(stmt, catalog, env)), runtime)    # doctest: +SKIP

``wavesql.Session`` wires these together; use the stages directly to inspect or test them.
"""

from wavesql.dialect import parse_statements as parse

from .bind import Environment, bind
from .lower import Runtime, lower, lower_relation
from .optimize import optimize

__all__ = ["parse", "bind", "optimize", "lower", "lower_relation", "Environment", "Runtime"]
