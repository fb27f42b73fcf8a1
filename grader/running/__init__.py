"""Running submissions: the class run, the calls that cross into the sandboxed child, and what runs there."""
