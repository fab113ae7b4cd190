"""Which Spark partition runs which task: one task per partition.

A stateful operator groups records by task. Spark places a group in shuffle partition
``pmod(murmur3(group key), partitions)``, so grouping by the task number ``t`` itself put
several tasks in one partition and left others idle (with 4 tasks, only 2 of 4
partitions did work). So each task ``t`` is grouped under a *task key*: the smallest
``t + j * 2**12`` (``j >= 0``) that Spark's hash sends to partition ``t``. The task
number is the key's low 12 bits, and the key depends only on ``t`` and the number of
partitions, which an app's checkpoint fixes, so state stays under the same key across
restarts.

Examples
--------
>>> keys = task_keys(4)
>>> [pmod_hash_int(k, 4) for k in keys]
[0, 1, 2, 3]
>>> [task_of(k) for k in keys]
[0, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The most tasks an app can have (the task number is a task key's low 12 bits).
MAX_TASKS = 1 << 12

_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an ``int`` column: Murmur3 x86 32-bit of 4 bytes, as a signed
    32-bit int (``Murmur3_x86_32.hashInt``)."""
    return _fmix(_mix_h1(seed, _mix_k1(value)), 4)


def pmod_hash_int(value: int, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives an ``int`` group key."""
    return murmur3_int(value) % partitions


def task_keys(tasks: int, operator: int = 0) -> tuple[int, ...]:
    """The group key of each of ``tasks`` tasks, each landing in its own partition when
    the shuffle has ``tasks`` partitions.

    Several stateful operators grouped in one ``applyInPandasWithState`` (one per
    sub-topology, docs/design/sub-topologies.md) take distinct keys: operator ``i``'s
    task ``t`` is the ``i``-th key of the sequence ``t + j * 2**12`` that lands in
    partition ``t``, so the tasks of every operator numbered ``t`` share a partition, as
    Kafka Streams' tasks ``0_t``, ``1_t`` share a thread, and operator 0 keeps the keys
    of an app with one.

    >>> a, b = task_keys(4), task_keys(4, 1)
    >>> [pmod_hash_int(k, 4) for k in b], [task_of(k) for k in b], set(a) & set(b)
    ([0, 1, 2, 3], [0, 1, 2, 3], set())
    """
    found = _keys.get((tasks, operator))
    if found is None:
        found = _keys[(tasks, operator)] = _task_keys(tasks, operator)
    return found


#: task_keys' answers (a plain dict: kspark_server may be pickled by value, and a
#: functools.cache wrapper pickles by reference to a module the server may lack)
_keys: dict[tuple[int, int], tuple[int, ...]] = {}


def _task_keys(tasks: int, operator: int) -> tuple[int, ...]:
    if not 0 < tasks <= MAX_TASKS:
        raise ValueError(f"an app has 1 to {MAX_TASKS} partitions, not {tasks}")
    keys = []
    for t in range(tasks):
        k, found = t, -1
        while True:
            if pmod_hash_int(k, tasks) == t:
                found += 1
                if found == operator:
                    break
            k += MAX_TASKS
        keys.append(k)
    return tuple(keys)


def task_of(key: int) -> int:
    """The task number of a task key."""
    return int(key) % MAX_TASKS


# -- Spark's hash() of any column, for an engine that runs the operators without Spark ----
#
# Spark's ``hash`` expression is Murmur3 x86 32-bit with seed 42, applied to each value by
# its type and folded over the fields of a struct, the elements of an array and the
# entries of a map (the previous hash is the next one's seed); a null leaves the seed as
# it is. The in-process test driver places records in tasks with it, as ``pmod(hash(key),
# n)`` does on Spark (``kspark.compiler.lowering.stateful.task_column``).


def _mix_k1(k1: int) -> int:
    k1 = (k1 & _MASK) * _C1 & _MASK
    return _rotl(k1, 15) * _C2 & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = (h1 & _MASK) ^ k1
    return (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def _hash_long(value: int, seed: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _fmix(h1, 8)


def _hash_bytes(data: bytes, seed: int) -> int:
    # Spark's hashUnsafeBytes: whole little-endian words, then each remaining byte on its
    # own, as a signed int. A long value (a key of a MiB, hashed again by every operator
    # it passes) is hashed once per seed: the words' mixing in NumPy, the chain in a loop
    if len(data) < _LONG:
        return _hash_bytes_now(data, seed)
    found = _long_hashes.get((data, seed))
    if found is None:
        if len(_long_hashes) >= _LONG_KEPT:
            _long_hashes.clear()
        found = _long_hashes[(data, seed)] = _hash_bytes_now(data, seed)
    return found


#: values at least this long are hashed with NumPy, and their hashes kept
_LONG = 256
#: how many long values' hashes are kept (a plain dict, as ``_keys``)
_LONG_KEPT = 32
_long_hashes: dict[tuple[bytes, int], int] = {}


def _hash_bytes_now(data: bytes, seed: int) -> int:
    n = len(data)
    aligned = n - n % 4
    h1 = seed & _MASK
    if n >= _LONG:
        import numpy as np

        # the words' k1 mixing is independent per word; uint32 arithmetic wraps as Java's
        k = np.frombuffer(data, dtype="<u4", count=aligned // 4).astype(np.uint32)
        k *= np.uint32(_C1)
        k = (k << np.uint32(15)) | (k >> np.uint32(17))
        k *= np.uint32(_C2)
        for k1 in k.tolist():
            h1 ^= k1
            h1 = ((((h1 << 13) | (h1 >> 19)) & _MASK) * 5 + 0xE6546B64) & _MASK
    else:
        for i in range(0, aligned, 4):
            h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for i in range(aligned, n):
        b = data[i]
        h1 = _mix_h1(h1, _mix_k1(b - 256 if b > 127 else b))
    return _fmix(h1, n)


def _ieee_bits(value: float, fmt: str, nan: int) -> int:
    """The bits of ``value`` as Java's ``doubleToLongBits`` (``fmt`` ``"d"``) or
    ``floatToIntBits`` (``"f"``) gives them: every NaN as Java's canonical one (``nan``),
    and -0.0 as 0.0, which hashes alike."""
    import struct

    if value != value:
        return nan
    return int.from_bytes(struct.pack("<" + fmt, value or 0.0), "little", signed=True)


def _hash_double(value: float, seed: int) -> int:
    return _hash_long(_ieee_bits(value, "d", 0x7FF8000000000000), seed)


def _hash_float(value: float, seed: int) -> int:
    return murmur3_int(_ieee_bits(value, "f", 0x7FC00000), seed)


SparkHash = Callable[[Any, int], int]


def spark_hasher(spark_type: Any) -> SparkHash:
    """Spark's ``hash`` of a value of ``spark_type`` (Spark's JSON form of the type), as
    ``f(value, seed)``; values as Arrow gives them to Python (a struct as a dict, a map as
    pairs). A type Spark hashes otherwise (decimals, intervals) raises ``ValueError``.

    Examples
    --------
    >>> spark_hasher("integer")(7, 42) == murmur3_int(7)
    True
    >>> spark_hasher("string")("a", 42)
    1485273170
    """
    if isinstance(spark_type, str):
        if spark_type in ("integer", "short", "byte", "date"):
            return lambda v, seed: seed if v is None else murmur3_int(int(v), seed)
        if spark_type == "boolean":
            return lambda v, seed: seed if v is None else murmur3_int(1 if v else 0, seed)
        if spark_type == "long":
            return lambda v, seed: seed if v is None else _hash_long(int(v), seed)
        if spark_type == "double":
            return lambda v, seed: seed if v is None else _hash_double(float(v), seed)
        if spark_type == "float":
            return lambda v, seed: seed if v is None else _hash_float(float(v), seed)
        if spark_type == "string":
            return lambda v, seed: seed if v is None else _hash_bytes(v.encode("utf-8"), seed)
        if spark_type == "binary":
            return lambda v, seed: seed if v is None else _hash_bytes(bytes(v), seed)
        raise ValueError(f"no in-process hash for Spark type {spark_type!r}")
    kind = spark_type.get("type")
    if kind == "struct":
        fields = [(f["name"], spark_hasher(f["type"])) for f in spark_type["fields"]]

        def struct_hash(v: Any, seed: int) -> int:
            if v is None:
                return seed
            for name, h in fields:
                seed = h(v.get(name), seed)
            return seed

        return struct_hash
    if kind == "array":
        element = spark_hasher(spark_type["elementType"])

        def array_hash(v: Any, seed: int) -> int:
            for x in v or ():
                seed = element(x, seed)
            return seed

        return array_hash
    if kind == "map":
        kh, vh = spark_hasher(spark_type["keyType"]), spark_hasher(spark_type["valueType"])

        def map_hash(v: Any, seed: int) -> int:
            items = v.items() if isinstance(v, dict) else (v or ())
            for k, x in items:
                seed = vh(x, kh(k, seed))
            return seed

        return map_hash
    raise ValueError(f"no in-process hash for Spark type {spark_type!r}")


def pmod(value: int, n: int) -> int:
    """Spark's ``pmod``: the non-negative remainder."""
    return value % n
