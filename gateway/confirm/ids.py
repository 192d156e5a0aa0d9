"""Confirmation and call ids: short, unambiguous on a phone screen, random."""

from __future__ import annotations

import secrets

# Crockford base32 without I, L, O, U: nothing to misread on a phone screen.
ID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ID_DIGITS = frozenset("0123456789")
_ID_LETTERS = frozenset("ABCDEFGHJKMNPQRSTVWXYZ")
# 256 is a multiple of the alphabet's 32 symbols: byte % 32 picks each one evenly.
_BYTE_TO_SYMBOL = bytes(ord(ID_ALPHABET[b % 32]) for b in range(256))
# Characters people type for the ones Crockford leaves out.
_CROCKFORD_ALIASES = str.maketrans({"O": "0", "I": "1", "L": "1"})


def new_confirmation_id(length: int = 4) -> str:
    """A short random id with at least one digit and one letter.

    The digit keeps ids apart from English words ("deny", "stop") in a reply; the letter
    keeps them apart from numbers ("前10条").
    """
    while True:
        candidate = secrets.token_bytes(length).translate(_BYTE_TO_SYMBOL).decode()
        if not _ID_DIGITS.isdisjoint(candidate) and not _ID_LETTERS.isdisjoint(candidate):
            return candidate


def new_call_id() -> str:
    """An id for a tool call the gateway makes itself (slash commands)."""
    return f"call_{secrets.token_hex(8)}"


def canonical_id(text: str) -> str:
    """Upper-case and map O->0, I/L->1, as Crockford decoding does."""
    return text.strip().upper().translate(_CROCKFORD_ALIASES)
