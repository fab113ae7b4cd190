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

#: The most tasks an app can have (the task number is a task key's low 12 bits).
MAX_TASKS = 1 << 12

_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an ``int`` column: Murmur3 x86 32-bit of 4 bytes, as a signed
    32-bit int (``Murmur3_x86_32.hashInt``)."""
    k1 = (value & _MASK) * _C1 & _MASK
    k1 = _rotl(k1, 15) * _C2 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def pmod_hash_int(value: int, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives an ``int`` group key."""
    return murmur3_int(value) % partitions


def task_keys(tasks: int) -> tuple[int, ...]:
    """The group key of each of ``tasks`` tasks, each landing in its own partition when
    the shuffle has ``tasks`` partitions."""
    found = _keys.get(tasks)
    if found is None:
        found = _keys[tasks] = _task_keys(tasks)
    return found


#: task_keys' answers (a plain dict: kspark_server may be pickled by value, and a
#: functools.cache wrapper pickles by reference to a module the server may lack)
_keys: dict[int, tuple[int, ...]] = {}


def _task_keys(tasks: int) -> tuple[int, ...]:
    if not 0 < tasks <= MAX_TASKS:
        raise ValueError(f"an app has 1 to {MAX_TASKS} partitions, not {tasks}")
    keys = []
    for t in range(tasks):
        k = t
        while pmod_hash_int(k, tasks) != t:
            k += MAX_TASKS
        keys.append(k)
    return tuple(keys)


def task_of(key: int) -> int:
    """The task number of a task key."""
    return int(key) % MAX_TASKS
