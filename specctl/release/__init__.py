"""Releases: a Plan materialised in a directory on a host, started, stopped and switched atomically."""
