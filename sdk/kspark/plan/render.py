"""A topology in words and pictures: ``describe()`` text, SVG, Mermaid and Graphviz DOT.

Processor names may be any non-empty string, so each format escapes them its own way, and
the Mermaid ids made from them are injective (two names never share a box).

The SVG is self-contained and drawn without Graphviz: notebooks and GitHub show SVG
directly, while Mermaid needs a JavaScript renderer (GitHub does not render Mermaid inside
notebooks) and DOT needs the ``dot`` binary. The layout is a plain layered drawing, which
suits Kafka Streams topologies (mostly chains, a few joins, branches and merges):

- a node's column is one more than its deepest parent's; a source sits just left of its
  first consumer, so a table read by a join late in a chain does not stretch across it;
- a column's nodes are ordered by the mean row of their parents, then by creation order;
- edges are Bezier curves from a parent's right side to a child's left side.
"""

from __future__ import annotations

from html import escape
from typing import Protocol

from kspark.plan import graph
from kspark.plan.nodes import DynamicSink, Node, Sink, Source, TableSource
from kspark.plan.processing import is_global_source

__all__ = ["describe", "topology_dot", "topology_mermaid", "topology_svg"]


class Topology(Protocol):
    """What the renderers read of a :class:`kspark.plan.topology.Topology` (a protocol, so
    that the topology can import its renderers without a circle)."""

    def nodes(self) -> tuple[Node, ...]: ...

    def subtopologies(self) -> list[list[Node]]: ...


def _parents(node: Node) -> tuple[Node, ...]:
    return node.parents


def _children(nodes: tuple[Node, ...]) -> dict[int, list[Node]]:
    return graph.children(nodes, _parents)


def _is_topic(node: Node) -> bool:
    return isinstance(node, Source | TableSource | Sink)


def _topic_name(node: Node) -> str:
    assert isinstance(node, Source | TableSource | Sink)
    return node.topic_name


def _describe_line(node: Node) -> str:
    if isinstance(node, Source) and node.pattern:
        return f"Source: {node.name} (topics: {node.topic_name})"
    if isinstance(node, Source):
        return f"Source: {node.name} (topics: [{', '.join(n for n, _ in node.topic_parts())}])"
    if isinstance(node, TableSource):
        return f"Source: {node.name} (topics: [{node.topic_name}])"
    if isinstance(node, Sink):
        return f"Sink: {node.name} (topic: {node.topic_name})"
    if isinstance(node, DynamicSink):
        extractor = getattr(node.extractor, "__qualname__", type(node.extractor).__qualname__)
        return f"Sink: {node.name} (extractor: {extractor})"
    line = f"Processor: {node.name} (stores: [{', '.join(node.shown_stores())}])"
    # what a node compiles to, where that is worth saying (aggregations)
    operator = getattr(node, "operator", None)
    return f"{line} [operator: {operator}]" if operator else line


def describe(topology: Topology) -> str:
    """The text of :meth:`Topology.describe`, in the layout of Kafka Streams'.

    Parameters
    ----------
    topology
        A built topology.

    Returns
    -------
    str
        One block per sub-topology, one line per processor with its edges.
    """
    children = _children(topology.nodes())
    lines = ["Topologies:"]
    for i, group in enumerate(topology.subtopologies()):
        if all(is_global_source(n) for n in group):
            # Kafka Streams' words: every task reads the store, none runs for it
            lines.append(f"   Sub-topology: {i} for global store (will not generate tasks)")
        else:
            lines.append(f"   Sub-topology: {i}")
        for n in group:
            lines.append(f"    {_describe_line(n)}")
            # a global source reaches its readers through the store, not an edge
            kids = [] if is_global_source(n) else children[id(n)]
            parents = [p for p in n.parents if not is_global_source(p)]
            if kids:
                lines.append(f"      --> {', '.join(c.name for c in kids)}")
            if parents:
                lines.append(f"      <-- {', '.join(p.name for p in parents)}")
    return "\n".join(lines)


# -- Mermaid -----------------------------------------------------------------------------


def _mermaid_id(name: str) -> str:
    """An injective Mermaid node id: ASCII letters and digits stay, ``_`` doubles, and
    every other character becomes ``_<hex code>_``. The ``n`` prefix keeps ids clear of
    Mermaid's keywords (``end``) and of edge syntax (an id starting with ``o`` or ``x``)."""
    out = ["n"]
    for c in name:
        if c.isascii() and c.isalnum():
            out.append(c)
        elif c == "_":
            out.append("__")
        else:
            out.append(f"_{ord(c):x}_")
    return "".join(out)


