"""The embedded default backend: each replica is a process group on this machine."""
