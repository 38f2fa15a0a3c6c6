"""Importing outbox_mailer.client brings in no dependency of the daemon and no database driver."""

from __future__ import annotations

import json
import subprocess
import sys

DAEMON_AND_DRIVERS = ("aiosmtplib", "starlette", "uvicorn", "prometheus_client", "asyncpg", "sqlalchemy",
                      "psycopg", "psycopg2", "anyio", "httpx", "pydantic_settings")


def test_importing_the_client_imports_no_daemon_dependency_and_no_driver() -> None:
    program = ("import json, sys, outbox_mailer.client; "
               "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                            timeout=60)
    imported = set(json.loads(result.stdout))
    assert "outbox_mailer" in imported
    assert sorted(imported.intersection(DAEMON_AND_DRIVERS)) == []
