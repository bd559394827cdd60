"""Answer the requests of an ``llm=mailbox`` run with any command-line model.

    python scripts/answer_mailbox.py runs/sm1/mailbox -- ollama run qwen2.5-coder:32b
    python scripts/answer_mailbox.py --once runs/sm1/mailbox -- llm -m gpt-5

Each request nobody has started answering (``NNNN.request.json`` present, ``NNNN.answer.md``
absent) is claimed by creating its answer file, then the command runs once with the conversation
on its standard input; what it prints is the answer. The file is closed before ``NNNN.answer.done``
is created, so the run never reads half an answer. The command runs without a shell and the prompt
never reaches its command line. A command that fails (non-zero exit, no output, time limit) leaves
its request unanswered, says so on stderr, and is not retried by this process.

Standard library only: it can be copied to the machine where the model is, next to a copy (or a
shared folder) of the mailbox directory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def conversation(messages: list[dict[str, str]]) -> str:
    """The messages as one text, for a model that reads a single prompt."""
    return "\n\n".join(f"Your previous answer was:\n\n{m['content']}" if m["role"] == "assistant"
                       else m["content"] for m in messages)


def unanswered(mailbox: Path) -> list[Path]:
    """Requests nobody has started answering, oldest first."""
    numbers = sorted(int(n) for p in mailbox.glob("*.request.json") if (n := p.name.split(".")[0]).isdigit())
    return [mailbox / f"{n:04d}.request.json" for n in numbers
            if not (mailbox / f"{n:04d}.answer.md").exists()]


def answer(request: Path, command: list[str], timeout_s: float | None) -> bool:
    """Run the model on one request; True if it is answered."""
    number = request.name.split(".")[0]
    answer_file, done = request.with_name(f"{number}.answer.md"), request.with_name(f"{number}.answer.done")
    try:
        messages = json.loads(request.read_text(encoding="utf-8"))["messages"]
        with open(answer_file, "x", encoding="utf-8"):  # claimed: another answerer skips it
            pass
    except FileExistsError:
        return True
    except (OSError, ValueError, KeyError) as exc:
        print(f"{number}: cannot read {request} ({exc})", file=sys.stderr)
        return False
    try:
        out = subprocess.run(command, input=conversation(messages), capture_output=True, text=True,
                             timeout=timeout_s)
        problem = (f"exit code {out.returncode}: {out.stderr.strip()[-500:]}" if out.returncode
                   else "no output" if not out.stdout.strip() else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    if problem:
        answer_file.unlink()
        print(f"{number}: {command[0]} failed ({problem}); left unanswered", file=sys.stderr)
        return False
    answer_file.write_text(out.stdout, encoding="utf-8")
    done.touch()
    print(f"{number}: answered ({len(out.stdout)} characters)", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mailbox", type=Path, help="the run's llm.mailbox (runs/<run.name>/mailbox)")
    parser.add_argument("command", nargs="+", help="the model: reads the prompt on stdin, prints the answer")
    parser.add_argument("--once", action="store_true", help="answer what is waiting, then exit")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between looks (default 2)")
    parser.add_argument("--timeout", type=float, default=None, help="time limit per answer, seconds")
    args = parser.parse_args(argv)
    if not args.mailbox.is_dir():
        parser.error(f"{args.mailbox} is not a directory (start the run with llm=mailbox first)")
    failed: set[Path] = set()
    try:
        while True:
            for request in unanswered(args.mailbox):
                if request not in failed and not answer(request, args.command, args.timeout):
                    failed.add(request)
            if args.once:
                return 1 if failed else 0
            time.sleep(args.poll)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
