"""Realistic receipts: a text body and an HTML body of about 1.8 KB together, varied per row.

Each row is an order confirmation with its own customer, address, two to six items, totals and
links, so that bodies differ in length and content the way a shop's receipts do (about 1.5-2.2
KB, 1.8 KB on average); deterministic per row number. ``insert`` puts a batch of them into
``email_deliveries`` with one INSERT ... SELECT FROM unnest(...), the public contract.
"""

from __future__ import annotations

import json
import random

FIRST = ["Zoë", "Liam", "Amélie", "Noah", "Sofía", "Mateo", "Hannah", "Lukas", "Chloé", "Oliver", "Emma", "Jonas",
         "Léa", "Elias", "Mia", "Finn", "Ines", "Paul", "Lina", "Ben"]
LAST = ["Müller", "Schmidt", "Dubois", "García", "Rossi", "Novak", "Jansen", "Kowalski", "Silva", "Nielsen",
        "Bernard", "Fischer", "Moreau", "Lopez", "Weber", "Costa"]
STREETS = ["Lindenstraße", "Rue de la Paix", "Calle Mayor", "Via Roma", "Kerkstraat", "High Street",
           "Hauptstraße", "Avenue Jean Jaurès"]
CITIES = [("10115", "Berlin"), ("75002", "Paris"), ("28013", "Madrid"), ("00184", "Roma"), ("1012 AB", "Amsterdam"),
          ("EC1A 1BB", "London"), ("80331", "München"), ("69007", "Lyon")]
PRODUCTS = [("Blue ceramic mug, 350 ml", 1290), ("Espresso beans, single origin (250 g)", 1100),
            ("Pour-over kettle, gooseneck, 1 l", 4990), ("Paper filters, size 02 (100 pcs)", 590),
            ("Hand grinder, conical burr", 6900), ("Oolong tea, loose leaf (100 g)", 1450),
            ("Glass teapot with infuser", 2990), ("Cold brew bottle, 1 l", 2490), ("Milk frother, stainless", 1990),
            ("Gift card", 2500), ("Linen tea towel, natural", 890), ("Travel tumbler, 400 ml, black", 2290)]
METHODS = ["Visa ending in 4242", "Mastercard ending in 5454", "PayPal", "SEPA direct debit", "Apple Pay"]
CARRIERS = ["DHL", "UPS", "DPD", "La Poste Colissimo", "PostNL"]

TEXT = """Hello {first},

Thank you for your order #{order} of {date}. We have received your payment and your parcel is being packed.

Order summary
{lines}
Subtotal: EUR {subtotal}
Shipping ({carrier}): EUR {shipping}
Total (incl. VAT EUR {vat}): EUR {total}
Paid with {method}
Estimated delivery: 2-4 business days

Delivery address
{name}
{street} {house}
{zip} {city}

Track your order: https://shop.example.com/orders/{order}?t={token}
Questions? Reply to this email or write to help@example.com.

-- The Example Shop team
"""

HTML = """<!doctype html><html><body style="font-family:Arial,sans-serif;color:#222">
<p>Hello {first},</p>
<p>Thank you for your order <b>#{order}</b> of {date}. We have received your payment.</p>
<table style="border-collapse:collapse;width:100%">{rows}
<tr><td>Shipping ({carrier})</td><td style="text-align:right">EUR {shipping}</td></tr>
<tr><td><b>Total</b> (incl. VAT EUR {vat})</td><td style="text-align:right"><b>EUR {total}</b></td></tr></table>
<p>Paid with {method}.</p>
<p>{name}<br>{street} {house}<br>{zip} {city}</p>
<p><a href="https://shop.example.com/orders/{order}?t={token}">Track your order</a></p>
<p style="font-size:12px;color:#777">You get this email because you ordered at shop.example.com.<br>Example Shop GmbH, Musterweg 1, 10115 Berlin</p>
</body></html>"""


def _eur(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def receipt(n: int) -> dict[str, str]:
    """The row for order n: recipient, subject, text and HTML bodies, metadata (JSON text)."""
    rnd = random.Random(n)
    first, last = rnd.choice(FIRST), rnd.choice(LAST)
    items = rnd.sample(PRODUCTS, rnd.randint(2, 6))
    qty = [rnd.randint(1, 3) for _ in items]
    subtotal = sum(q * price for q, (_, price) in zip(qty, items, strict=False))
    shipping = 0 if subtotal >= 5000 else 490
    total = subtotal + shipping
    zip_code, city = rnd.choice(CITIES)
    fields = {
        "first": first, "name": f"{first} {last}", "order": f"{100000 + n}", "token": f"{rnd.getrandbits(64):016x}",
        "date": f"2025-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}", "street": rnd.choice(STREETS),
        "house": str(rnd.randint(1, 180)), "zip": zip_code, "city": city, "method": rnd.choice(METHODS),
        "carrier": rnd.choice(CARRIERS), "subtotal": _eur(subtotal), "shipping": _eur(shipping),
        "vat": _eur(total * 19 // 119), "total": _eur(total),
    }
    lines = "\n".join(f"{q} x {name}  EUR {_eur(q * price)}" for q, (name, price) in zip(qty, items, strict=False))
    rows = "".join(f'\n<tr><td>{q} x {name}</td><td style="text-align:right">EUR {_eur(q * price)}</td></tr>'
                   for q, (name, price) in zip(qty, items, strict=False))
    return {
        "to": f"{first} {last} <customer{n}@example.com>",
        "subject": f"Your order #{100000 + n} is confirmed",
        "text": TEXT.format(lines=lines, **fields),
        "html": HTML.format(rows=rows, **fields),
        "metadata": json.dumps({"order_id": 100000 + n, "kind": "receipt"}),
    }


INSERT_SQL = """
INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body, html_body, metadata, transport)
SELECT k, ARRAY[t], s, tb, hb, m::jsonb, $7
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(k, t, s, tb, hb, m)
"""


def columns(prefix: str, first: int, n: int) -> list[list[str]]:
    """The INSERT's six arrays for rows first .. first + n - 1, keys prefix + number."""
    rows = [receipt(i) for i in range(first, first + n)]
    return [[f"{prefix}{i}" for i in range(first, first + n)],
            *([r[c] for r in rows] for c in ("to", "subject", "text", "html", "metadata"))]


async def insert(conn, cols: list[list[str]], transport: str | None = None) -> None:
    """One statement: the way an application inserts a batch (its own INSERT, in its transaction)."""
    await conn.execute(INSERT_SQL, *cols, transport)


if __name__ == "__main__":  # body sizes of a sample
    sizes = [len(r["text"].encode()) + len(r["html"].encode()) for r in map(receipt, range(1000))]
    print(f"text + HTML: mean {sum(sizes) / len(sizes):.0f} B, min {min(sizes)}, max {max(sizes)}")