def _mermaid_text(text: str) -> str:
    """``text`` for a quoted Mermaid label: characters that Mermaid or its HTML labels
    would read as syntax become entity codes, and a line break becomes ``<br/>``."""
    out = []
    for c in text:
        if c == "\n":
            out.append("<br/>")
        elif c.isalnum() or c in " _-.,:/+=@":
            out.append(c)
        else:
            out.append(f"#{ord(c)};")
    return "".join(out)


def topology_mermaid(topology: Topology) -> str:
    """The topology as a Mermaid flowchart (left to right), for notebooks and docs.

    Parameters
    ----------
    topology
        A built topology.

    Returns
    -------
    str
        A ``flowchart LR`` with one node per processor; topics are cylinders.
    """
    lines = ["flowchart LR"]
    for n in topology.nodes():
        label = _mermaid_text(n.name)
        if _is_topic(n):
            label += f"<br/>topic: {_mermaid_text(_topic_name(n))}"
        elif n.stateful:
            label += f"<br/>stores: {_mermaid_text(', '.join(n.stores()))}"
        shape = ("[(", ")]") if _is_topic(n) else ("[", "]")
        lines.append(f'    {_mermaid_id(n.name)}{shape[0]}"{label}"{shape[1]}')
    for n in topology.nodes():
        for p in n.parents:
            lines.append(f"    {_mermaid_id(p.name)} --> {_mermaid_id(n.name)}")
    return "\n".join(lines)


# -- Graphviz DOT ------------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """``text`` as a DOT quoted string: backslashes and quotes escaped, a line break as
    DOT's ``\\n`` (which labels draw as a line break). The mapping is injective, so the
    quoted names also serve as node ids."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def topology_dot(topology: Topology) -> str:
    """The topology in Graphviz DOT (left to right).

    Parameters
    ----------
    topology
        A built topology.

    Returns
    -------
    str
        A ``digraph``; topics are cylinders, processors boxes.
    """
    lines = ["digraph topology {", "  rankdir=LR;"]
    for n in topology.nodes():
        shape = "cylinder" if _is_topic(n) else "box"
        label = n.name + (f"\nstores: {', '.join(n.stores())}" if n.stateful else "")
        lines.append(f"  {_dot_string(n.name)} [shape={shape}, label={_dot_string(label)}];")
    for n in topology.nodes():
        for p in n.parents:
            lines.append(f"  {_dot_string(p.name)} -> {_dot_string(n.name)};")
    lines.append("}")
    return "\n".join(lines)


# -- SVG ---------------------------------------------------------------------------------

_CHAR_W = 7.3  # width of one character of the 12px monospace font
_LINE_H = 16
_PAD_X, _PAD_Y = 10, 8
_GAP_X, _GAP_Y = 48, 18
_MARGIN = 12

# fill and stroke per kind of node: topics (sources and sinks), stateful processors, others
_STYLE = {
    "topic": ("#e3f2fd", "#1e88e5"),
    "stateful": ("#fff3e0", "#fb8c00"),
    "stateless": ("#f5f5f5", "#757575"),
}


def _shown(text: str) -> str:
    """``text`` with the characters that are not printable (a line break, which SVG text
    would fold into a space, or a control character, which XML forbids even escaped)
    written as their Python escapes."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def _svg_text(text: str) -> str:
    """``text`` for SVG: shown printable, with XML's special characters as entities."""
    return escape(_shown(text))


def _lines(node: Node) -> list[str]:
    if isinstance(node, Source | TableSource):
        kind = "Table source" if isinstance(node, TableSource) else "Source"
        return [node.name, f"{kind} · topic: {node.topic_name}"]
    if isinstance(node, Sink):
        return [node.name, f"Sink · topic: {node.topic_name}"]
    stores = node.stores()
    return [node.name, f"stores: {', '.join(stores)}"] if stores else [node.name]


def _kind(node: Node) -> str:
    if _is_topic(node):
        return "topic"
    return "stateful" if node.stateful else "stateless"


def _columns(nodes: tuple[Node, ...]) -> dict[str, int]:
    col: dict[str, int] = {}
    for n in nodes:  # parents first
        col[n.name] = 1 + max((col[p.name] for p in n.parents), default=-1)
    children = _children(nodes)
    for n in nodes:
        if not n.parents and children[id(n)]:
            col[n.name] = max(col[n.name], min(col[c.name] for c in children[id(n)]) - 1)
    return col


