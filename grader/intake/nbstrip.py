"""A notebook's JSON with its outputs, attachments and metadata dropped: what of it is graded (its code).

Run by grader/intake/submissions.py (`notebook_code_cells`) as a script in a process of its own, limited in memory
and time from outside, because a notebook is the student's file: pictures in its outputs make an honest
one 10-20 MB, and 20 MB of JSON built of tiny values would cost the grader's own process far more memory
than any honest file. Standard library only, and nothing of the kit is imported: it starts in ~20 ms.

    python -I -S grader/intake/nbstrip.py MAX_READ MAX_LEFT   (stdin: the notebook's path, its bytes to the end)

Prints the stripped JSON, or exits 3 when the file is over MAX_READ bytes and 4 when what is left is
over MAX_LEFT; any other failure (not JSON, out of memory) exits with Python's status and its message on
stderr.
"""
import json
import sys

# Key -> the empty value left in its place, so the notebook keeps its structure (nbformat's converter of
# old versions reads a notebook's metadata).
DROPPED = {"outputs": list, "attachments": dict, "metadata": dict}


def strip(data) -> None:
    """Drop the DROPPED keys' values wherever they are, in place (a loop, not recursion: the nesting is the
    student's)."""
    todo = [data]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            for key, empty in DROPPED.items():
                if key in value:
                    value[key] = empty()
            todo.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            todo.extend(v for v in value if isinstance(v, (dict, list)))


def main() -> int:
    max_read, max_left = int(sys.argv[1]), int(sys.argv[2])
    # The path's bytes, all of stdin (sent once the limits are on this process): a file's name may hold
    # a newline, so no line is read.
    path = sys.stdin.buffer.read()
    with open(path, "rb") as f:
        raw = f.read(max_read + 1)
    if len(raw) > max_read:
        return 3
    data = json.loads(raw)
    del raw
    strip(data)
    text = json.dumps(data, ensure_ascii=True)
    if len(text) > max_left:
        return 4
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
