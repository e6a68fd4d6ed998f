"""Signal kernels (numpy/scipy on Arrow data, no Spark import) and their registry.

The registry (:mod:`wavesql.udfs.registry`) is the single place a signal function is defined:
kernel, type rule, declared semantics and documentation. The planner asks it whether a name
is a signal function; lowering wraps kernels as vectorized Arrow UDFs.
"""
