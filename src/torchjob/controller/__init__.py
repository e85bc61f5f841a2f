"""The control loop: observe → plan → execute → write status, for one job on one backend."""
