"""Registration of the scafcom family (filled in by its issue)."""

from bouquet.apps.registry import Method

METHODS: list[Method] = []
