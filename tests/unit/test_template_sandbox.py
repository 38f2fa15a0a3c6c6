"""The template sandbox (outbox_mailer/templating): what a template may read and compute, the compile check's
line and column, HTML escaping, and the output cap, rendered in this process (the worker's limits are tested
in tests/integration/test_template_worker.py)."""

from __future__ import annotations

import time

import pytest

from outbox_mailer.errors import TemplateError
from outbox_mailer.templating.render import TemplateVersion, render
from outbox_mailer.templating.sandbox import compile_problem

CAP = 1024 * 1024


def version(subject: str = "Hi", text: str | None = "text", html: str | None = None) -> TemplateVersion:
    return TemplateVersion("t", "en", 1, subject, text, html)


def test_the_data_is_escaped_in_the_html_body_and_left_as_is_in_the_text_and_subject() -> None:
    data = {"name": "<script>alert(1)</script>"}
    out = render(version("Hi {{ name }}", "Hello {{ name }}", "<p>Hello {{ name }}</p>"), data, CAP)
    assert out.html_body == "<p>Hello &lt;script&gt;alert(1)&lt;/script&gt;</p>"
    assert out.text_body == "Hello <script>alert(1)</script>"
    assert out.subject == "Hi <script>alert(1)</script>"


def test_an_undefined_variable_is_an_error_naming_it() -> None:
    with pytest.raises(TemplateError, match="undefined variable: 'first_name' is undefined"):
        render(version(text="Hello {{ first_name }}"), {"name": "Ann"}, CAP)


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__.os }}",
    "{{ namespace }}{{ lipsum() }}",
    "{{ range.__self__ }}",
    "{{ data.__class__ }}",
    "{{ items.append(1) }}",
    "{{ '{0.__class__}'.format(name) }}",
])
def test_a_sandbox_escape_is_refused(source: str) -> None:
    with pytest.raises(TemplateError, match=r"template text: (refused by the sandbox|undefined variable)"):
        render(version(text=source), {"name": "Ann", "items": [], "data": {}}, CAP)


@pytest.mark.parametrize("source", ["{{ 'x' * 500000000 }}", "{{ 'x' * 5 * 10**8 }}", "{{ 2 ** 100000000 }}",
                                    "{{ [1] * 10**9 }}", "{{ (10**15000) * (10**15000) }}"])
def test_repetition_and_powers_beyond_the_cap_are_refused_before_they_are_computed(source: str) -> None:
    started = time.process_time()
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render(version(text=source), {}, CAP)
    assert time.process_time() - started < 1.0  # nothing of the 500 MB was allocated


def test_a_range_over_the_sandboxs_bound_is_refused() -> None:
    with pytest.raises(TemplateError, match="Range too big"):
        render(version(text="{% for i in range(10**9) %}x{% endfor %}"), {}, CAP)


def test_the_output_is_cut_at_the_cap_while_it_streams() -> None:
    looped = "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}"
    with pytest.raises(TemplateError, match=f"output over MAX_MESSAGE_BYTES \\({CAP} bytes\\)"):
        render(version(text=looped), {}, CAP)


def test_the_same_version_and_data_render_the_same_text() -> None:
    v = version("Order {{ n }}", "{% for i in items %}{{ i }} {% endfor %}", "<b>{{ n|upper }}</b>")
    assert render(v, {"n": "a1", "items": [3, 1, 2]}, CAP) == render(v, {"n": "a1", "items": [3, 1, 2]}, CAP)


@pytest.mark.parametrize(("source", "where"), [
    ("Hello {{ name }", "line 1, column 15"),
    ("ok\nb {% frob %}", "line 2, column 6"),
    ("ok\n\nb {{ 1 + }}", "line 3, column"),
])
def test_a_template_that_does_not_compile_is_named_with_its_line_and_column(source: str, where: str) -> None:
    problem = compile_problem(source, "text")
    assert problem is not None and problem.startswith(f"text: {where}")
    assert compile_problem("Hello {{ name }}", "text") is None


def test_a_filter_that_fails_inside_jinja_fails_the_render_as_a_template_error() -> None:
    # jinja2's truncate asserts its length is at least 3: an AssertionError, not one of jinja's errors
    with pytest.raises(TemplateError, match="AssertionError"):
        render(TemplateVersion("t", "en", 1, "{{ title|truncate(2) }}", "x", None), {"title": "Hello there"}, 10_000)


def test_there_is_no_random_filter_so_every_render_of_a_version_is_the_same_bytes() -> None:
    assert compile_problem("{{ [1, 2, 3]|random }}", "text") is not None
