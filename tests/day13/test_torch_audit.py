"""Every attention in the installed torch is known (grader/running/torch_audit.py): each candidate is banned by
Day 13's forbidden.toml or reviewed, with a reason, in its review file: the audit is what makes its ban of
library attention complete."""
import subprocess
import sys
from pathlib import Path

from grader.running import forbidden

from grader.running import torch_audit
from grader.running.torch_audit import Candidate

KIT = Path(__file__).resolve().parents[2]
POLICY_PATH = KIT / "grader" / "day13" / "forbidden.toml"
POLICY = forbidden.load_policy(POLICY_PATH)


def test_every_attention_candidate_in_the_installed_torch_is_banned_or_reviewed():
    proc = subprocess.run([sys.executable, "-m", "grader.running.torch_audit", "--lesson", "day13"], cwd=KIT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "attention candidates are banned or reviewed" in proc.stdout


def test_a_new_attention_in_torch_fails_the_audit_until_it_is_banned_or_reviewed(tmp_path):
    # What the next torch might add: a plain-Python attention, and a helper that calls softmax.
    package = tmp_path / "torch"
    (package / "newstuff").mkdir(parents=True)
    (package / "newstuff" / "__init__.py").write_text("")
    (package / "newstuff" / "ops.py").write_text(
        "import torch\n"
        "def fused_attention(q, k, v):\n    return (q @ k.transpose(-2, -1)).softmax(-1) @ v\n"
        "class Pooling:\n    def forward(self, x):\n        return torch.softmax(x, -1) * x\n"
        "def unrelated(x):\n    return x + 1\n")
    found = torch_audit.python_candidates(package)
    assert found == [Candidate("torch.newstuff.ops:fused_attention", "its name mentions attention or sdpa"),
                     Candidate("torch.newstuff.ops:Pooling.forward", "it calls a softmax")]
    entries = torch_audit.review_entries(POLICY, POLICY_PATH)
    assert torch_audit.unaccounted(found, POLICY, entries) == found
    reviewed = [{"match": ["torch.newstuff.ops:Pooling"], "reason": "a softmax of one tensor"}]
    assert torch_audit.unaccounted(found, POLICY, entries + reviewed) == found[:1]
    banned = {**POLICY, "python": {**POLICY["python"], "functions": ["torch.newstuff.ops:fused_attention"]}}
    assert torch_audit.unaccounted(found, banned, entries + reviewed) == []


def test_onnx_attention_and_the_compilers_attention_patterns_are_banned():
    banned = [Candidate("torch.onnx.ops._impl:attention_23", ""), Candidate("torch.onnx.ops:attention", ""),
              Candidate("torch._inductor.fx_passes.fuse_attention:_sfdp_pattern_1", "")]
    assert all(torch_audit.banned(c, POLICY) for c in banned)
    assert not torch_audit.banned(Candidate("torch.onnx.ops._impl:_attention_23_fake_impl", ""), POLICY)
    assert torch_audit.banned(Candidate("aten::_flash_attention_backward", ""), POLICY)
    assert not torch_audit.banned(Candidate("onnx::Attention.opset23", ""), POLICY)  # reviewed: its kernel is banned


def test_a_review_entry_without_a_reason_is_refused(tmp_path):
    (tmp_path / "forbidden.toml").write_text('[audit]\nreviewed = "r.toml"\n')
    (tmp_path / "r.toml").write_text('[[reviewed]]\nmatch = ["torch.nn"]\nreason = " "\n')
    policy = forbidden.load_policy(tmp_path / "forbidden.toml")
    try:
        torch_audit.review_entries(policy, tmp_path / "forbidden.toml")
    except ValueError as exc:
        assert "needs a match list and a reason" in str(exc)
    else:
        raise AssertionError("an entry without a reason was accepted")
