"""Finding one's way in a sqlglot tree: a node's depth, and a path to a node that can be
followed again in a copy of the tree.

Rules rewrite the deepest SELECT first (sorted by :func:`depth`), so that an inner query
is rewritten before the one that contains it; a rule that decides on the original tree
and rewrites a copy finds the node again with :func:`path_to` and :func:`follow`.

>>> from wavesql.dialect import parse_one
>>> tree = parse_one("SELECT * FROM (SELECT x FROM t) s")
>>> inner = list(tree.find_all(exp.Select))[1]
>>> depth(tree), depth(inner)
(0, 3)
>>> follow(tree.copy(), path_to(inner, tree)).sql()
'SELECT x FROM t'
"""

from __future__ import annotations

from sqlglot import exp


def depth(node: exp.Expression) -> int:
    """How many parents ``node`` has."""
    count = 0
    while node.parent is not None:
        node, count = node.parent, count + 1
    return count


def path_to(target: exp.Expression, root: exp.Expression) -> list:
    """The (arg key, index) steps from ``root`` down to ``target``."""
    steps = []
    node = target
    while node is not root:
        steps.append((node.arg_key, node.index))
        node = node.parent
    return steps[::-1]


def follow(root: exp.Expression, path: list) -> exp.Expression:
    """The node :func:`path_to` led to, in ``root`` (a copy of the tree it was taken in)."""
    node = root
    for key, index in path:
        child = node.args[key]
        node = child[index] if isinstance(child, list) else child
    return node
