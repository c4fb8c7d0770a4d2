"""Registration records of the built-in methods, one module per family.

Each module exposes ``METHODS`` (a list of :class:`~bouquet.apps.registry.Method`) and is named
in ``pyproject.toml`` under ``[project.entry-points."bouquet.methods"]``.
"""
