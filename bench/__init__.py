"""torchjob's benchmarks: ``python -m bench`` runs them all and prints one markdown table."""
