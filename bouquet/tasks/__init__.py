"""Tasks: data, partitions, models and metrics.

Torch is imported only by the task modules that need it, never by this package's ``__init__`` or
the catalog.
"""
