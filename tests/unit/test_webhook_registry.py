"""The webhook registry (delivery_events/webhooks.py) is the one list of providers: the settings accept each
provider's credentials from it, and the docs' tables name exactly its routes and settings."""

from __future__ import annotations

import re
from pathlib import Path

from outbox_mailer.delivery_events.webhooks import WEBHOOK_PROVIDERS
from outbox_mailer.settings.config import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_settings_hold_one_set_of_credentials_per_registered_provider() -> None:
    schemes = Settings().webhooks.schemes()
    assert list(schemes) == list(WEBHOOK_PROVIDERS)
    assert all(type(scheme) is WEBHOOK_PROVIDERS[name] for name, scheme in schemes.items())
    assert not any(scheme.enabled() for scheme in schemes.values())


def test_the_receivers_table_of_providers_lists_the_registrys_routes_in_order() -> None:
    text = (DOCS / "delivery-events.md").read_text("utf-8")
    assert re.findall(r"^\| [^|]+ \| `POST /webhooks/(\w+)` \|", text, re.M) == list(WEBHOOK_PROVIDERS)


def test_the_configuration_page_names_every_credential_of_every_provider_and_no_other() -> None:
    text = (DOCS / "configuration.md").read_text("utf-8")
    documented: set[str] = set()
    for row in re.findall(r"^\| `OUTBOX_MAILER_WEBHOOKS__([A-Z]+)__([A-Z_]+)`(.*?) \|", text, re.M):
        provider, first, more = row
        documented |= {f"{provider}__{first}", *(f"{provider}__{f}" for f in re.findall(r"`__([A-Z_]+)`", more))}
    expected = {f"{name.upper()}__{field.upper()}" for name, scheme in WEBHOOK_PROVIDERS.items()
                for field in scheme.model_fields}
    assert documented == expected
