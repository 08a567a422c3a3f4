"""Stopping a run on SIGINT or SIGTERM at its next safe point, with what a resume needs.

The first signal asks the run to stop once the work in flight is complete and saved (for `ppo`,
the round in flight: it is finished and checkpointed, so a stop loses nothing); the second
stops at once. Writes are atomic, so even an immediate stop corrupts nothing already written.
The exit codes are the shell's: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType

import torch

from esper.simic.distributed import DistContext

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopRequested(Exception):
    """The run stopped at a safe point after a signal; `message` says how to resume."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code, self.message = exit_code, message


class GracefulStop:
    """Installs the handlers for the length of a run (main thread only) and remembers the first
    signal; a second one restores the default handling and stops at once."""

    def __init__(self, what_finishes: str) -> None:
        self.what_finishes = what_finishes
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in EXIT_CODES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            self.__exit__(None, None, None)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(EXIT_CODES[signal.Signals(signum)])
        self.signum = signum
        name = signal.Signals(signum).name
        print(f"esper: {name}: stopping once {self.what_finishes} (send it again to stop at once)", file=sys.stderr)

    def exit_code(self, ctx: DistContext) -> int:
        """0 to go on, else the exit code: any rank's signal stops every rank at the same point
        (a collective under torchrun, so no rank waits for one that left)."""
        code = EXIT_CODES[signal.Signals(self.signum)] if self.signum is not None else 0
        return int(ctx.all_reduce_max(torch.tensor(float(code))).item())
