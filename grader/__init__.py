"""The Day 13 grading engine: one module per pipeline stage (see docs/architecture.md)."""
