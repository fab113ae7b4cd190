"""Type specs: how a key or value column becomes a Python object and back.

Every operator spec says the types of the records it takes and gives with these
(:mod:`kspark_server.codec` reads them); they are the one part of the contract that
knows nothing of operators.
"""

from __future__ import annotations

import dataclasses

from kspark_server.contract.version import SpecError

__all__ = [
    "ArrowValues",
    "JsonSpec",
    "KeyValue",
    "ListSpec",
    "MapSpec",
    "PrimSpec",
    "RecordSpec",
    "TypeSpec",
    "check_type",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrimSpec:
    """A primitive: ``spark`` is its Spark type name (``long``, ``decimal(38,18)``...)."""

    spark: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListSpec:
    """A list of ``element``."""

    element: TypeSpec

    def __post_init__(self) -> None:
        check_type(self.element, "list element")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapSpec:
    """A dict of ``key`` to ``value``."""

    key: TypeSpec
    value: TypeSpec

    def __post_init__(self) -> None:
        check_type(self.key, "map key")
        check_type(self.value, "map value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordSpec:
    """A dataclass or attrs class: ``fields`` are ``(attribute name, type spec)``."""

    cls: type
    fields: tuple[tuple[str, TypeSpec], ...]

    def __post_init__(self) -> None:
        for name, t in self.fields:
            check_type(t, f"{self.cls.__qualname__}.{name}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JsonSpec:
    """A dynamic value: any JSON-compatible Python value (None, bool, int, float, str, list,
    dict), carried as JSON text in a Spark ``string`` column. ``shape`` is ``any``, or
    ``dict`` or ``list`` when declared as such."""

    shape: str = "any"

    def __post_init__(self) -> None:
        if self.shape not in ("any", "dict", "list"):
            raise SpecError(f"unknown dynamic shape {self.shape!r}")


TypeSpec = PrimSpec | ListSpec | MapSpec | RecordSpec | JsonSpec


def check_type(t: object, where: str) -> None:
    if not isinstance(t, TypeSpec):
        raise SpecError(f"{where}: not a type spec: {t!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyValue:
    """The key and value types of a stream."""

    key: TypeSpec
    value: TypeSpec

    def __post_init__(self) -> None:
        check_type(self.key, "key")
        check_type(self.value, "value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArrowValues:
    """The values of a vectorized step, which take and give whole Arrow columns: their
    type before the step and after it, each as a type spec and as its Spark type in JSON
    (the Arrow type comes from it)."""

    before: TypeSpec
    before_spark: str
    after: TypeSpec
    after_spark: str

    def __post_init__(self) -> None:
        check_type(self.before, "vectorized step input")
        check_type(self.after, "vectorized step output")
