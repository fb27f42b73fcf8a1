"""The grading engine, one package per stage: intake (taking in submissions), sandbox, running, judging,
results, admin (the course after a run), release (what students get), devtools; lessons sit beside them as
folders with a lesson.toml (see docs/architecture.md)."""
