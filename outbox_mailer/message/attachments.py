"""A row's attachments, checked into values for composition (pure).

Each entry of the ``attachments`` column is an object of the strings ``filename``,
``content_type`` (``type/subtype``, RFC 6838 names; not ``multipart/*`` or ``message/*``)
and ``content_base64`` (strict base64), and, for an inline part, ``content_id``: its
Content-ID without angle brackets, unique within the row, by the rule the content trigger
also holds (``sql/0023_inline_attachments.sql``). :func:`checked_attachments` returns them as
:class:`Attachment` values or raises :class:`~outbox_mailer.errors.CompositionError` naming the
field (``attachments[0].content_base64``).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from ..errors import CompositionError
from .addresses import find_control_character

__all__ = ["Attachment", "checked_attachments"]

_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"  # RFC 6838
_CONTENT_TYPE = re.compile(f"({_RESTRICTED_NAME})/({_RESTRICTED_NAME})")
_REFUSED_ATTACHMENT_TYPES = frozenset({"multipart", "message"})
_ATTACHMENT_KEYS = frozenset({"filename", "content_type", "content_base64"})
_OPTIONAL_ATTACHMENT_KEYS = frozenset({"content_id"})
# An inline part's Content-ID without its angle brackets: RFC 2392's id-left "@" id-right with
# dot-atom characters, the "@" and its right side optional (clients resolve cid:logo too). The
# content trigger holds the same rule (sql/0023_inline_attachments.sql).
_ID_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+"
_CONTENT_ID = re.compile(f"{_ID_ATOM}(?:@{_ID_ATOM})?")
_MAX_CONTENT_ID_CHARS = 250
_MAX_FILENAME_CHARS = 255


@dataclass(frozen=True, slots=True)
class Attachment:
    """One checked entry of a row's attachments."""

    filename: str
    maintype: str
    subtype: str
    data: bytes
    content_id: str | None  # an inline part's, without angle brackets; None: a file


def checked_attachments(attachments: object, max_message_bytes: int) -> list[Attachment]:
    """The row's attachments checked, or CompositionError naming the entry's field
    (``attachments[1].content_id``); refused before decoding when their base64 alone passes
    ``max_message_bytes``."""
    if type(attachments) is list and not attachments:  # most rows
        return []
    if not isinstance(attachments, (list, tuple)):
        raise CompositionError("attachments", f"expected a list, got {type(attachments).__name__}")
    checked = []
    encoded_at_least = 0
    content_ids: dict[str, int] = {}
    for index, item in enumerate(attachments):
        attachment = _checked_attachment(item, f"attachments[{index}]")
        if attachment.content_id is not None:
            first = content_ids.setdefault(attachment.content_id, index)
            if first != index:
                raise CompositionError(f"attachments[{index}].content_id",
                                       f"{attachment.content_id!r} is also attachments[{first}]'s: a row's "
                                       "Content-IDs are unique")
        encoded_at_least += 4 * -(-len(attachment.data) // 3)
        if encoded_at_least > max_message_bytes:  # refuse before building anything big
            raise CompositionError(
                "message",
                f"composed message is at least {encoded_at_least} bytes, "
                f"over the limit of {max_message_bytes}",
            )
        checked.append(attachment)
    return checked


def _checked_attachment(item: object, field: str) -> Attachment:
    if not isinstance(item, dict):
        raise CompositionError(field, f"expected an object, got {type(item).__name__}")
    missing = sorted(_ATTACHMENT_KEYS.difference(item))
    if missing:
        raise CompositionError(field, f"missing key(s): {', '.join(missing)}")
    extra = [key for key in item if key not in _ATTACHMENT_KEYS and key not in _OPTIONAL_ATTACHMENT_KEYS]
    if extra:
        raise CompositionError(field, f"unknown key(s): {', '.join(map(repr, extra))}")
    for key in sorted(_ATTACHMENT_KEYS):
        if not isinstance(item[key], str):
            raise CompositionError(f"{field}.{key}", f"expected a string, got {type(item[key]).__name__}")
    maintype, subtype = checked_content_type(item["content_type"], f"{field}.content_type")
    return Attachment(
        filename=checked_filename(item["filename"], f"{field}.filename"),
        maintype=maintype,
        subtype=subtype,
        data=_decoded_base64(item["content_base64"], f"{field}.content_base64"),
        content_id=checked_content_id(item.get("content_id"), f"{field}.content_id"),
    )


def checked_content_id(content_id: object, field: str) -> str | None:
    if content_id is None:
        return None
    if not isinstance(content_id, str):
        raise CompositionError(field, f"expected a string, got {type(content_id).__name__}")
    if not 1 <= len(content_id) <= _MAX_CONTENT_ID_CHARS:
        raise CompositionError(field, f"must be 1-{_MAX_CONTENT_ID_CHARS} characters")
    bad = find_control_character(content_id)
    if bad is not None:
        raise CompositionError(field, f"control character {bad!r} is not allowed")
    if "<" in content_id or ">" in content_id:
        raise CompositionError(field, f"{content_id!r}: write the id without angle brackets (logo@example.com "
                                      "becomes Content-ID: <logo@example.com>)")
    if _CONTENT_ID.fullmatch(content_id) is None:
        raise CompositionError(field, f"{content_id!r}: letters, digits and !#$%&'*+-/=?^_`{{|}}~. "
                                      "on each side of at most one @ (RFC 2392: id-left@id-right)")
    return content_id


def checked_filename(filename: str, field: str) -> str:
    if not filename or len(filename) > _MAX_FILENAME_CHARS:
        raise CompositionError(field, f"must be 1-{_MAX_FILENAME_CHARS} characters")
    bad = find_control_character(filename)
    if bad is not None:
        raise CompositionError(field, f"control character {bad!r} is not allowed")
    if "=?" in filename:  # the stdlib would decode it as an RFC 2047 encoded word
        raise CompositionError(field, "'=?' is not allowed in a filename")
    return filename


def checked_content_type(content_type: str, field: str) -> tuple[str, str]:
    match = _CONTENT_TYPE.fullmatch(content_type)
    if match is None:
        raise CompositionError(field, f"{content_type!r} is not a type/subtype media type")
    maintype, subtype = match.group(1).lower(), match.group(2).lower()
    if maintype in _REFUSED_ATTACHMENT_TYPES:
        raise CompositionError(field, f"{maintype}/* attachments are not supported")
    return maintype, subtype


def _decoded_base64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CompositionError(
            field, f"not strict base64 (no whitespace or line breaks allowed): {exc}"
        ) from exc
