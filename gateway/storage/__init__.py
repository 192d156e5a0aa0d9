"""Storage ports and their backends (issue 23: storage has its own house).

Today: conversations (``conversations.py``, the port and its memory backend; SQLite and
Redis beside it). The confirmation, grant and inbox stores still live with their domains.
"""
