"""The demo service's texts: the passages its documents hold (each tenant's policies), the
answers that restate them, and the answers of a generator that strays from its sources
(the "answers stray from the sources" incident).

A healthy answer restates the first context the generator got. A stray answer states the
same policy with a number no context holds, and adds a claim no context makes: what a
hallucinating generator writes, and what a faithfulness judge (HHEM) scores low. The
policies' numbers use the digits 0-5 only and the stray numbers the digits 6-9 only
(``STRAY_DIGITS``), so that a stray answer carries digits none of its contexts has: a
property of the text a test judge can key on (``tests/hhem_checkpoint.py``).
"""

from __future__ import annotations

import zlib

# Per intent, the policies a document states: "{tenant}" and "{n}" filled in.
POLICIES = {
    "billing": (
        "{tenant} invoices are due {n} days after they are issued.",
        "{tenant} refunds a double charge within {n} business days.",
        "{tenant} bills annual plans {n} days before they renew.",
    ),
    "shipping": (
        "{tenant} ships standard orders within {n} business days.",
        "Express delivery with {tenant} takes {n} days.",
        "{tenant} holds a parcel at the depot for {n} days.",
    ),
    "returns": (
        "{tenant} accepts returns within {n} days of delivery.",
        "A refund from {tenant} reaches the card within {n} business days.",
        "{tenant} exchanges faulty items for up to {n} days.",
    ),
    "account": (
        "{tenant} locks an account after {n} failed sign-ins.",
        "A password reset link from {tenant} expires after {n} hours.",
        "{tenant} keeps a closed account for {n} days.",
    ),
}
NUMBERS = (2, 3, 4, 5, 10, 12, 14, 15, 20, 21, 24, 30, 45)  # digits 0-5 only
STRAY_DIGITS = "6789"
STRAY_NUMBERS = (6, 7, 8, 9, 66, 67, 68, 69, 76, 78, 79, 86, 87, 89, 96, 97, 98, 99)
STRAY_CLAIMS = (
    "This applies worldwide, without exception.",
    "No receipt or proof of purchase is ever needed.",
    "Premium customers are exempt from this rule.",
    "The policy was extended last week for everyone.",
)


def _pick(key: str, choices: tuple[str, ...] | tuple[int, ...]) -> int:
    """A stable index into ``choices`` for ``key`` (the same in every run and process)."""
    return zlib.crc32(key.encode()) % len(choices)


def _policy(doc_id: str, tenant: str, intent: str) -> tuple[str, int]:
    """The policy template document ``doc_id`` states for ``intent``, and the tenant's
    number for it (one number per tenant and policy: the documents never disagree)."""
    templates = POLICIES[intent]
    template = templates[_pick(doc_id, templates)]
    return template, NUMBERS[_pick(f"{tenant}/{template}", NUMBERS)]


def passage(doc_id: str, tenant: str, intent: str) -> str:
    """The text of document ``doc_id`` as retrieved for a question of ``intent``."""
    template, number = _policy(doc_id, tenant, intent)
    return template.format(tenant=tenant.capitalize(), n=number)


def answer(doc_id: str, tenant: str, intent: str, *, stray: bool = False) -> str:
    """The answer generated from ``doc_id``, the first context: its policy restated, or
    (``stray``) that policy with a number no document states and an unsupported claim."""
    if not stray:
        return passage(doc_id, tenant, intent)
    template, _ = _policy(doc_id, tenant, intent)
    wrong = STRAY_NUMBERS[_pick(f"stray/{doc_id}/{intent}", STRAY_NUMBERS)]
    claim = STRAY_CLAIMS[_pick(f"claim/{doc_id}", STRAY_CLAIMS)]
    return f"{template.format(tenant=tenant.capitalize(), n=wrong)} {claim}"
