from collections.abc import Iterator

import pytest

from .executables import shared_executables


@pytest.fixture(scope="module", autouse=True)
def _shared_executables(request: pytest.FixtureRequest) -> Iterator[None]:
    # See `executables.py`: the corpus compiles the same small programs many times over. Not for
    # the thread tests: JAX's persistent cache warns ("incomplete or truncated stream") when one
    # thread reads an entry another is still writing, and the suite turns warnings into errors.
    if request.path.name == "test_threads.py":
        yield
        return
    with shared_executables():
        yield
