"""``llm=mailbox``: an LLM made of files, for a model that is a chat window, an agent or a colleague,
or one the machine running the search cannot reach.

Every call is a numbered request in the mailbox directory (``llm.mailbox``):

- ``NNNN.prompt.md``: the messages as sent, for a person, ending with the file to answer in.
- ``NNNN.request.json``: the same for a program (messages, operator, parents, answer format).
  Written last and atomically: a request is complete once this file exists.
- ``NNNN.answer.md``: the model's whole answer, as text, written by whoever answers.
- ``NNNN.answer.done``: created (empty) once the answer file is complete. The run reads the
  answer only then, so a file being pasted into, saved half-way or still being copied is never
  read. A person creates it after saving; a script after closing the answer file.
- ``NNNN.usage.json`` (optional, before ``.done``): ``{"prompt_tokens": n, "completion_tokens": n}``
  when the answerer knows them; otherwise both are estimated at 4 characters per token.
- ``NNNN.taken``: the run has read the answer (written by the run).

Numbers only grow: a resumed run (or a second one on the same directory) continues after the
highest number present and claims each number by creating its prompt file exclusively, so nothing
is overwritten. A request whose answer was never taken (its wait timed out, or the run stopped)
stays open: the next call with exactly the same messages waits on it instead of writing a new
one, so an answer written late, or while the run was stopped, is used when the run asks that again.
A retry ("your answer could not be used") left open is taken up the same way: asked again for the
first turn, a resumed run is given the earlier (taken, paid for) answer once more (``Completion.again``),
finds it unusable as before and so asks the very retry that is open, and waits on it.

Whatever is in the directory is data: only regular files of the mailbox's own names are read
(no symbolic or hard links, no FIFOs or devices), each with a bound; usage values are whole numbers
of tokens in range. Every fault is an ``LLMError`` (a failed proposal), never another exception.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import re
import stat
import threading
import time
from pathlib import Path

from evolve import markup
from evolve.errors import EvolveError
from evolve.evolution.llm import Completion, LLMError, Messages, Purpose
from evolve.evolution.llm.budget import Prices
from evolve.evolution.llm.log import prompt_hash
from evolve.settings import LLMSettings

log = logging.getLogger(__name__)
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English and code with GPT-style tokenizers
MAX_ANSWER_BYTES = 1 << 20
MAX_REQUEST_BYTES = 64 << 20  # a request file the run wrote: its messages
MAX_USAGE_BYTES = 4096
MAX_TOKENS = 10**9  # per call: more than any model's context, and a float's exact range
KINDS = ("prompt.md", "request.json", "answer.md", "answer.done", "usage.json", "taken")
# the mailbox's own names only: a stray file with a 246-digit number must not set the next number
_NUMBERED = re.compile(r"^(\d{4,9})\.(?:" + "|".join(re.escape(k) for k in KINDS) + r")$")
MAX_NUMBER = 10**9 - 1


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class Mailbox:
    """Thread-safe: each proposer thread waits on its own request."""

    def __init__(self, cfg: LLMSettings, prices: Prices):
        folder = cfg.mailbox
        if not folder:
            raise EvolveError("llm.mailbox is required: the directory where requests and answers are kept")
        self.dir = Path(str(folder)).expanduser().resolve()  # absolute: the run may change directory
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvolveError(f"llm.mailbox={folder}: cannot create it ({exc.strerror})") from None
        self.model = cfg.model or "mailbox"
        self.timeout_s = cfg.timeout_s
        self.poll_s = cfg.poll_s
        self.prices = prices
        self._lock = threading.Lock()
        self._open: dict[str, list[int]] = {}  # prompt hash -> requests never taken, oldest first
        self._again: dict[str, list[str]] = {}  # first turn's hash -> taken answers of open retries
        try:
            names = [p.name for p in self.dir.iterdir()]
        except OSError as exc:
            raise EvolveError(f"llm.mailbox={folder}: cannot list it ({exc.strerror})") from None
        numbers = sorted({int(m[1]) for name in names if (m := _NUMBERED.match(name))})
        self._next = 1 + max(numbers, default=0)
        for n in numbers:
            if f"{n:04d}.request.json" in names and not self._file(n, "taken").exists():
                self._reopen(n)

    def _reopen(self, n: int) -> None:
        """Take up open request ``n``; a retry's earlier answer is kept to be given again."""
        path = self._file(n, "request.json")
        try:
            messages = json.loads(_read(path, MAX_REQUEST_BYTES).decode("utf-8"))["messages"]
            h = prompt_hash(messages)
        except (LLMError, ValueError, KeyError, TypeError) as exc:
            log.warning("mailbox: ignoring %s (%s)", path, exc)
            return
        self._open.setdefault(h, []).append(n)
        earlier = messages[-2] if len(messages) >= 4 else None
        if isinstance(earlier, dict) and earlier.get("role") == "assistant":
            self._again.setdefault(prompt_hash(messages[:-2]), []).append(str(earlier.get("content", "")))

    def _file(self, n: int, kind: str) -> Path:
        return self.dir / f"{n:04d}.{kind}"

    def complete(self, messages: Messages, purpose: Purpose | None = None) -> Completion:
        try:
            return self._complete(messages, purpose)
        except (OSError, ValueError, ArithmeticError) as exc:  # the directory's fault: a failed proposal
            raise LLMError("unreadable", f"mailbox {self.dir}: {exc}") from None

    def _complete(self, messages: Messages, purpose: Purpose | None) -> Completion:
        h = prompt_hash(messages)
        with self._lock:
            waiting = self._open.get(h)
            again = self._again.get(h) if not waiting else None
            if again:
                text = again.pop(0)
                log.info("mailbox: the first turn of an open retry, answered before: its answer again")
                return Completion(text=text, model=self.model, prompt_tokens=0, completion_tokens=0,
                                  cost_usd=0.0, latency_s=0.0, again=True)
            n = waiting.pop(0) if waiting else self._post(messages, h, purpose)
        t0 = time.monotonic()
        try:
            text, usage = self._wait(n)
        except BaseException:  # not answered (timeout, Ctrl-C, unreadable): the request stays open
            if not self._file(n, "taken").exists():
                with self._lock:
                    self._open.setdefault(h, []).append(n)
                    self._open[h].sort()
            raise
        prompt_tokens = usage.get("prompt_tokens", sum(estimate_tokens(m["content"]) for m in messages))
        completion_tokens = usage.get("completion_tokens", estimate_tokens(text))
        log.info("mailbox: took the answer to request %04d (%d characters)", n, len(text))
        return Completion(
            text=text, model=self.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=self.prices.cost(self.model, prompt_tokens, completion_tokens),
            latency_s=time.monotonic() - t0,
        )

    def _post(self, messages: Messages, h: str, purpose: Purpose | None) -> int:
        """Write a new request under the next free number (claimed by creating its prompt file)."""
        while True:
            n, self._next = self._next, self._next + 1
            if n > MAX_NUMBER:
                raise LLMError("unreadable", f"mailbox {self.dir} has used every request number")
            try:
                fd = os.open(self._file(n, "prompt.md"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:  # another process on the same directory
                continue
        now = dt.datetime.now().astimezone()
        until = (now + dt.timedelta(seconds=self.timeout_s)).strftime("%Y-%m-%d %H:%M:%S %Z")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(render_prompt(n, messages, purpose, self._file(n, "answer.md"),
                                  self._file(n, "answer.done"), until))
        request = {
            "number": n, "prompt_hash": h, "model": self.model,
            "proposal": purpose.proposal if purpose else None,
            "operator": purpose.operator if purpose else None,
            "parents": [{"id": i, "name": name} for i, name in purpose.parents] if purpose else [],
            "answer_format": purpose.answer_format if purpose else None,
            "messages": messages,
            "answer_file": self._file(n, "answer.md").name, "done_file": self._file(n, "answer.done").name,
            "created": now.isoformat(timespec="seconds"), "timeout_s": self.timeout_s,
        }
        text = json.dumps(request, indent=1, ensure_ascii=False) + "\n"
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped, so that the file reads back the same
            data = (json.dumps(request, indent=1) + "\n").encode("ascii")
        tmp = self.dir / f".{n:04d}.request.json.tmp"
        tmp.unlink(missing_ok=True)  # never written through a link someone left under this name
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb") as f:
            f.write(data)
        os.replace(tmp, self._file(n, "request.json"))
        log.info("mailbox: request %04d waits for an answer: %s", n, self._file(n, "prompt.md"))
        return n

    def _wait(self, n: int) -> tuple[str, dict[str, int]]:
        """The answer once its ``.done`` marker exists, and the usage the answerer gave, if any."""
        answer, done = self._file(n, "answer.md"), self._file(n, "answer.done")
        deadline = time.monotonic() + self.timeout_s
        while not done.exists():
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("mailbox: no answer to request %04d within %g s", n, self.timeout_s)
                raise LLMError("timeout", f"no answer in {answer} within {self.timeout_s:g} s "
                                          f"({done.name} was not created)")
            time.sleep(min(self.poll_s, left))
        try:
            data = _read(answer, MAX_ANSWER_BYTES)
        except FileNotFoundError:
            raise LLMError("unreadable", f"{done.name} exists but {answer} does not") from None
        text = data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        usage = self._usage(n)
        try:
            with open(self._file(n, "taken"), "x", encoding="utf-8") as f:
                f.write(dt.datetime.now().astimezone().isoformat(timespec="seconds") + "\n")
        except FileExistsError:
            raise LLMError("conflict", f"request {n:04d} was taken by another run using {self.dir}") from None
        return text, usage

    def _usage(self, n: int) -> dict[str, int]:
        """The token counts the answerer gave: whole numbers from 0 to MAX_TOKENS, or the request
        fails (it stays open, to be answered again with a usable file)."""
        path = self._file(n, "usage.json")
        try:
            data = _read(path, MAX_USAGE_BYTES)
        except FileNotFoundError:
            return {}
        try:
            raw = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except ValueError as exc:
            raise LLMError("unreadable", f"{path} is not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise LLMError("unreadable", f"{path} must hold an object: prompt_tokens, completion_tokens")
        usage = {k: raw[k] for k in ("prompt_tokens", "completion_tokens") if k in raw}
        for k, v in usage.items():
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS:
                raise LLMError("unreadable", f"{path}: {k} must be a whole number from 0 to {MAX_TOKENS}, "
                                             f"not {str(v)[:40]}")
        return usage


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number of tokens")


def _read(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of the mailbox, at most ``limit`` of them: never through a link
    (an answer linked to any file on the machine), never a FIFO or device (/dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = "a symbolic link" if path.is_symlink() else exc.strerror
        raise LLMError("unreadable", f"{path} is not readable ({why}): only plain files are read") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LLMError("unreadable", f"{path} is not a plain file: only plain files are read")
        if st.st_nlink != 1:
            raise LLMError("unreadable", f"{path} is a hard link to another file: only plain files are read")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise LLMError("unreadable", f"{path} is larger than {limit} bytes")
    return data


def render_prompt(n: int, messages: Messages, purpose: Purpose | None, answer: Path, done: Path,
                  until: str) -> str:
    """The request as a person reads it: what it is for, how to answer, then every message."""
    title = f"# Request {n:04d}"
    if purpose is not None:
        parents = " and ".join(f"`{name}`" for _, name in purpose.parents) or "no parent"
        title += f": {purpose.operator} of {parents} (proposal {purpose.proposal})"
    out = [
        title, "",
        "Send the messages below to your model as they are: the system message first (where the chat "
        "has no place for it, put it at the top of your first message), then the user message. "
        "Save the model's whole reply, unedited, as the answer.", "",
        f"- Answer file: `{answer}`",
        f"- Then create `{done}` (an empty file). The run reads the answer only once it exists, so "
        "save the answer file as often as you like before that.",
        f"- The run waits until {until}; meanwhile the search goes on with what it has.",
    ]
    if len(messages) > 2:
        out.append("- This continues an earlier request whose answer could not be used: if your chat "
                   "still holds that conversation, send only the last message.")
    if purpose is not None:
        out += ["", f"Answer format (the last message says the same): {purpose.answer_format}"]
    for i, m in enumerate(messages, 1):
        role = str(m.get("role", "user"))
        content = str(m.get("content", ""))
        fence = markup.fence(content, minimum=4)
        label = "Assistant message (the earlier answer)" if role == "assistant" else f"{role.title()} message"
        out += ["", f"## {i}. {label}", "", f"{fence}markdown", content, fence]
    out += ["", "---", f"Write the model's whole answer to {answer}, then create {done}", ""]
    return "\n".join(out)
