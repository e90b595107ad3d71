"""What one rank runs: the worker and the user loop through accelerate_core (the only harness
code that trains through the core)."""
