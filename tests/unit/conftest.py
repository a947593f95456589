"""Fixtures of the unit tests: the application in process on the fake backend (tests/inprocess.py)."""

from tests.inprocess import application, client

__all__ = ["application", "client"]
