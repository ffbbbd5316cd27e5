"""Postgres storage: migrations, row codecs and the repository of SPEC §4–§5."""
