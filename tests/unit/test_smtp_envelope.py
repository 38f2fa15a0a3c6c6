"""The envelope check's shortcut for plain addresses gives aiosmtplib's answer, without its parser."""

from __future__ import annotations

import string

from aiosmtplib.email import parse_address
from hypothesis import example, given
from hypothesis import strategies as st

from outbox_mailer.transports.smtp.envelope import PLAIN_ADDR_SPEC, address_problem, parsed_address_problem

_ADDRESS_CHARS = string.printable + "äß\u00a0\u2028"


@given(st.from_regex(PLAIN_ADDR_SPEC, fullmatch=True))
@example("customer1042@example.com")
@example("o'brien+tag@mail-1.example.co.uk")
def test_a_plain_address_goes_on_the_command_line_as_aiosmtplib_parses_it(address: str) -> None:
    assert parse_address(address) == address
    assert parsed_address_problem("recipient", address) is None
    assert address_problem("recipient", address) is None


@given(st.sampled_from(["sender", "recipient"]), st.text(_ADDRESS_CHARS, max_size=40))
@example("recipient", "a@b.com ")
@example("recipient", "a@b.com\n")
@example("recipient", "Name <a@b.com>")
@example("recipient", "a.@b.com")
@example("recipient", "a@b..com")
@example("recipient", "noatsign")
@example("sender", "")
def test_every_address_gets_the_answer_of_aiosmtplibs_parser(role: str, address: str) -> None:
    assert address_problem(role, address) == parsed_address_problem(role, address)
