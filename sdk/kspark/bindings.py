"""Binding a topology's topic names to where their records live, when an app starts.

A topology names its topics (``builder.stream("orders")``); the deployment says where they
are, in :class:`~kspark.StreamsConfig`, as Kafka Streams leaves ``bootstrap.servers`` to
the config. :func:`bind_topology` is the one place that resolves the names: ``StreamsApp``
(and so ``kspark run``, ``kspark submit`` and the CLI's ``--config`` files) and the test
driver go through it.

Examples
--------
>>> from kspark import StreamsBuilder, StreamsConfig, Topic
>>> b = StreamsBuilder()
>>> b.stream("orders").to("checked")
>>> config = StreamsConfig(application_id="shop", data_dir="/data",
...                        topics={"checked": Topic.parquet("checked", "/out/checked")})
>>> bound = bind_topology(b.build(), config)
>>> [(s.topic_name, s.topic.format, s.topic.path) for s in bound.nodes()
...  if s.topic is not None]
[('orders', 'jsonl', '/data/orders'), ('checked', 'parquet', '/out/checked')]
>>> bind_topology(b.build(), StreamsConfig(application_id="shop"))
Traceback (most recent call last):
...
kspark.errors.UnboundTopicError: [KSPARK_UNBOUND_TOPIC] topics ['checked', 'orders'] ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from kspark._typing import TopicRole
from kspark.config import StreamsConfig
from kspark.errors import ConfigError, InvalidTopologyError, UnboundTopicError
from kspark.plan.nodes import (
    PATTERN_OPTION,
    DynamicSink,
    Node,
    Sink,
    Source,
    TableSource,
    Topic,
    TopicSpec,
)
from kspark.plan.topology import Topology, _new_parents
from kspark.plan.types import DYNAMIC, TypeDesc

__all__ = ["bind_dynamic_sinks", "bind_topology", "pattern_topic", "topic_names"]


def topic_names(topology: Topology) -> dict[str, TopicSpec | None]:
    """Each topic name of ``topology``, with the ``Topic`` the topology binds it to, if any.

    Parameters
    ----------
    topology
        The topology.

    Returns
    -------
    dict
        Topic name to its ``Topic``, or to None where the topology gives only the name.

    Raises
    ------
    InvalidTopologyError
        If the topology binds one name to two different Topics.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> b = StreamsBuilder()
    >>> b.stream("orders").to(Topic.jsonl("checked", "/out/checked"))
    >>> {name: topic and topic.format for name, topic in topic_names(b.build()).items()}
    {'orders': None, 'checked': 'jsonl'}
    """
    names: dict[str, TopicSpec | None] = {}
    for node in topology.nodes():
        if isinstance(node, Source) and node.pattern:
            continue  # not a name: bound by the config's bootstrap_servers or data_dir
        if isinstance(node, Source):
            parts = node.topic_parts()
        elif isinstance(node, TableSource | Sink):
            parts = ((node.topic_name, node.topic),)
        else:
            continue
        for name, topic in parts:
            known = names.get(name)
            if topic is not None and known is not None and known != topic:
                raise InvalidTopologyError(
                    f"topic {name!r} is bound to two different Topics in the topology: "
                    f"{known!r} and {topic!r} ({node.name}); give the Topic once, or use the "
                    "name and bind it in StreamsConfig(topics=...)",
                    processor=node.name,
                    topic=name,
                )
            names[name] = known or topic
    return names


def bind_topology(topology: Topology, config: StreamsConfig) -> Topology:
    """``topology`` with every topic name bound to a :class:`~kspark.Topic`.

    A name is bound, in this order, by a ``Topic`` given in the topology, by
    ``config.topics``, to a Kafka topic of that name on ``config.bootstrap_servers``
    (read from the earliest offset, as Kafka Streams' ``auto.offset.reset`` defaults),
    or to a directory of JSON lines in the envelope layout, ``<config.data_dir>/<name>``.

    Parameters
    ----------
    topology
        The topology, whose names may be bound or not.
    config
        The app's settings, with its bindings.

    Returns
    -------
    Topology
        The same topology (names, processors, stores) with every source and sink bound.

    Raises
    ------
    ConfigError
        If ``config.topics`` binds a name to another Topic than the topology does.
    UnboundTopicError
        If names are left unbound; the message lists all of them and the ways to bind them.

    Examples
    --------
    >>> from kspark import StreamsBuilder, StreamsConfig
    >>> b = StreamsBuilder()
    >>> b.stream("orders").to("checked")
    >>> config = StreamsConfig(application_id="shop", bootstrap_servers="kafka:9092")
    >>> [s.topic.option_dict() for s in bind_topology(b.build(), config).sinks]
    [{'kafka.bootstrap.servers': 'kafka:9092'}]
    """
    names = topic_names(topology)
    explicit = config.topic_bindings
    for name, topic in names.items():
        if topic is not None and name in explicit and explicit[name] != topic:
            raise ConfigError(
                f"topic {name!r} is bound twice: the topology says {topic!r}, "
                f"StreamsConfig(topics=...) says {explicit[name]!r}; pass the name alone to "
                "the DSL to bind it in the config, or drop it from topics",
                option="topics",
                topic=name,
            )
    unbound = sorted(
        name
        for name, topic in names.items()
        if topic is None
        and name not in explicit
        and config.bootstrap_servers is None
        and config.data_dir is None
    )
    if unbound:
        example = unbound[0]
        raise UnboundTopicError(
            f"topics {unbound} are not bound to where their records live. Bind them in "
            "StreamsConfig, in one of three ways: "
            f"topics={{{example!r}: Topic.jsonl({example!r}, '/path/{example}')}} (one by one), "
            "bootstrap_servers='host:9092' (every unbound name is a Kafka topic), or "
            "data_dir='/path' (every unbound name is a JSON-lines directory <data_dir>/<name>); "
            f"or pass a Topic to the DSL call, such as stream(Topic.jsonl({example!r}, ...))",
            option="topics",
            names=unbound,
        )

    patterns = sorted(
        node.topic_name
        for node in topology.sources()
        if isinstance(node, Source) and node.pattern and node.topic is None
    )
    if patterns and config.bootstrap_servers is None and config.data_dir is None:
        raise UnboundTopicError(
            f"the topic patterns {patterns} are not bound: a pattern names Kafka topics "
            "(StreamsConfig(bootstrap_servers='host:9092')) or folders under "
            "StreamsConfig(data_dir='/path'), and needs one of the two",
            option="bootstrap_servers",
            names=patterns,
        )

    def bound(name: str, topic: TopicSpec | None, role: TopicRole) -> TopicSpec:
        if role == "pattern":  # bound already where the test driver binds it
            return topic or pattern_topic(name, config.bootstrap_servers, config.data_dir)
        # the topology's Topic for the name, given at this node or at another one
        given = topic or names[name]
        if given is not None:
            return given
        if name in explicit:
            return explicit[name]
        if config.bootstrap_servers is not None:
            if role == "source":
                return Topic.kafka(
                    name, bootstrap_servers=config.bootstrap_servers, startingOffsets="earliest"
                )
            return Topic.kafka(name, bootstrap_servers=config.bootstrap_servers)
        assert config.data_dir is not None  # checked above
        return Topic.jsonl(name, config.data_dir.rstrip("/") + "/" + name)

    return _bind_dynamic(_with_schema_types(topology.with_topics(bound)), names, config)


def pattern_topic(pattern: str, bootstrap_servers: str | None, data_dir: str | None) -> TopicSpec:
    """The ``Topic`` of a source of every topic whose whole name matches ``pattern``:
    Kafka topics on ``bootstrap_servers`` (the source's ``subscribePattern``, from the
    earliest offset), else the folders of JSON lines under ``data_dir``.

    Parameters
    ----------
    pattern
        The regular expression.
    bootstrap_servers, data_dir
        The app's bindings; one must be given.

    Returns
    -------
    TopicSpec
        The topic, named by the pattern.

    Examples
    --------
    >>> pattern_topic("orders-.*", "k:9092", None).option_dict()["subscribePattern"]
    'orders-.*'
    >>> t = pattern_topic("orders-.*", None, "/data")
    >>> t.path, t.option_dict()
    ('/data', {'kspark.pattern': 'true'})
    """
    if bootstrap_servers is not None:
        return Topic.kafka(
            pattern,
            bootstrap_servers=bootstrap_servers,
            startingOffsets="earliest",
            subscribePattern=pattern,
        )
    assert data_dir is not None
    return attrs.evolve(Topic.jsonl(pattern, data_dir), options=((PATTERN_OPTION, "true"),))


def _bind_dynamic(
    topology: Topology, names: dict[str, TopicSpec | None], config: StreamsConfig
) -> Topology:
    """``topology`` whose sinks of record-picked topics (``to(topic_extractor)``) bind
    the names their records give as the app binds any name: the topology's ``Topic``
    objects and ``config.topics`` by name, then every other name by ``bootstrap_servers``
    or ``data_dir``."""
    if not any(isinstance(node, DynamicSink) for node in topology.ends):
        return topology
    by_name = {name: topic for name, topic in names.items() if topic is not None}
    by_name.update({n: t for n, t in config.topic_bindings.items() if n not in by_name})
    default: TopicSpec | None = None
    if config.bootstrap_servers is not None:
        default = Topic.kafka("*", bootstrap_servers=config.bootstrap_servers)
    elif config.data_dir is not None:
        default = Topic.jsonl("*", config.data_dir)
    return bind_dynamic_sinks(topology, tuple(by_name.values()), default)


def bind_dynamic_sinks(
    topology: Topology, bindings: tuple[TopicSpec, ...], default: TopicSpec | None
) -> Topology:
    """``topology`` whose :class:`~kspark.plan.nodes.DynamicSink` nodes not yet bound bind
    their names by ``bindings`` (by name), then by ``default`` (see the node).

    Parameters
    ----------
    topology
        The topology.
    bindings
        Topics bound by name.
    default
        How every other name is bound; None: it is not.

    Returns
    -------
    Topology
        The same topology with its dynamic sinks bound.
    """

    def remap(node: Node, new: Callable[[Node], Node]) -> Node:
        changes = _new_parents(node, new)
        if isinstance(node, DynamicSink) and not node.bound:
            changes.update(bindings=bindings, default=default, bound=True)
        return attrs.evolve(node, **changes)

    return topology.map_nodes(remap)


def _with_schema_types(topology: Topology) -> Topology:
    """``topology`` whose sources read the types their ``Topic`` declares, where the
    topology declares none (as ``stream(name, key_type=..., value_type=...)`` would)."""

    def declared(node: Source | TableSource) -> tuple[TypeDesc, TypeDesc]:
        assert node.topic is not None  # bound
        topics = [t for _, t in node.topic_parts()] if isinstance(node, Source) else [node.topic]
        out = []
        for what, have, schema in (
            ("key_type", node.key_type, _one_schema(node, topics, "key_type")),
            ("value_type", node.value_type, _one_schema(node, topics, "value_type")),
        ):
            assert have is not None  # a source always has its types (dynamic if undeclared)
            if schema is None or schema == have:
                out.append(have)
            elif have == DYNAMIC:
                out.append(schema)
            else:
                raise ConfigError(
                    f"{node.name}: topic {node.topic_name!r} declares {what}="
                    f"{schema.display()}, but the topology reads it with {what}="
                    f"{have.display()}; declare the type in one place, or make them the same",
                    option="topics",
                    topic=node.topic_name,
                    processor=node.name,
                )
        return out[0], out[1]

    def declares(topic: TopicSpec | None) -> bool:
        return topic is not None and (topic.key_type is not None or topic.value_type is not None)

    if not any(
        (isinstance(node, Source) and any(declares(t) for _, t in node.topic_parts()))
        or (isinstance(node, TableSource) and declares(node.topic))
        for node in topology.nodes()
    ):
        return topology
    return topology.with_source_types(declared)


def _one_schema(
    node: Source | TableSource, topics: Sequence[TopicSpec | None], what: str
) -> TypeDesc | None:
    """The ``key_type`` or ``value_type`` (``what``) that the topics of a source declare:
    a source of several topics reads them all with one type."""
    found = {getattr(t, what) for t in topics if t is not None} - {None}
    if len(found) > 1:
        raise ConfigError(
            f"{node.name}: its topics declare different {what}s "
            f"({', '.join(sorted(t.display() for t in found))}); a stream of several topics "
            "reads them all with one type",
            option="topics",
            processor=node.name,
        )
    return found.pop() if found else None
