"""The BPE lesson lends no stand-ins: its two parts never use each other (CONTRACT.md, "One bug costs
one part"), so there is nothing here. The file exists because the engine lends a lesson's stand-ins
from it (forbidden.toml [standins])."""
