"""Fixtures of the verdict tests: the scripted HTTP servers of test_client_http, shared with test_points."""

from tests.verdict.test_client_http import serve as serve
