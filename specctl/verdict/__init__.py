"""Verdicts: live measurements of a running server against the profile's gates."""
