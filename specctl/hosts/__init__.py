"""Hosts: where releases run. One small transport interface; `local` now, SSH in the next step."""