def _rows(by_col: dict[int, list[Node]]) -> dict[str, float]:
    """Each node's row (a float: a join sits between its parents). A node goes to the
    mean row of its parents, pushed down below the node placed before it in its column;
    a node without parents (a source) goes above the others of its column, so a chain
    stays straight."""
    row: dict[str, float] = {}
    for c in sorted(by_col):
        placed: list[float] = []
        fed = [n for n in by_col[c] if n.parents]
        fed.sort(key=lambda n: (sum(row[p.name] for p in n.parents) / len(n.parents), n.seq))
        for n in fed:
            want = sum(row[p.name] for p in n.parents) / len(n.parents)
            row[n.name] = max(want, placed[-1] + 1) if placed else want
            placed.append(row[n.name])
        top = min(placed) if placed else 1.0
        for n in sorted((n for n in by_col[c] if not n.parents), key=lambda n: -n.seq):
            top -= 1
            row[n.name] = top
    low = min(row.values())
    return {name: r - low for name, r in row.items()}


def topology_svg(topology: Topology) -> str:
    """The topology drawn as an SVG document (a string), left to right.

    Sources and sinks are blue and show their topic, stateful processors are orange and
    list their stores, stateless processors are grey. Each box's tooltip is its line of
    ``Topology.describe()``.

    Parameters
    ----------
    topology
        A built topology.

    Returns
    -------
    str
        An ``<svg>`` element with its size set, ready for ``IPython.display.SVG`` or a file.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> b = StreamsBuilder()
    >>> b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).filter(
    ...     lambda k, v: v > 0
    ... ).to(Topic.jsonl("out", "/tmp/out"))
    >>> svg = topology_svg(b.build())
    >>> svg.startswith("<svg") and "KSTREAM-FILTER-0000000001" in svg
    True
    >>> svg.count("marker-end")  # two edges: source -> filter -> sink
    2
    """
    nodes = topology.nodes()
    col = _columns(nodes)
    by_col: dict[int, list[Node]] = {}
    for n in nodes:
        by_col.setdefault(col[n.name], []).append(n)
    row = _rows(by_col)
    size = {n.name: (_box_w(n), _LINE_H * len(_lines(n)) + 2 * _PAD_Y) for n in nodes}
    col_w = {c: max(size[n.name][0] for n in members) for c, members in by_col.items()}
    row_h = max(h for _, h in size.values()) + _GAP_Y
    rows = max(row.values()) + 1
    height = rows * row_h - _GAP_Y + 2 * _MARGIN
    pos: dict[str, tuple[float, float]] = {}  # top-left corner of each box
    x = float(_MARGIN)
    for c in sorted(by_col):
        for n in by_col[c]:
            w, h = size[n.name]
            top = _MARGIN + row[n.name] * row_h
            pos[n.name] = (x + (col_w[c] - w) / 2, top + (row_h - _GAP_Y - h) / 2)
        x += col_w[c] + _GAP_X
    width = x - _GAP_X + _MARGIN

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="12">',
        '<defs><marker id="kspark-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
    ]
    for n in nodes:
        for p in n.parents:
            px, py = pos[p.name]
            pw, ph = size[p.name]
            cx, cy = pos[n.name]
            ch = size[n.name][1]
            x1, y1, x2, y2 = px + pw, py + ph / 2, cx, cy + ch / 2
            bend = max((x2 - x1) / 2, 20.0)
            out.append(
                f'<path d="M {x1:.1f} {y1:.1f} C {x1 + bend:.1f} {y1:.1f}, {x2 - bend:.1f} '
                f'{y2:.1f}, {x2:.1f} {y2:.1f}" fill="none" stroke="#555" stroke-width="1.3" '
                'marker-end="url(#kspark-arrow)"/>'
            )
    for n in nodes:
        bx, by = pos[n.name]
        w, h = size[n.name]
        fill, stroke = _STYLE[_kind(n)]
        radius = 12 if _kind(n) == "topic" else 4
        out.append(f"<g><title>{_svg_text(_describe_line(n))}</title>")
        out.append(
            f'<rect x="{bx:.1f}" y="{by:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{radius}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>'
        )
        for i, line in enumerate(_lines(n)):
            weight = ' font-weight="bold"' if i == 0 else ' fill="#333"'
            out.append(
                f'<text x="{bx + w / 2:.1f}" y="{by + _PAD_Y + (i + 0.75) * _LINE_H:.1f}" '
                f'text-anchor="middle"{weight}>{_svg_text(line)}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _box_w(node: Node) -> float:
    return max(len(_shown(line)) for line in _lines(node)) * _CHAR_W + 2 * _PAD_X
