"""A command-line "model" for the mailbox tests: answers from a directory of prepared answers.

    python tests/scripted_model.py ANSWERS_DIR < prompt > answer

A prompt asking to repair a failed kernel gets ``ANSWERS_DIR/repair.md``; any other gets the next
of ``ANSWERS_DIR/<n>.md`` in numeric order (the last again once all are given), counted in
``ANSWERS_DIR/given``.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPAIR = "## A kernel that failed"  # the heading of evolve/prompts/repair.md


def main(folder: Path) -> None:
    prompt = sys.stdin.read()
    if REPAIR in prompt:
        sys.stdout.write((folder / "repair.md").read_text())
        return
    answers = sorted((p for p in folder.glob("*.md") if p.stem.isdigit()), key=lambda p: int(p.stem))
    counter = folder / "given"
    given = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(given + 1))
    sys.stdout.write(answers[min(given, len(answers) - 1)].read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
