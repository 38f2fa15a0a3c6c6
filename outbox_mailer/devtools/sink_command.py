"""``outbox-mailer sink``: the demo's SMTP sink as a command, for a daemon run on this machine.

Every message it accepts is summarised in one line on stdout::

    received from=<app@example.com> to=<ada@example.com> subject="Welcome" size=812 message_id=<...@...>

and, with an :class:`EmlFolder`, written there as an ``.eml`` file (the bytes as received, CRLF line
endings): under a name that cannot collide (the time, a count and 64 random bits), written to a hidden
temporary file first and renamed, so a reader of the folder never sees half a message. It serves until
SIGINT or SIGTERM and then returns.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from pathlib import Path
from typing import TextIO

import anyio

from ..clock import utc_now
from .sink import ReceivedMessage, SmtpSink

__all__ = ["EmlFolder", "serve_sink", "summary"]

_HEADERS = BytesHeaderParser(policy=default_policy)


def summary(message: ReceivedMessage) -> str:
    """One line: envelope sender and recipients, the Subject (decoded, as a JSON string), size, Message-ID."""
    headers = _HEADERS.parsebytes(message.data)
    try:
        subject = str(headers.get("subject", ""))
    except (ValueError, TypeError):  # a malformed encoded word: its raw form
        subject = str(headers.get_all("subject", [""])[0])
    message_id = str(headers.get("message-id", "")).strip() or "-"
    return (f"received from=<{message.sender}> to={','.join(f'<{r}>' for r in message.recipients)} "
            f"subject={json.dumps(subject, ensure_ascii=False)} size={len(message.data)} "
            f"message_id={message_id.replace(' ', '')}")


class EmlFolder:
    """A folder that received messages are written to, one ``.eml`` file each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._count = 0

    @classmethod
    def open(cls, path: str) -> EmlFolder:
        """The folder, created when missing; OSError when it cannot be created or written to."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".outbox-mailer-probe-{secrets.token_hex(8)}"
        probe.write_bytes(b"")  # the one sure test of "writable" (os.access misleads root)
        probe.unlink()
        return cls(folder)

    def write(self, message: ReceivedMessage) -> Path:
        """Write ``message`` as a new file (temporary name, then renamed); its path."""
        self._count += 1
        stamp = utc_now().strftime("%Y%m%dT%H%M%S")
        name = f"{stamp}-{self._count:06d}-{secrets.token_hex(8)}.eml"
        temporary = self.path / f".{name}.tmp"
        try:
            with open(temporary, "xb") as file:
                file.write(message.data)
                file.flush()
                os.fsync(file.fileno())
            final = self.path / name
            os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return final


async def serve_sink(host: str, port: int, folder: EmlFolder | None, out: TextIO = sys.stdout) -> None:
    """Serve on ``host:port`` until SIGINT or SIGTERM; OSError when it cannot listen there."""

    def received(message: ReceivedMessage) -> None:
        line = summary(message)
        if folder is not None:
            line += f" eml={folder.write(message)}"
        print(line, file=out, flush=True)

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with SmtpSink(host=host, port=port, on_message=received, keep_messages=False) as sink:
            where = f"[{sink.host}]" if ":" in sink.host else sink.host
            print(f"SMTP sink listening on {where}:{sink.port}"
                  + (f", writing .eml files to {folder.path}" if folder is not None else "")
                  + "; Ctrl-C stops it", file=out, flush=True)
            async for _ in signals:
                break
