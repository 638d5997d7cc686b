"""``skippy run`` in a pseudo-terminal, as a person types at it: Ctrl-C, Ctrl-D and the ``/`` commands.

Each test starts the real ``python -m skippy run`` on the default model (pulled by ``make test``)
under pexpect, which gives it a terminal: the kernel's line discipline turns Ctrl-C into SIGINT for
the process and Ctrl-D into the end of input, as in a shell. Replies are greedy (temperature 0).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

REPO = Path(__file__).resolve().parents[2]
PROMPT = ">>> "


class Chat:
    """A ``skippy run`` in a pseudo-terminal; :attr:`log` is everything it wrote (and the echoed input)."""

    def __init__(self, *args: str) -> None:
        self.log = ""
        self.child = pexpect.spawn(sys.executable, ["-m", "skippy", "run", "smollm2", "--n-ctx", "2048",
                                                    "--temperature", "0", "--seed", "1", *args],
                                   cwd=str(REPO), env=dict(os.environ), encoding="utf-8", timeout=120,
                                   dimensions=(40, 200))
        self.expect_exact(PROMPT)  # the model is loaded

    def expect_exact(self, text: str) -> str:
        """Wait for ``text``; returns what came before it."""
        try:
            self.child.expect_exact(text)
        except (pexpect.EOF, pexpect.TIMEOUT) as exc:
            raise AssertionError(f"no {text!r} in:\n{self.log + str(self.child.before)}") from exc
        self.log += self.child.before + self.child.after
        return self.child.before

    def send(self, line: str) -> str:
        """Type ``line`` and Enter; wait for the next prompt; returns what was written in between."""
        self.child.sendline(line)
        self.expect_exact(line + "\r\n")  # the terminal's echo
        return self.expect_exact(PROMPT)

    def leaves(self) -> int:
        """Wait for the process to end; its exit code (no traceback on the way)."""
        self.child.expect(pexpect.EOF)
        self.log += self.child.before
        self.child.close()
        assert "Traceback" not in self.log, self.log
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def chat():
    chats: list[Chat] = []

    def start(*args: str) -> Chat:
        chats.append(Chat(*args))
        return chats[-1]

    yield start
    for c in chats:
        c.close()


def test_ctrl_c_during_a_reply_stops_it_and_the_chat_goes_on(chat) -> None:
    c = chat()
    c.child.sendline("Tell me a long story about a dragon and a knight.")
    c.expect_exact("knight.\r\n")
    c.child.expect(r"\w+\W+\w+\W+\w+")  # the reply is streaming (no limit: it would go on for long)
    c.child.sendintr()
    c.expect_exact("[reply stopped]")
    c.expect_exact(PROMPT)
    # what the reply wrote stays in the conversation: the question and the partial answer
    assert re.search(r"conversation +2 messages", c.send("/show info")), c.log
    c.send("/set parameter num_predict 4")
    reply = c.send("Thank you.")
    assert re.search(r"\w", reply) and "[reply cut at max_tokens]" in reply, c.log
    assert re.search(r"conversation +4 messages", c.send("/show info")), c.log
    c.child.sendline("/bye")
    assert c.leaves() == 0


def test_ctrl_c_at_the_prompt_hints_and_a_second_one_leaves(chat) -> None:
    c = chat()
    c.child.sendintr()
    c.expect_exact("Use Ctrl-C again, Ctrl-D or /bye to leave.")
    c.expect_exact(PROMPT)
    assert "none" in c.send("/show system")  # a line in between: the next Ctrl-C hints again
    c.child.sendline('"""a message of')
    c.expect_exact("... ")
    c.child.sendintr()  # drops the unfinished message, without the hint
    before = c.expect_exact(PROMPT)
    assert "Use Ctrl-C" not in before
    c.child.sendintr()
    c.expect_exact("Use Ctrl-C again, Ctrl-D or /bye to leave.")
    c.expect_exact(PROMPT)
    c.child.sendintr()
    assert c.leaves() == 0


def test_ctrl_d_after_a_ctrl_c_leaves_cleanly(chat) -> None:
    c = chat()
    c.child.sendintr()
    c.expect_exact("Use Ctrl-C again")
    c.expect_exact(PROMPT)
    c.child.sendeof()
    assert c.leaves() == 0


def test_unknown_commands_set_and_show(chat) -> None:
    c = chat("--max-tokens", "8")
    answer = c.send("/foo bar")  # not sent to the model: answered with the commands
    assert "Unknown command '/foo'." in answer and "/set parameter NAME VALUE" in answer and "/bye" in answer
    assert re.search(r"conversation +0 messages", c.send("/show info")), c.log
    assert "Set parameter 'temperature' to '0.5'" in c.send("/set parameter temperature 0.5")
    assert "error: top_k takes an integer, not 'abc'" in c.send("/set parameter top_k abc")
    assert "error: top_p must be in [0, 1]" in c.send("/set parameter top_p 2")
    assert "Available parameters:" in c.send("/set parameter")
    assert "Set system message." in c.send("/set system Answer in one word.")
    shown = c.send("/show")
    assert re.search(r"name +SmolLM2-135M-Instruct", shown) and re.search(r"context +2048 tokens", shown), shown
    assert re.search(r"temperature +0\.5\r\n", shown) and re.search(r"top_k +40 \(default\)", shown), shown
    assert re.search(r"num_predict +8\r\n", shown) and "System message\r\n  Answer in one word." in shown, shown
    c.child.sendline("/bye")
    assert c.leaves() == 0
