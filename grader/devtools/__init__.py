"""The kit's own tools: the benchmark and the README's generated examples."""
