"""kspark's stateful operators, one per module, each run per task.

- :mod:`~kspark_server.operators.base`: what every operator shares: the task's micro-batch
  (:class:`~kspark_server.operators.base.Batch`), its output, and the state's persistence;
- :mod:`~kspark_server.operators.arrow`: the task's processing order and output tables;
- :mod:`~kspark_server.operators.dedup`, :mod:`~kspark_server.operators.stream_table_join`,
  :mod:`~kspark_server.operators.window_join`, :mod:`~kspark_server.operators.table_join`,
  :mod:`~kspark_server.operators.aggregate`:
  the operators;
- :mod:`~kspark_server.operators.registry`: a spec's kind to its operator.

This package imports nothing when imported: each module is imported where it is used.
"""
