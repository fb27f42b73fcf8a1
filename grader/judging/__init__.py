"""Judging: the hidden tests' assertions and tolerances, the score of a submission, the scan of its source,
its deliverables, integrity findings, late penalties and the final total."""
