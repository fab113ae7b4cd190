"""Checked by mypy --strict: the ends of a stream (``foreach``, ``print``,
``to(topic_extractor)``) and streams of several topics or a pattern. Each
``# type: ignore[code]`` marks a line mypy must reject."""

from __future__ import annotations

import re
from typing import Any, assert_type

from kspark import KStream, Printed, RecordContext, StreamsBuilder, Topic

b = StreamsBuilder()
orders = b.stream("orders", key_type=str, value_type=int)


def act(key: str, value: int) -> None: ...
def act_on_text(key: str, value: str) -> None: ...
def shown(key: str, value: int) -> str:
    return f"{key}:{value}"


def shown_text(key: str, value: str) -> str:
    return value


def region(key: str, value: int, ctx: RecordContext) -> str:
    return f"{ctx.topic}-{value % 2}"


def not_a_name(key: str, value: int, ctx: RecordContext) -> int:
    return value


assert_type(orders.foreach(act), None)
orders.foreach(lambda k, v: print(k.upper(), v + 1))
orders.foreach(act_on_text)  # type: ignore[arg-type]

orders.print(Printed.to_sysout())
orders.print(Printed.to_file("/tmp/orders.txt").with_label("orders"), label="o")
orders.print(Printed.to_sysout().with_key_value_mapper(shown))
orders.print(Printed.to_sysout().with_key_value_mapper(shown_text))  # type: ignore[arg-type]
orders.print("stdout")  # type: ignore[arg-type]

orders.to(region)
orders.to(lambda k, v, ctx: f"{ctx.topic}-{k}")
orders.to(not_a_name)  # type: ignore[arg-type]

assert_type(b.stream(["eu", "us"], key_type=str, value_type=int), KStream[str, int])
assert_type(b.stream([Topic.jsonl("eu", "/eu"), "us"], value_type=int), KStream[Any, int])
assert_type(b.stream(re.compile("orders-.*")), KStream[Any, Any])
byte_pattern = re.compile(b"orders-.*")
b.stream(byte_pattern)  # type: ignore[arg-type]
