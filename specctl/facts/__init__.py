"""Facts read from the outside world: checkpoint metadata now, host facts later. Edge modules."""
