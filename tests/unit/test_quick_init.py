"""quick_init: the faster __init__ of the frozen values made for every email takes the parameters of the
dataclass's own and builds the same value, still frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from outbox_mailer.daemon.failover import Route
from outbox_mailer.daemon.tally import Tally
from outbox_mailer.decide import Transition
from outbox_mailer.delivery import ComposedMessage, Delivery, MessageFields, Outcome, quick_init
from outbox_mailer.delivery_events.suppression import Screened
from outbox_mailer.message.addresses import ParsedAddress
from outbox_mailer.store.outcomes import AttemptRecord, OutcomeWrite

EACH_EMAILS_VALUES = (Delivery, MessageFields, ComposedMessage, Outcome, Transition, AttemptRecord, OutcomeWrite,
                      Tally, Route, Screened, ParsedAddress)


def _value_class(quick: bool) -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Value:
        name: str
        count: int = 1
        note: str | None = None
        shown: str = dataclasses.field(init=False, repr=False, compare=False)
        kept: tuple[str, ...] = dataclasses.field(init=False, default=("kept",))

        def __post_init__(self) -> None:
            object.__setattr__(self, "shown", f"{self.name} x{self.count}")

    return quick_init(Value) if quick else Value


CALLS = (
    (("a",), {}),
    (("a", 2), {}),
    (("a",), {"note": "n"}),
    ((), {"name": "b", "count": 3, "note": None}),
    (("c", 4, "n"), {}),
)


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_quick_init_builds_the_value_the_dataclass_builds(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    quick, plain = _value_class(True)(*args, **kwargs), _value_class(False)(*args, **kwargs)
    fields = [f.name for f in dataclasses.fields(plain)]
    assert [getattr(quick, name) for name in fields] == [getattr(plain, name) for name in fields]
    assert repr(quick) == repr(plain)


def test_a_value_from_quick_init_stays_frozen() -> None:
    value = _value_class(True)("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.name = "b"  # type: ignore[misc]  # the point: frozen
    assert dataclasses.replace(value, count=5).shown == "a x5"


@pytest.mark.parametrize(("args", "kwargs"), [((), {}), (("a", 1, None, "x"), {}), (("a",), {"name": "b"}),
                                              (("a",), {"shown": "x"})])
def test_quick_init_refuses_the_calls_the_dataclass_refuses(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        _value_class(False)(*args, **kwargs)
    with pytest.raises(TypeError):
        _value_class(True)(*args, **kwargs)


def test_quick_init_refuses_a_class_it_cannot_build_alike() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        name: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        names: list[str] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        name: str

    for cls in (Mutable, Factory, NoSlots):
        with pytest.raises(TypeError):
            quick_init(cls)


@pytest.mark.parametrize("cls", EACH_EMAILS_VALUES, ids=lambda cls: cls.__name__)
def test_each_emails_values_take_their_fields_as_parameters(cls: type) -> None:
    expected = [(f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
                for f in dataclasses.fields(cls) if f.init]
    parameters = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.default) for p in parameters] == expected
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
    assert cls.__init__.__code__.co_filename == "<string>" and "_s0" in cls.__init__.__code__.co_freevars
