"""Debian's real Postfix as a private instance on loopback, for tests.

    with postfix_server() as pf:
        ...  # send to pf.host:pf.port with STARTTLS, trusting pf.ca_file
        [data] = pf.wait_for("alice@example.com", 1)  # the delivered Maildir copies, raw bytes

The instance (the recipe of /work/shared/REFERENCE.md, "A real Postfix for tests"):

- its configuration directory is one of ``SLOTS`` fixed directories under the system temp dir,
  taken under an exclusive ``flock`` (so concurrent test runs never share one). The default
  ``/etc/postfix/main.cf`` (created when missing, as after Debian's "No configuration") lists
  those directories in ``alternate_config_directories``: one line, appended once, so the file
  never grows from run to run;
- everything it writes (queue, ``data_directory``, mailboxes, certificates, its log) lives in a
  fresh temp directory, removed at exit;
- it listens on 127.0.0.1 only, on a free port (the ``smtp inet`` line of Debian's master.cf
  renamed), runs every service unchrooted, and logs to its stdout (``maillog_file``) into
  ``log_path``;
- STARTTLS with a certificate for 127.0.0.1/localhost signed by a throwaway CA (``ca_file``),
  PIPELINING (Postfix's default), SIZE (``message_size_limit``), SMTPUTF8;
- virtual Maildir mailboxes for ``USERS`` (domains example.com and mail.example.test, including the
  internationalised ``zoë@example.com``); any other address there gets ``550 5.1.1``.

``postfix -c DIR start-fg`` is our child process; the master it starts becomes its own session
leader, so it is stopped by the PID in its own ``master.pid`` (SIGTERM, then SIGKILL), then the
child is awaited. Without Postfix the harness skips, unless ``CI`` is set: then it fails.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

POSTFIX = shutil.which("postfix") or "/usr/sbin/postfix"
DEFAULT_MAIN_CF = Path("/etc/postfix/main.cf")
DEBIAN_MASTER_CF = Path("/etc/postfix/master.cf")
SLOTS = 8
SLOT_ROOT = Path(tempfile.gettempdir()) / "outbox-mailer-postfix"
MARKER = "# outbox-mailer tests (tests/postfix.py): private Postfix instances"
HOSTNAME = "mx.example.net"
MESSAGE_SIZE_LIMIT = 200_000
NOBODY = 65534

# address -> Maildir under the mailbox base (a trailing "/" means Maildir to Postfix's virtual(8))
USERS = {
    "alice@example.com": "example.com/alice/",
    "bob@example.com": "example.com/bob/",
    "carol@example.com": "example.com/carol/",
    "zoë@example.com": "example.com/zoe/",
    "ops@mail.example.test": "mail.example.test/ops/",
}


def unavailable(problem: str) -> NoReturn:
    """A tool the test needs is missing: skip, or fail when CI is set (.ci/run installs it)."""
    if os.environ.get("CI"):
        pytest.fail(f"{problem}; CI is set, so this is a failure, not a skip")
    pytest.skip(problem)


def require_postfix() -> None:
    if not os.path.exists(POSTFIX):
        unavailable("Debian's postfix is not installed (apt-get install postfix, 'No configuration')")
    if os.geteuid() != 0:
        unavailable("a private Postfix instance needs root")


def _slot_dirs() -> list[Path]:
    return [SLOT_ROOT / f"slot-{i}" for i in range(SLOTS)]


def _allow_slots() -> None:
    """List the slots in the default main.cf's alternate_config_directories, once."""
    line = "alternate_config_directories = " + " ".join(str(d) for d in _slot_dirs())
    SLOT_ROOT.mkdir(mode=0o755, exist_ok=True)
    with open(SLOT_ROOT / "main.cf.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not DEFAULT_MAIN_CF.exists():
            # Debian's "No configuration" leaves none. Should the system's own Postfix ever be started
            # with this file, it opens no network service.
            DEFAULT_MAIN_CF.write_text(f"{MARKER}: the default instance is not configured\n"
                                       "master_service_disable = inet\ninet_interfaces = loopback-only\n")
        existing = DEFAULT_MAIN_CF.read_text()
        if line not in existing.splitlines():
            with open(DEFAULT_MAIN_CF, "a") as f:
                f.write(("\n" if existing and not existing.endswith("\n") else "") + f"{MARKER}\n{line}\n")


@contextlib.contextmanager
def _slot() -> Iterator[Path]:
    """A configuration directory no other test run uses while we hold it."""
    for directory in _slot_dirs():
        lock = open(f"{directory}.lock", "w")  # noqa: SIM115  (held while the slot is in use)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        try:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(mode=0o755)
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            lock.close()
        return
    raise RuntimeError(f"all {SLOTS} private Postfix slots under {SLOT_ROOT} are in use")


def _write_tls(directory: Path) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost; returns the CA file."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "outbox-mailer test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTNAME)]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([
                  x509.DNSName(HOSTNAME), x509.DNSName("localhost"),
                  x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(server.public_bytes(pem) + ca.public_bytes(pem))
    key_file = directory / "server.key"
    key_file.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_file.chmod(0o600)
    return directory / "ca.pem"


def _master_cf(port: int) -> str:
    """Debian's master.cf: the smtp inet service on ``port``, nothing chrooted, no pipe(8) services."""
    out: list[str] = []
    keep = True
    for line in DEBIAN_MASTER_CF.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():  # a continuation ("-o ...", "flags=... argv=...") of the service above
            if keep:
                out.append(line)
            continue
        fields = line.split()
        keep = len(fields) >= 8 and fields[7] != "pipe"
        if not keep:
            continue
        if fields[:2] == ["smtp", "inet"]:
            fields[0] = str(port)
        fields[4] = "n"  # chroot
        out.append("  ".join(fields))
    return "\n".join(out) + "\n"


def _main_cf(run: Path, config: Path) -> str:
    settings = {
        "compatibility_level": "3.6",
        "queue_directory": run / "queue",
        "data_directory": run / "data",
        "maillog_file": "/dev/stdout",
        "myhostname": HOSTNAME,
        "mydestination": "",
        "inet_interfaces": "127.0.0.1",
        "inet_protocols": "ipv4",
        "mynetworks": "127.0.0.0/8",
        "relayhost": "",
        "alias_maps": "",
        "alias_database": "",
        "biff": "no",
        "smtputf8_enable": "yes",
        "message_size_limit": MESSAGE_SIZE_LIMIT,
        "smtpd_tls_security_level": "may",
        "smtpd_tls_cert_file": run / "server.pem",
        "smtpd_tls_key_file": run / "server.key",
        "smtpd_tls_received_header": "yes",
        "smtpd_relay_restrictions": "permit_mynetworks, reject_unauth_destination",
        "virtual_mailbox_domains": "example.com, mail.example.test",
        "virtual_mailbox_base": run / "mail",
        "virtual_mailbox_maps": f"texthash:{config / 'vmailbox'}",
        "virtual_uid_maps": f"static:{NOBODY}",
        "virtual_gid_maps": f"static:{NOBODY}",
        # nothing leaves this instance: mail for any other domain is bounced at once, never relayed
        "default_transport": "error:outbox-mailer test instance: no relaying",
    }
    return "".join(f"{name} = {value}\n" for name, value in settings.items())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _greets(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.settimeout(2)
            return s.recv(512).startswith(b"220 ")
    except OSError:
        return False


@dataclass
class PostfixServer:
    host: str
    port: int
    ca_file: str
    config_dir: Path
    run_dir: Path
    log_path: Path
    message_size_limit: int = MESSAGE_SIZE_LIMIT

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def messages(self, address: str) -> list[bytes]:
        """Raw copies delivered to ``address``'s Maildir, oldest first (Maildir names start with the time)."""
        maildir = self.run_dir / "mail" / USERS[address]
        files = [p for sub in ("new", "cur") for p in (maildir / sub).glob("*") if p.is_file()]
        return [p.read_bytes() for p in sorted(files, key=lambda p: (p.stat().st_mtime, p.name))]

    def wait_for(self, address: str, count: int, timeout: float = 15) -> list[bytes]:
        """The copies for ``address`` once there are ``count`` of them (more fail: nothing is delivered twice)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.messages(address)
            if len(found) >= count or time.monotonic() > deadline:
                assert len(found) == count, (f"{address}: {len(found)} messages delivered, expected {count}; "
                                             f"Postfix log tail:\n{self.log_tail()}")
                return found
            time.sleep(0.05)

    def queue_id_for(self, message_id: str) -> str | None:
        """The queue id Postfix's cleanup logged for ``message_id`` (``<...>`` included)."""
        match = re.search(rf"\b([0-9A-F]{{6,}}|[0-9A-Za-z]{{10,}}): message-id={re.escape(message_id)}",
                          self.log())
        return match[1] if match else None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


def _postfix(config: Path, *args: str, timeout: float = 30) -> None:
    out = subprocess.run([POSTFIX, "-c", str(config), *args], capture_output=True, text=True, timeout=timeout,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"postfix {' '.join(args)} failed ({out.returncode}): {out.stdout}{out.stderr}")


def _stop(proc: subprocess.Popen[bytes], pid_file: Path) -> None:
    try:
        master = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        master = None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if master is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(master, sig)
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
    if master is not None:  # no longer our child (it made itself a session leader): poll until it is gone
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(master):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@contextlib.contextmanager
def postfix_server(*, start_timeout: float = 30) -> Iterator[PostfixServer]:
    require_postfix()
    _allow_slots()
    run = Path(tempfile.mkdtemp(prefix="outbox-mailer-postfix-run-"))
    try:
        run.chmod(0o755)  # traversable by the postfix user and by the mailbox owner
        with _slot() as config:
            ca_file = _write_tls(run)
            (run / "queue").mkdir(mode=0o755)  # post-install makes the tree inside it
            (run / "data").mkdir(mode=0o700)
            os.chown(run / "data", *_postfix_ids())
            (run / "mail").mkdir(mode=0o755)
            os.chown(run / "mail", NOBODY, NOBODY)
            (config / "vmailbox").write_text("".join(f"{a} {path}\n" for a, path in USERS.items()))
            (config / "main.cf").write_text(_main_cf(run, config))
            _postfix(config, "post-install", "create-missing")
            yield from _started(config, run, ca_file, start_timeout)
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _started(config: Path, run: Path, ca_file: Path, start_timeout: float) -> Iterator[PostfixServer]:
    """Start on a free port (another one if it was taken meanwhile); stop at exit."""
    log_path = run / "postfix.log"
    for _ in range(3):
        port = _free_port()
        (config / "master.cf").write_text(_master_cf(port))
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([POSTFIX, "-c", str(config), "start-fg"], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        server = PostfixServer("127.0.0.1", port, str(ca_file), config, run, log_path)
        try:
            deadline = time.monotonic() + start_timeout
            while proc.poll() is None and not _greets(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Postfix did not greet on port {port} within {start_timeout:g} s:\n"
                                       f"{server.log_tail()}")
                time.sleep(0.05)
            if proc.poll() is not None:
                if "Address already in use" in server.log():
                    continue
                raise RuntimeError(f"Postfix exited with {proc.returncode}:\n{server.log_tail()}")
            yield server
            return
        finally:
            _stop(proc, run / "queue" / "pid" / "master.pid")
    raise RuntimeError(f"Postfix could not bind a free port:\n{server.log_tail()}")


def _postfix_ids() -> tuple[int, int]:
    entry = pwd.getpwnam("postfix")
    return entry.pw_uid, entry.pw_gid
