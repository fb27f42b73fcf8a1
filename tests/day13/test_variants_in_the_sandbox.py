"""Day 13's correct variants (the contract's freedoms, tests/fixtures/correct/) get full code marks when
graded for real: through the sandbox, in pipelined batches, with stand-ins. The in-process graders
already give them full marks (test_graders.py); this proves the engine adds no false "wrong" on the way."""
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from engine_helpers import descendants, kept_zygotes, processes_of, settled, shared_config  # noqa: E402

from grader.admin import killrate  # noqa: E402
from grader.day13 import freedoms  # noqa: E402
from grader.judging import mutants  # noqa: E402
from grader.lesson import load_lesson  # noqa: E402
from grader.running import grade as run  # noqa: E402

DAY13 = load_lesson("day13")
CONFIG = shared_config(call_timeout=3.0)
UIDS = range(CONFIG.uid_base, CONFIG.uid_base + 4)


def test_every_correct_variant_gets_full_code_marks_through_the_sandbox(tmp_path):
    # The contract's freedoms too (grader/day13/freedoms.py), which tests/day13/test_freedoms.py grades in process
    # only: held-out s47r's block.py taking a helper from multihead.py lost every block test in the sandbox alone,
    # once a child answered one module's calls and block's child held only the multi-head stand-in.
    subs = tmp_path / "subs"
    variants = killrate.variants(lesson=DAY13)
    assert variants, "Day 13 has correct variants to grade"
    for folder in variants:
        shutil.copytree(folder, subs / folder.name)
    names = [folder.name for folder in variants]
    for freedom in freedoms.FREEDOMS:
        mutants.write_patched(freedom, DAY13.solutions, subs / f"freedom-{freedom.id}")
        names.append(f"freedom-{freedom.id}")
    out = tmp_path / "out"
    assert run.main(submissions=subs, out=out, jobs=2, config=CONFIG, lesson=DAY13, zygotes=kept_zygotes()) == 0
    full = {"self_attention": 30, "multihead": 25, "positional": 15, "block": 20}
    lost = {}
    for name in names:
        scores = {c: 0.0 for c in full}
        for t in json.loads((out / name / "record.json").read_text())["tests"]:
            if t["component"] in full:
                scores[t["component"]] += t["score"]
        if scores != full:
            lost[name] = scores
    assert not lost, lost
    assert settled(lambda: processes_of(UIDS)) == []
    assert settled(lambda: descendants(os.getpid())) == []
