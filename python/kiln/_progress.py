"""The compile progress display: a tqdm bar when tqdm is installed, else one terminal line on
stderr, rewritten in place. The C++ core reports (step, done, total): ("lowering", i, n) per
kernel, then ("compiling", n, n) while the C compiler runs, the long step."""

import os
import sys


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """Callable handed to the core; close() removes the display."""

    def __init__(self, label, stream=None):
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._bar = None
        self._tqdm = _tqdm()
        self._line_shown = False

    def __call__(self, step, done, total):
        if self._tqdm is not None:
            if self._bar is None:
                self._bar = self._tqdm(total=total or None, desc=f"kiln: {self._label}", unit="kernel",
                                       file=self._stream, leave=False)
            if total and self._bar.total != total:
                self._bar.total = total
            self._bar.set_postfix_str(step, refresh=False)
            self._bar.update(max(0, done - self._bar.n))
            return
        text = f"kiln: {self._label}: {step} {done}/{total}" if total else f"kiln: {self._label}: {step}"
        self._stream.write("\r" + text + "\033[K")
        self._stream.flush()
        self._line_shown = True

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._line_shown:
            self._stream.write("\r\033[K")
            self._stream.flush()
            self._line_shown = False


def make_progress(progress, label):
    """``progress``: True (always show), False (never), None (show when stderr is a terminal and
    the environment variable KILN_PROGRESS is not 0)."""
    if progress is None:
        if os.environ.get("KILN_PROGRESS", "") == "0":
            return None
        isatty = getattr(sys.stderr, "isatty", None)
        progress = bool(isatty and isatty())
    return Progress(label) if progress else None
