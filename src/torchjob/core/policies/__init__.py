"""One module per policy of the planner, each with its own table-driven tests."""
