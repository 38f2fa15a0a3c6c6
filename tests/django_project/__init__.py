"""A Django project for the tests, configured in the test process itself.

Django's settings are process-global and configured once: :func:`configure` does it the first time any test
module of the Django backend asks (under pytest-xdist, once per worker), with every database alias pointing
nowhere yet. An integration test then points an alias at its own freshly migrated database
(:func:`point_at`), as pytest-django points its aliases at a test database.
"""

from __future__ import annotations

import django
from django.conf import settings
from django.db import connections
from psycopg.conninfo import conninfo_to_dict

NOWHERE = {"ENGINE": "django.db.backends.postgresql", "NAME": "not_pointed_at_a_database_yet",
           "HOST": "127.0.0.1", "PORT": "1"}
DEFAULT_FROM_EMAIL = "Shop <shop@example.com>"


def configure() -> None:
    """Django configured for the backend (idempotent): aliases ``default`` and ``outbox`` on PostgreSQL, and
    ``sqlite``, which the backend must refuse."""
    if settings.configured:
        return
    settings.configure(
        DATABASES={"default": dict(NOWHERE), "outbox": dict(NOWHERE),
                   "sqlite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        EMAIL_BACKEND="outbox_mailer.django.EmailBackend",
        DEFAULT_FROM_EMAIL=DEFAULT_FROM_EMAIL,
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()


def point_at(alias: str, url: str | None) -> None:
    """The alias's next connection goes to the database of ``url`` (None: nowhere); its current one is closed."""
    connection = connections[alias]
    connection.close()
    if url is None:
        connection.settings_dict.update(NOWHERE)
        return
    info = conninfo_to_dict(url)
    connection.settings_dict.update(NAME=info["dbname"], USER=info.get("user", ""),
                                    PASSWORD=info.get("password", ""), HOST=info.get("host", ""),
                                    PORT=str(info.get("port", "")))
