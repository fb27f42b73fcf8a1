"""Writing results: records under OUT, what each student is told, and the class report."""
