"""Example constructs and job files: what the demo runs, and a starting point for your own."""
