"""Line editing, history and a busy indicator for ``gateway chat`` on a terminal.

prompt_toolkit reads the line (arrows, Ctrl-A/E, Ctrl-R search, history kept in a file
across runs) while the bot's messages are printed above the prompt, never through it.
The prompt itself shows what the gateway is doing: "思考中… / thinking…" while a turn
runs, "执行中… / running…" once a call was approved.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output
from prompt_toolkit.patch_stdout import patch_stdout

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
PROMPT = "› "


class PromptReader:
    """Reads one line at a time; ``None`` at Ctrl-D or Ctrl-C (the chat ends)."""

    def __init__(
        self,
        *,
        activity: Callable[[], str | None],
        history_file: Path | None = None,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        self._activity = activity
        history: History = InMemoryHistory()
        if history_file is not None:
            history_file.parent.mkdir(parents=True, exist_ok=True)
            history = FileHistory(str(history_file))
        self.session: PromptSession[str] = PromptSession(
            history=history,
            input=input,
            output=output,
            # Redraw the spinner while the gateway works; idle prompts are not redrawn.
            refresh_interval=0.1,
            enable_history_search=False,  # Up recalls the previous line, Ctrl-R searches
        )

    def message(self) -> str:
        """The prompt: the activity with a spinner while busy, else a plain marker."""
        activity = self._activity()
        if activity is None:
            return PROMPT
        frame = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
        return f"{frame} {activity} {PROMPT}"

    def refresh(self) -> None:
        """Redraw the prompt now (the activity changed)."""
        app = self.session.app
        if app.is_running:
            app.invalidate()

    @contextlib.contextmanager
    def printing_above(self) -> Iterator[None]:
        """While active, ``sys.stdout`` writes go above the prompt line."""
        with patch_stdout(raw=True):
            yield

    async def read(self) -> str | None:
        try:
            return await self.session.prompt_async(self.message)
        except (EOFError, KeyboardInterrupt):
            return None
