"""Rebuild demo/bpe/class/ines_zip.zip, the BPE demo's one zip submission, from demo/bpe/zip_source/.

Ines's code and README are plain files under zip_source/ (written by hand, not a submission). She
compresses her folder `bpe/` in macOS's Finder, so the archive holds that one top folder, a `.DS_Store`
and the `__MACOSX/` copies of resource forks the intake must ignore. Made once and committed; grading never
runs this. Byte-stable (fixed timestamps and order):

    .venv/bin/python demo/bpe/build_zip.py
"""
from __future__ import annotations

import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "zip_source"
OUT = HERE / "class" / "ines_zip.zip"
WHEN = (2026, 11, 28, 9, 15, 0)
# The start of an AppleDouble file (a resource fork's copy): magic number and version, no entries.
APPLE_DOUBLE = bytes.fromhex("00051607" "00020000") + bytes(16) + bytes(2)


def main() -> None:
    files = {f"bpe/{name}": (SOURCE / name).read_bytes() for name in ("README.md", "tokenizer.py", "training.py")}
    files["bpe/.DS_Store"] = b"\x00\x00\x00\x01Bud1" + bytes(24)
    files.update({f"__MACOSX/bpe/._{name}": APPLE_DOUBLE for name in ("tokenizer.py", "training.py")})
    with zipfile.ZipFile(OUT, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=WHEN)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    print(f"wrote {OUT.relative_to(HERE.parents[1])} ({len(files)} entries)")


if __name__ == "__main__":
    main()
