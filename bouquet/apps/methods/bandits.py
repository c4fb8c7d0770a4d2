"""Registration of the bandits family (filled in by its issue)."""

from bouquet.apps.registry import Method

METHODS: list[Method] = []
