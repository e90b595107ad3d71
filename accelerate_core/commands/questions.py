"""Asking one question on a text stream: defaults, re-asking on bad answers, a clear end on EOF.

Reads whole lines from any stream (a terminal or a pipe, which is how the tests drive it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from accelerate_core.errors import AccelerateCoreError, InvalidSettingError, explain
from accelerate_core.launch.config import parse_text

MAX_TRIES = 3
REQUIRED: Any = object()  # a question without a default
SCRIPT_DECIDES = "script decides"  # how a None default (unset, null in the file) is shown


class QuestionnaireAborted(AccelerateCoreError):
    """The questionnaire cannot finish: input ended, or an answer stayed invalid."""


@dataclass
class Asker:
    stdin: TextIO
    stdout: TextIO
    max_tries: int = MAX_TRIES

    def ask(self, key: str, question: str, default: Any = REQUIRED,
            check: Callable[[Any], str | None] | None = None) -> Any:
        """Ask until the answer is a valid value for config key `key`.

        An empty answer takes `default` (REQUIRED: an answer is needed). `check` returns a reason
        when a valid value still does not fit earlier answers.
        """
        shown = "" if default is REQUIRED else f" [{_show(default)}]"
        for attempt in range(1, self.max_tries + 1):
            self.stdout.write(f"{question}{shown}: ")
            self.stdout.flush()
            line = self.stdin.readline()
            if not line:
                self.stdout.write("\n")
                raise QuestionnaireAborted(explain(
                    "standard input", f"it ended before the question about {key!r} was answered",
                    "one answer per line",
                    "answer every question, or use `accelerate-core config --default`"))
            if not self.stdin.isatty():
                self.stdout.write(line.rstrip("\n") + "\n")  # echo, so a piped transcript reads well
            answer = line.strip()
            problem: str | None
            if not answer:
                if default is not REQUIRED:
                    return default
                problem = "an answer is needed (there is no default)"
            else:
                try:
                    value = parse_text(key, answer, f"answer {answer!r}")
                    problem = check(value) if check else None
                    if problem is None:
                        return value
                except InvalidSettingError as exc:
                    problem = str(exc)
            left = self.max_tries - attempt
            self.stdout.write(f"  Not accepted: {problem}" + (f" ({left} tries left)\n" if left else "\n"))
        raise QuestionnaireAborted(explain(
            f"the answers to {key!r}", f"{self.max_tries} answers in a row were not accepted",
            "see the question's choices", "run `accelerate-core config` again"))


def _show(value: Any) -> str:
    if value is None:
        return SCRIPT_DECIDES
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
