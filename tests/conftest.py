"""One test body for both twins: the `impl` fixture (the aio-libs pattern)."""
import pytest

import fastcoord

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.fixture(scope="session", params=IMPLS)
def impl(request) -> str:
    return request.param
