"""What Feishu does to a webhook request: AES-256-CBC encryption and the X-Lark-Signature.

Written from the platform's documented algorithm (the SDK's ``AESCipher`` only decrypts),
so the channel's verification is checked against an independent implementation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from typing import Any

from Crypto.Cipher import AES


def encrypt(plaintext: str, encrypt_key: str) -> str:
    """base64(iv || AES-256-CBC(pkcs7(plaintext))) with key sha256(encrypt_key)."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    raw = plaintext.encode()
    pad = 16 - len(raw) % 16
    raw += bytes([pad]) * pad
    cipher = AES.new(key, AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(raw)).decode()


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """sha256_hex(timestamp + nonce + encrypt_key + raw body), as Feishu signs requests."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def webhook_request(
    payload: dict[str, Any],
    *,
    encrypt_key: str,
    timestamp: int | None = None,
    nonce: str | None = None,
    bad_signature: bool = False,
) -> tuple[dict[str, str], bytes]:
    """Headers and body of one webhook POST, encrypted and signed like Feishu's."""
    body = json.dumps({"encrypt": encrypt(json.dumps(payload), encrypt_key)}).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    nonce = nonce or secrets.token_hex(8)
    sig = signature(ts, nonce, encrypt_key, body)
    if bad_signature:
        sig = "0" * len(sig)
    headers = {
        "Content-Type": "application/json",
        # Lower case on purpose: HTTP header names are case-insensitive, and proxies
        # in front of a gateway often lower-case them (the SDK's dict lookup is not).
        "x-lark-request-timestamp": ts,
        "x-lark-request-nonce": nonce,
        "x-lark-signature": sig,
    }
    return headers, body
