from collections.abc import Iterator

import pytest

from .executables import shared_executables


@pytest.fixture(scope="package", autouse=True)
def _shared_executables() -> Iterator[None]:
    # See `executables.py`: the corpus compiles the same small programs many times over.
    with shared_executables():
        yield
