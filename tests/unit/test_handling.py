"""The worker's exception handling (KIP-1033) without Spark: the guard asks the handler
and acts on its typed answer."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from kspark.errors import (
    DeadLetterQueueProcessingExceptionHandler,
    DeadLetterRecord,
    ErrorHandlerContext,
    ProcessingExceptionHandler,
    Response,
)
from kspark_server.envelope import SideKind
from kspark_server.handling import (
    DeserializationFailed,
    Guard,
    HandlerFailed,
    ProcessingFailed,
    json_columns,
    side_json,
)
from kspark_server.spec import Handling, JsonSpec, KeyValue, PrimSpec

DYNAMIC = KeyValue(key=JsonSpec(), value=JsonSpec())

ROW = {"key": "k", "value": "0", "topic": "in", "partition": 1, "offset": 7, "timestamp": 5}


class Answer(ProcessingExceptionHandler):
    def __init__(self, response: Any) -> None:
        self.response = response
        self.contexts: list[ErrorHandlerContext] = []

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        self.contexts.append(context)
        return self.response  # type: ignore[no-any-return]


def _fail(handler: Answer) -> Guard:
    guard = Guard(Handling(processing=handler, subtopology=2))
    ok, _ = guard.call("P", lambda v: 1 / int(v), ("0",), ROW)
    assert not ok
    return guard


def test_continue_counts_the_record_as_dropped() -> None:
    handler = Answer(Response.continue_())
    guard = _fail(handler)
    (ctx,) = handler.contexts
    assert (ctx.topic, ctx.partition, ctx.offset, ctx.task_id) == ("in", 1, 7, "2_1")
    (row,) = guard.side_rows("c")
    assert row["kind"] is SideKind.DROPPED and row["count"] == 1
    assert json.loads(side_json(row))["kind"] == "dropped"


def test_resume_emits_dead_letter_rows() -> None:
    guard = _fail(Answer(Response.resume([DeadLetterRecord(value="v")])))
    (row,) = guard.side_rows("c")
    assert row["kind"] is SideKind.DLQ and row["dlq_value"] == '"v"' and row["dlq_key"] == '"k"'


def test_fail_stops_the_app() -> None:
    with pytest.raises(ProcessingFailed, match="answered FAIL"):
        _fail(Answer(Response.fail()))


@pytest.mark.parametrize(
    "answer", ["CONTINUE", SimpleNamespace(action="CONTINUE")], ids=["string", "look-alike"]
)
def test_an_answer_that_is_not_a_response_is_refused(answer: Any) -> None:
    with pytest.raises(HandlerFailed, match="not a Response"):
        _fail(Answer(answer))


def test_a_made_up_action_is_refused_when_the_response_is_built() -> None:
    with pytest.raises(ValueError, match="not a valid Action"):
        Response("SKIP")  # type: ignore[arg-type]


def test_resume_without_dead_letters_still_counts_the_record() -> None:
    # a resume with no dead-letter records drops the record: it must be counted
    (row,) = _fail(Answer(Response.resume([]))).side_rows("c")
    assert row["kind"] is SideKind.DROPPED and row["count"] == 1
    assert row["reason"] == "processing-error"


def test_an_operator_drop_is_counted_or_dead_lettered_with_its_reason() -> None:
    counted = Guard(Handling(subtopology=1))
    counted.drop("J", "1_0", "null-key", ROW, ("k", "v"))
    (row,) = counted.side_rows("c")
    assert (row["kind"], row["processor"], row["reason"]) == (SideKind.DROPPED, "J", "null-key")
    dead = Guard(Handling(subtopology=1, dead_letter_dropped=True))
    dead.drop("J", "1_0", "null-key", ROW, ("k", "v"))
    (row,) = dead.side_rows("c")
    assert (row["kind"], row["reason"], row["src_offset"]) == (SideKind.DLQ, "null-key", 7)
    assert row["exception_class"] == "kspark_server.handling.DroppedRecord"
    assert "J dropped the record: a record with a null key" in row["exception_message"]
    assert json.loads(row["dlq_value"]) == "v"


# -- dead letters of dynamic values: the JSON of the value, not a JSON string of it -----
DYNAMIC_ROW = {**ROW, "key": '"k"', "value": '{"n": 2, "tags": ["a"]}'}


def test_a_dynamic_dead_letter_holds_the_json_of_the_value() -> None:
    # the built-in dead-letter handlers pass the stored record on (source_raw_*), which
    # for a dynamic key or value is its JSON text already
    guard = Guard(
        Handling(processing=DeadLetterQueueProcessingExceptionHandler()),
        json_columns(SimpleNamespace(input=DYNAMIC)),
    )
    ok, _ = guard.call("P", lambda v: 1 / 0, ({"n": 2, "tags": ["a"]},), DYNAMIC_ROW)
    assert not ok
    (row,) = guard.side_rows("c")
    assert json.loads(row["dlq_key"]) == "k"
    assert json.loads(row["dlq_value"]) == {"n": 2, "tags": ["a"]}


def test_a_dropped_dynamic_record_and_a_given_value_are_encoded_once() -> None:
    guard = Guard(Handling(dead_letter_dropped=True), json_columns(SimpleNamespace(stream=DYNAMIC)))
    guard.drop("J", "0_0", "null-key", DYNAMIC_ROW)  # the stored record
    guard.drop("J", "0_0", "null-key", DYNAMIC_ROW, ("k", '{"n": 2, "tags": ["a"]}'))
    guard.drop("J", "0_0", "null-key", DYNAMIC_ROW, ("k", "plain text"))  # a Python str
    values = [json.loads(r["dlq_value"]) for r in guard.side_rows("c")]
    assert values == [{"n": 2, "tags": ["a"]}, {"n": 2, "tags": ["a"]}, "plain text"]


def test_json_columns_of_a_join_name_the_tables_value_column() -> None:
    typed = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
    spec = SimpleNamespace(stream=typed, table=DYNAMIC)
    assert json_columns(spec) == {"key", "ks_tvalue"}
    assert json_columns(SimpleNamespace(input=typed, output=DYNAMIC), output=True) == {
        "key",
        "value",
    }


def test_a_dynamic_string_read_without_its_quotes_is_a_json_string() -> None:
    # Spark's JSON reader hands {"value": "abc"} over as the text abc
    guard = Guard(Handling(dead_letter_dropped=True), json_columns(SimpleNamespace(input=DYNAMIC)))
    guard.drop("J", "0_0", "null-key", {**ROW, "key": "k", "value": "abc"})
    (row,) = guard.side_rows("c")
    assert (json.loads(row["dlq_key"]), json.loads(row["dlq_value"])) == ("k", "abc")


def test_a_task_id_names_the_task_not_its_task_key() -> None:
    """A record's ``ks_task`` is its operator's task key (:mod:`kspark_server.placement`),
    one of several per task when several operators share the grouped runner: the task id
    a handler sees is ``<sub-topology>_<task>`` whichever the key."""
    from kspark_server import placement

    guard = Guard(Handling(subtopology=0))
    for operator in range(3):
        key = placement.task_keys(4, operator)[2]
        assert guard.task_id({**ROW, "ks_task": key}) == "0_2"


def _refuse(text: Any) -> Any:
    raise ValueError(f"refused {text!r}")


@pytest.mark.parametrize(
    ("kdec", "vdec", "origin"), [(_refuse, str, "key"), (str, _refuse, "value")]
)
def test_a_refused_decode_names_the_part_that_failed(kdec: Any, vdec: Any, origin: str) -> None:
    """The error names the key when the key's class refused it, the value otherwise."""
    guard = Guard(Handling(subtopology=0))
    with pytest.raises(DeserializationFailed, match=f"as its declared {origin} type"):
        guard.decode("P", kdec, vdec, ROW)
