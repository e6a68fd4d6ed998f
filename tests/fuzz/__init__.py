"""Helpers for ``tests/test_fuzz.py``: input generators and the front-end contract check.

* :mod:`tests.fuzz.seeds` -- valid (and known-invalid) queries to mutate: the dialect test
  lists, the Spark SQL corpus, the shipped ``.wsql`` files.
* :mod:`tests.fuzz.strategies` -- hypothesis strategies: token soups, mutations of seeds,
  WaveSQL constructs with random valid/invalid arguments.
* :mod:`tests.fuzz.harness` -- what "the front end behaved" means (only a positioned
  ``WaveSQLError``, never another exception, never a hang).
* :mod:`tests.fuzz.grammar` -- a small grammar of *valid* Spark SQL queries over two tables,
  for the differential test against ``spark.sql``.
* :mod:`tests.fuzz.environment` -- the data and catalog binding runs against, and the two
  tables of the differential test.
"""
