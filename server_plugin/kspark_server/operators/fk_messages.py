"""The messages between the three stages of a foreign-key table-table join.

A foreign-key join (KIP-213) runs as three operators, one shuffle each:

1. :mod:`~kspark_server.operators.fk_subscribe`, keyed by the left key, keeps each left
   key's foreign key and a version number, and sends *subscriptions* keyed by the
   foreign key;
2. :mod:`~kspark_server.operators.fk_match`, keyed by the foreign key, keeps the right
   table and each foreign key's subscribers, and sends *responses* keyed by the left key:
   one per subscription, and one per subscriber of a right update;
3. :mod:`~kspark_server.operators.fk_resolve`, keyed by the left key, takes the
   responses of each left key's newest version only and emits the joined result.

A left key's version grows with each of its updates, so a response that a stage-2 task
sent for an older value (the foreign key has moved to another task since) is recognised
and dropped: results are never emitted out of order for a key. Every message of a
micro-batch is answered within the micro-batch (the stages are a micro-batch apart, and
each stage takes all of one micro-batch's messages in the next), so only the newest version needs to be remembered across
micro-batches.

Messages are MessagePack (:func:`kspark_server.stateenc.pack`) lists:

=================  ========================================================
subscription       ``[SUBSCRIBE, left key, version, left value]``,
                   ``[UNSUBSCRIBE, left key, version]`` (no response) or
                   ``[DELETE, left key, version]`` (the left value was deleted)
response           ``[version, SUBSCRIBED, left value, right value, right ts]``,
                   ``[version, UPDATED, right value, right ts]`` (a right update)
                   or ``[version, DELETED]``
=================  ========================================================

Values are carried as they travel (JSON text where the spec packs them).
"""

from __future__ import annotations

__all__ = ["DELETE", "DELETED", "SUBSCRIBE", "SUBSCRIBED", "UNSUBSCRIBE", "UPDATED"]

SUBSCRIBE, UNSUBSCRIBE, DELETE = 0, 1, 2
SUBSCRIBED, UPDATED, DELETED = 0, 1, 2
