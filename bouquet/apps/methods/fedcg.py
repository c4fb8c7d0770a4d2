"""Registration of the fedcg family (filled in by its issue)."""

from bouquet.apps.registry import Method

METHODS: list[Method] = []
