"""``evolve-bench``: where cuda-evolve stands against its peers, measured side by side."""
