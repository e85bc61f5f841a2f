"""What tests, bench/ and tools/ share, and nothing pytest-specific: paths, the test servers' binaries, the
images the real-node tests run, the operator as a process, the dashboard as a process, the invalid corpus.
bench/ and tools/ import from here, never from a conftest."""
