"""The planner: ``parse -> bind -> rewrite -> lower``, each a public function.

>>> from wavesql.planner import parse, bind, rewrite, lower   # doctest: +SKIP
>>> stmt = parse("SELECT * FROM trades")[0]                   # doctest: +SKIP
>>> df = lower(rewrite(bind(stmt, catalog, env)), runtime)    # doctest: +SKIP

``wavesql.Session`` wires these together; use the stages directly to inspect or test them.
"""

from wavesql.dialect import parse_statements as parse

from .bind import Environment, bind
from .lower import Runtime, lower, lower_relation
from .rewrite import rewrite

__all__ = ["parse", "bind", "rewrite", "lower", "lower_relation", "Environment", "Runtime"]
