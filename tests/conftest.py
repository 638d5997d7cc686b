"""Markers applied by where a test lives ([tool.pytest.ini_options] in pyproject.toml registers them):

- ``integration``: everything under ``tests/integration/`` (a real ``skippy serve`` on a loopback port);
  ``make test-fast`` leaves these out
- ``browser``: ``tests/integration/test_webui.py`` (Playwright driving the OS's Chromium)

``slow`` (a unit test that loads the real model into llama.cpp) is written on the tests themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).resolve().parent / "integration"
_BROWSER = _INTEGRATION / "test_webui.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path).resolve()
        if path.is_relative_to(_INTEGRATION):
            item.add_marker(pytest.mark.integration)
        if path == _BROWSER:
            item.add_marker(pytest.mark.browser)
