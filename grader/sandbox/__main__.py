"""`python -m grader.sandbox SPEC`: the zygote, as Zygote starts it (SPEC is its JSON request).
`python -m grader.sandbox --check`: which layers work on this machine, and the start-up check's
findings, as a grading run would see them (exit 1 when a run would refuse to grade)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

from grader.sandbox import zygote
from grader.sandbox.confinement import is_root, landlock_abi


def check() -> dict:
    """Which layers work on this machine, and the start-up check's findings, as a grading run would
    see them."""
    found = {"root": is_root(), "landlock_abi": landlock_abi(),
             "pyseccomp": importlib.util.find_spec("pyseccomp") is not None, "python": sys.executable}
    start = time.monotonic()
    try:
        with zygote.Zygote(slots=1) as started:
            try:
                started.wait_ready()
            except zygote.SandboxRefused:
                pass
            found["child_view"] = started.view or {"refused": "the sandbox zygote did not start"}
    except zygote.SandboxUnavailable as exc:
        found["child_view"] = {"refused": str(exc)}
    found["zygote_start_seconds"] = round(time.monotonic() - start, 3)
    return found


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        report = check()
        print(json.dumps(report, indent=2))
        if report["child_view"]["refused"]:
            print(f"\nnot ready to grade: {report['child_view']['refused']}", file=sys.stderr)
            sys.exit(1)
    else:
        zygote.main(json.loads(sys.argv[1]))
        # No interpreter teardown: the attention kernels switched off in this process are Python
        # objects held by the dispatcher for good, which must not outlive the interpreter's own end.
        os._exit(0)
