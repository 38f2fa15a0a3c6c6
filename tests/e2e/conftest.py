"""Build the wheel once, install it into a fresh venv, and run its CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Installed:
    wheel: Path
    bin: Path

    def cli(self, *args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "outbox-mailer"), *args], capture_output=True, text=True,
                              env=env, input=input, timeout=timeout)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (work / "dist").glob("outbox_mailer-*.whl")
    venv = work / "venv"
    install_into_fresh_venv(sys.executable, venv, wheel)
    yield Installed(wheel, venv / "bin")


def install_into_fresh_venv(python: str, venv: Path, wheel: Path) -> None:
    """A new venv of ``python`` with ``wheel`` and its dependencies installed by this environment's pip
    (``pip --python``): a venv's own pip, bootstrapped by ensurepip, took ~7 s and is never used."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=600)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_MAILER_")}
    env.update(extra)
    return env
