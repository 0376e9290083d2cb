"""Flows compose the parts (profile -> plan -> release -> verdict -> ledger) into one command's steps."""
