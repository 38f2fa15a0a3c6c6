"""What a run needs before it measures: the project's .venv, the bench requirements, smtp-sink.

`python3 bench/run.py` on a clean checkout re-executes itself with .venv/bin/python (creating the
venv with the project installed first); as root it installs Debian's python3-venv and postfix (for
the smtp-sink binary only, preseeded "No configuration") when they are missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from common import BENCH_DIR, ROOT

PY = sys.executable


def ensure_python_deps() -> None:
    try:
        import pgqueuer  # noqa: F401
        import uvloop  # noqa: F401

        # imported only by the processes that run Django (post_office_drain.py): present is enough here
        for module in ("post_office", "django", "psycopg"):
            if importlib.util.find_spec(module) is None:
                raise ImportError(module)
    except ImportError:
        print("installing bench requirements into", sys.prefix, flush=True)
        subprocess.run([PY, "-m", "pip", "install", "-q", "-r", str(BENCH_DIR / "requirements.txt")], check=True)


def ensure_smtp_sink() -> str:
    path = shutil.which("smtp-sink") or ("/usr/sbin/smtp-sink" if os.path.exists("/usr/sbin/smtp-sink") else None)
    if path:
        return path
    if os.geteuid() != 0:
        sys.exit("smtp-sink missing: install Debian's postfix package (as root: apt-get install postfix)")
    print("installing postfix (for smtp-sink only; the postfix service is not configured)", flush=True)
    subprocess.run(["debconf-set-selections"], input="postfix postfix/main_mailer_type select No configuration\n",
                   text=True, check=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(["apt-get", "install", "-y", "-q", "postfix"], env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "postfix"], env=env, check=True)
    return "/usr/sbin/smtp-sink"




def reexec_in_project_venv() -> None:
    """`python3 bench/run.py` with an interpreter that lacks the project: use the project's .venv,
    creating it on a clean checkout (and, as root, installing Debian's python3-venv if needed)."""
    try:
        import anyio  # noqa: F401
        import asyncpg  # noqa: F401

        import outbox_mailer  # noqa: F401
    except ImportError:
        venv = ROOT / ".venv"
        venv_python = venv / "bin" / "python"
        if Path(sys.prefix).resolve() == venv.resolve():
            sys.exit("outbox-mailer's dependencies are missing from .venv: .venv/bin/pip install -e . first")
        if not venv_python.exists():
            create_project_venv(venv)
        os.execv(str(venv_python), [str(venv_python), *sys.argv])


def create_project_venv(venv: Path) -> None:
    print(f"first run on this checkout: creating {venv} with outbox-mailer installed", flush=True)
    if subprocess.run([sys.executable, "-m", "venv", str(venv)], check=False).returncode != 0:
        if os.geteuid() != 0:
            sys.exit("python3 -m venv failed: install Debian's python3-venv (or run this as root)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if subprocess.run(["apt-get", "install", "-y", "-q", "python3-venv"], env=env, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
            subprocess.run(["apt-get", "install", "-y", "-q", "python3-venv"], env=env, check=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)], check=True)

