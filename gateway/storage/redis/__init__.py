"""The redis backend of every storage port."""
