"""The kit's own tools: the benchmark, the README's generated examples and the layout in docs/architecture.md."""
