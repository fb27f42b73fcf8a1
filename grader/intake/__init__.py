"""Taking in submissions: fetching them at the deadline, finding them in a folder, and who they belong to."""
