"""The memory backend of every storage port."""
