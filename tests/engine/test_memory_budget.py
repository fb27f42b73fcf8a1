"""The child's memory bound is what it may use beyond what it inherits, not what torch maps.

PyPI's default Linux torch (the CUDA build) maps ~3.2 GB of libraries at import where the CPU build
maps ~0.64 GB; a fixed address-space limit below the first number made every allocation of a child
fail. Here a process reserves 3 GB of address space the way those libraries do (mapped, never
touched), then takes the child's limits: it can still do its work, and a grab stays contained.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from grader.sandbox import DEFAULT_CONFIG
from grader.sandbox.confinement import _set_rlimits, inherited_mapping

CHILD = textwrap.dedent("""
    import mmap, sys
    from grader.sandbox import SandboxConfig
    from grader.sandbox.confinement import _set_rlimits, inherited_mapping
    libraries = mmap.mmap(-1, 3 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          prot=0)  # PROT_NONE  # what a large build maps and never touches
    budget = int(sys.argv[1]) << 20
    _set_rlimits(SandboxConfig(memory_bytes=budget, cpu_seconds=60), None)
    work = bytearray(budget // 2)  # a submission's own work, within the budget
    print("work ok", flush=True)
    try:
        grab = bytearray(2 * budget)
    except MemoryError:
        print("grab refused", flush=True)
    else:
        print("grab allowed", flush=True)
""")


def test_a_large_mapping_inherited_costs_nothing_and_a_grab_is_still_refused():
    done = subprocess.run([sys.executable, "-c", CHILD, "256"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["work ok", "grab refused"]


def test_the_limit_is_the_inherited_mapping_plus_the_budget():
    probe = textwrap.dedent("""
        import resource
        from grader.sandbox import SandboxConfig
        from grader.sandbox.confinement import _set_rlimits, inherited_mapping
        before = inherited_mapping()
        _set_rlimits(SandboxConfig(memory_bytes=100 << 20, cpu_seconds=60), None)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        print(before, soft, hard)
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    before, soft, hard = map(int, done.stdout.split())
    assert before > 0
    # Allow for what the probe mapped between reading and setting (a page or two of the interpreter's).
    assert 0 <= soft - before - (100 << 20) < 16 << 20 and soft == hard


def test_the_default_budget_leaves_room_for_a_correct_submission():
    # Measured: a correct submission's child needs < 32 MB beyond the zygote (16 MB fails torch's lazy
    # imports in the start-up check); the default must keep a wide margin over that.
    assert DEFAULT_CONFIG.memory_bytes >= 128 << 20
    assert inherited_mapping() > 0 and callable(_set_rlimits)
