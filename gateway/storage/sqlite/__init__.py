"""The sqlite backend of every storage port."""
