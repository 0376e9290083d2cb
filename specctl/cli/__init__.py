"""The command line: one module per command group; `app` only wires them together."""
