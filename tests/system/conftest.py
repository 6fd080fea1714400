"""Fixtures of the system tests that live in tests/helpers/."""

from tests.helpers.browser import cdp

__all__ = ["cdp"]
