"""Child processes of ``opsctl up`` and the end-to-end tests: their addresses,
start, health, output and restarts."""
