"""Debian's real PgBouncer in front of the tests' PostgreSQL, in a chosen pool mode.

    with running_pgbouncer(pg_url, "transaction", pool_size=1) as url:
        ...  # url: postgresql://postgres@127.0.0.1:PORT/<the same database>

``settings`` adds lines to its ``[pgbouncer]`` section (``{"server_round_robin": "1"}``).

It listens on 127.0.0.1 only (no Unix socket), accepts any user name without a password
(auth_type = any) and logs in to PostgreSQL as its user. As root it runs as the user that owns
the tests' PostgreSQL (PgBouncer refuses to run as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from outbox_mailer.devtools.pgcluster import run_as_user

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_pgbouncer(pg_url: str, mode: str, *, pool_size: int = 2,
                      settings: Mapping[str, str] | None = None) -> Iterator[str]:
    if not os.path.exists(BINARY):
        raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    target = urlsplit(pg_url)
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="outbox-pgbouncer-", dir="/tmp"))
    owner = run_as_user()
    more = "".join(f"{name} = {value}\n" for name, value in (settings or {}).items())
    (directory / "pgbouncer.ini").write_text(f"""[databases]
* = host={target.hostname} port={target.port} user={target.username}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = 100
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
{more}""")
    prefix: list[str] = []
    if owner is not None:
        os.chown(directory, owner.pw_uid, owner.pw_gid)
        for path in directory.iterdir():
            os.chown(path, owner.pw_uid, owner.pw_gid)
        prefix = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--init-groups"]
    process = subprocess.Popen([*prefix, BINARY, str(directory / "pgbouncer.ini")], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                log = (directory / "pgbouncer.log").read_text() if (directory / "pgbouncer.log").exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {log[-2000:]}")
            time.sleep(0.05)
        yield urlunsplit(target._replace(netloc=f"{target.username}@127.0.0.1:{port}"))
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        shutil.rmtree(directory, ignore_errors=True)
