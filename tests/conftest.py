"""The fixtures every tier shares: `impl`, one test body for both twins (the aio-libs
pattern); `small_tmpfs`, a tiny real file system for ENOSPC (storage and server tiers)."""
import subprocess

import pytest

import fastcoord

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.fixture(scope="session", params=IMPLS)
def impl(request) -> str:
    return request.param


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot run mount here ({exc}); ENOSPC is covered by the fault-hook tests")
    if result.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here ({result.stderr.strip()}); "
                    f"ENOSPC is covered by the fault-hook tests")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)
