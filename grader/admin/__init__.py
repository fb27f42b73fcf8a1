"""The course's admin after a run: a person's overrides, comments and regrade requests, the review page,
similarity, reruns, merging shards, export to the school's gradebook, and how well the graders separate."""
