"""The pure core: resolve inputs into capture facts, check them, and build the launch Plan. No I/O."""
