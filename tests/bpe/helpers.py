"""Shared by the BPE lesson's tests: its folders, and its reference imported without staying in sys.modules."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "grader" / "bpe"
ASSIGNMENT = ROOT / "assignments" / "bpe"
REFERENCE = ROOT / "solutions" / "bpe"
VARIANTS = Path(__file__).resolve().parent / "variants"
FILES = ("training.py", "tokenizer.py")


def load(folder: Path, name: str) -> ModuleType:
    """`folder/name.py` as a module of its own (never registered under its plain name)."""
    spec = importlib.util.spec_from_file_location(f"_bpe_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # solutions/ stays as committed
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = dont_write
    return module


# Mistakes outside the bug catalogue, as patches (file, exact text of the reference, replacement) on solutions/bpe.
# Wanting room for one merge: vocab_size == 256 + len(special_tokens) is refused, though the contract allows it.
REFUSES_MINIMUM = (("training.py", "    if vocab_size < 256 + len(special_tokens):\n",
                    "    if vocab_size <= 256 + len(special_tokens):\n"),)
# The bytes -> id table built before the special tokens are added: encode raises KeyError on a new special token,
# and the caller's vocab is never touched.
IDS_BEFORE_SPECIALS = (
    ("tokenizer.py", "        self.ids = {token: i for i, token in self.vocab.items()}  # bytes -> id\n", ""),
    ("tokenizer.py", "        self.special_tokens = list(special_tokens or [])\n",
     "        self.ids = {token: i for i, token in self.vocab.items()}\n"
     "        self.special_tokens = list(special_tokens or [])\n"),
)
# An encode that changes the caller's dict, then raises: the error must not hide the change.
CHANGES_VOCAB_THEN_RAISES = (
    ("tokenizer.py", "        self.vocab = dict(vocab)  # a copy: adding special tokens never changes the caller's dict\n",
     "        self.vocab, self.given = dict(vocab), vocab\n"),
    ("tokenizer.py", "        pieces = self.special_re.split(text) if self.special_re else [text]\n",
     "        self.given[max(self.given) + 1] = b'<stored>'\n        raise KeyError(text)\n"),
)


def patched(patches) -> dict:
    """{file name: text} of the reference with `patches` applied, each exactly once."""
    sources = {name: (REFERENCE / name).read_text(encoding="utf-8") for name in FILES}
    for name, old, new in patches:
        assert sources[name].count(old) == 1, (name, old)
        sources[name] = sources[name].replace(old, new)
    return sources
