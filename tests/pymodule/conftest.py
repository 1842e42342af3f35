"""Shared fixtures: the repository, the kvec command built beside the module, the bundled model
and (when fetched) the real default model."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "kvec-tiny.gguf"
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CLI = os.environ.get("KVEC_CLI", str(ROOT / "build" / "release" / "tools" / "kvec"))


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The kvec command with `args`; stdout and stderr as text."""
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, check=check, cwd=ROOT)


@pytest.fixture(scope="session")
def kvec():
    import kvec as module
    return module


@pytest.fixture(scope="session")
def tiny(kvec):
    return kvec.Model(TINY, threads=2)


@pytest.fixture(scope="session")
def smollm2(kvec):
    if not SMOLLM2.exists():
        pytest.skip("the real default model is not fetched (scripts/fetch-models.sh)")
    return kvec.Model(SMOLLM2, threads=2)


@pytest.fixture(scope="session")
def speech() -> str:
    """3000 characters of the 2009 State of the Union address (data/text/sotu, public domain)."""
    return (ROOT / "data" / "text" / "sotu" / "2009_barack_obama_d.txt").read_text()[:3000]
