"""What students get: stubs from the reference, the release folder and zip, the notebook, and the
Gradescope and nbgrader routes."""
