"""Flows compose the stages (profile -> plan -> release -> verdict -> ledger) for one command."""
