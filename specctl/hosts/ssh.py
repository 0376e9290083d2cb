"""SSH hosts as transports: a destination resolved from the ssh_config (hosts/ssh_destination.py)
and a runner over paramiko (hosts/_ssh_runner.py), behind the one Transport every host shares.

An unknown host key is refused unless the caller accepts new keys; a changed key is always refused
(hosts/_host_keys.py).
"""

from __future__ import annotations

from specctl.hosts._ssh_runner import SshRunner
from specctl.hosts.connections import close_at_end
from specctl.hosts.ssh_destination import SshDestination, SshOptions
from specctl.hosts.transport import Transport

__all__ = ["ssh_transport"]


def ssh_transport(
    name: str, destination: SshDestination, options: SshOptions, *, address: str | None = None
) -> Transport:
    """A Transport over SSH; its servers are reached at `address`, by default the SSH hostname."""
    runner = SshRunner(destination, options)
    transport = Transport(name, address or destination.hostname, runner, forward=runner.forward, close=runner.close)
    return close_at_end(transport)  # a command's connections end with it (hosts/connections.py)
