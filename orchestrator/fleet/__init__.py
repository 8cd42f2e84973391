"""orch's side of the hosts: the agent client and bootstrap, the protocol, launch groups."""
