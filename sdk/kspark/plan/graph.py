"""Walks of a DAG, shared by the plan's nodes and the compiler's stages.

Each kind of graph names its inputs (``Node.parents``, ``Stage.inputs``); every function
here takes that accessor, so one walk serves both, as Ibis's ``ibis/common/graph.py``
serves its expressions. Nodes are told apart by identity, not equality: two plan nodes
may compare equal (same fields) and still be two processors, and stages compare by
identity anyway. The walks are iterative, so a long chain of steps does not hit Python's
recursion limit. This module never imports pyspark.

Examples
--------
>>> inputs = {"sink": ["join"], "join": ["left", "right"], "left": ["src"], "right": ["src"],
...           "src": []}
>>> toposort(["sink"], inputs.__getitem__)
['src', 'left', 'right', 'join', 'sink']
>>> preorder(["sink"], inputs.__getitem__)
['sink', 'join', 'left', 'src', 'right', 'src']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

__all__ = ["children", "find", "map_nodes", "preorder", "toposort"]

T = TypeVar("T")
R = TypeVar("R")


def toposort(roots: Iterable[T], inputs: Callable[[T], Iterable[T]]) -> list[T]:
    """Every node reachable from ``roots``, once each, after all of its inputs.

    The order is that of a depth-first walk: roots in the order given, a node's inputs in
    the order it lists them.

    Parameters
    ----------
    roots
        Where the walk starts (a topology's sinks, an app's sink stages).
    inputs
        A node's inputs, the nodes it reads from.

    Returns
    -------
    list
        The nodes, inputs first.

    Examples
    --------
    >>> toposort([3], lambda i: range(i))  # i reads from every smaller number
    [0, 1, 2, 3]
    """
    done: set[int] = set()
    out: list[T] = []
    for root in roots:
        # (node, inputs expanded yet?) pairs: a node is emitted on its second visit
        stack: list[tuple[T, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            if expanded:
                done.add(id(node))
                out.append(node)
                continue
            stack.append((node, True))
            stack.extend((i, False) for i in reversed(tuple(inputs(node))) if id(i) not in done)
    return out


def preorder(roots: Iterable[T], inputs: Callable[[T], Iterable[T]]) -> list[T]:
    """The nodes of the trees below ``roots``: each node before its inputs, and a node
    shared by two paths once per path.

    This is the order in which Spark numbers the operators of a physical plan, where a
    shared input is planned once for each consumer.

    Parameters
    ----------
    roots
        Where the walk starts.
    inputs
        A node's inputs.

    Returns
    -------
    list
        The nodes, parents first, repeated where paths share them.

    Examples
    --------
    >>> preorder([2], lambda i: [i - 1, i - 1] if i else [])
    [2, 1, 0, 0, 1, 0, 0]
    """
    out: list[T] = []
    stack = list(reversed(tuple(roots)))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(tuple(inputs(node))))
    return out


def find(
    roots: Iterable[T],
    inputs: Callable[[T], Iterable[T]],
    match: Callable[[T], bool],
    *,
    stop_at: Callable[[T], bool] | None = None,
) -> T | None:
    """The first node reachable from ``roots`` for which ``match`` is true, or None.

    The walk visits each node once, depth first, and stops at the first match; a node for
    which ``stop_at`` is true (and ``match`` is not) ends its path: the walk does not go on
    into its inputs.

    Parameters
    ----------
    roots
        Where the walk starts.
    inputs
        A node's inputs.
    match
        What the walk looks for.
    stop_at
        Nodes whose inputs the walk leaves out; None walks the whole graph.

    Returns
    -------
    object or None
        The node found.

    Examples
    --------
    >>> inputs = {"sink": ["join"], "join": ["left", "right"], "left": ["src"],
    ...           "right": ["src"], "src": []}
    >>> find(["sink"], inputs.__getitem__, lambda n: n.startswith("r"))
    'right'
    >>> find(["sink"], inputs.__getitem__, lambda n: n == "src", stop_at=lambda n: n == "join")
    """
    seen: set[int] = set()
    todo = list(reversed(tuple(roots)))
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if match(node):
            return node
        if stop_at is None or not stop_at(node):
            todo.extend(reversed(tuple(inputs(node))))
    return None


def children(nodes: Sequence[T], inputs: Callable[[T], Iterable[T]]) -> dict[int, list[T]]:
    """Each node's consumers, keyed by ``id(node)``, in the order of ``nodes``.

    Parameters
    ----------
    nodes
        Every node of the graph, as :func:`toposort` gives them.
    inputs
        A node's inputs.

    Returns
    -------
    dict
        ``id(node)`` to the nodes that read from it (empty for a sink).

    Examples
    --------
    >>> nodes = toposort([3], lambda i: range(i))
    >>> kids = children(nodes, lambda i: range(i))
    >>> kids[id(nodes[0])], kids[id(nodes[3])]
    ([1, 2, 3], [])
    """
    out: dict[int, list[T]] = {id(node): [] for node in nodes}
    for node in nodes:
        for i in inputs(node):
            out[id(i)].append(node)
    return out


def map_nodes(
    roots: Iterable[T],
    inputs: Callable[[T], Iterable[T]],
    fn: Callable[[T, Callable[[T], R]], R],
) -> Callable[[T], R]:
    """Applies ``fn`` to every node below ``roots``, inputs first, and memoizes it.

    ``fn(node, result)`` gets a lookup ``result(input)`` for the results of the node's
    inputs, which are ready when ``fn`` runs. This is how a graph is rebuilt or lowered
    bottom-up, with every shared node handled once.

    Parameters
    ----------
    roots
        Where the walk starts.
    inputs
        A node's inputs.
    fn
        Makes a node's result from the node and its inputs' results.

    Returns
    -------
    Callable
        The lookup: a node below ``roots`` to its result.

    Examples
    --------
    >>> depth = map_nodes([3], lambda i: range(i), lambda i, d: 1 + max(map(d, range(i)), default=0))
    >>> depth(3), depth(0)
    (4, 1)
    """
    results: dict[int, R] = {}

    def result(node: T) -> R:
        return results[id(node)]

    for node in toposort(roots, inputs):
        results[id(node)] = fn(node, result)
    return result
