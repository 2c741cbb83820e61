"""Progress of a search on stderr, phase by phase.

A search runs in phases: the enumeration of candidates (`driver._search`, per work item),
the checks of the best candidates (float64, then the formal verifier: seconds to a minute
each), and the GPU timing of the verified ones (`measure.select_by_time`); the Lax
partitioned search (`partition.py`) runs the first two once per subprogram. Each phase
shows

- on a terminal: a `tqdm` bar (count, elapsed time, a status text), redrawn every second
  while a long step (one formal check) runs;
- otherwise (a log, a pipe, a test capturing stderr): one line when the phase starts, a
  status line at most every `interval` seconds (5 s) while it runs, also when nothing
  advanced (so a log shows that a minute-long check is still running), and one line when
  it ends. Every line starts with `[search]`.

A `Progress(False)` prints nothing and starts no thread: the Python API's default
(`verbose=False`) stays quiet.
"""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    """`with progress.phase("enumeration", total=n, unit="item"): ... progress.advance(status=...)`.

    One phase at a time: starting a phase ends the one before. `advance` counts steps
    (towards `total`, when given) and sets the status text; `end` closes the phase with a
    summary line."""

    def __init__(self, on: bool, label: str = "search", stream=None, interval: float = 5.0):
        self.stream = stream if stream is not None else sys.stderr
        self.on = bool(on) and self.stream is not None
        self.label = label
        self.interval = interval
        self.tty = self.on and _isatty(self.stream)
        self.name = None
        self._lock = threading.RLock()
        self._bar = None
        self._ticker = None
        self._stop = None

    # -- phases --------------------------------------------------------------------------

    def phase(self, name: str, total: int | None = None, unit: str = "", detail: str = "") -> "Progress":
        """Start phase `name` (ending the current one); `detail` goes on its first line.
        Usable as a context manager that ends the phase."""
        self.end()
        if not self.on:
            return self
        with self._lock:
            self.name, self.total, self.unit = name, total, unit
            self.count, self.status = 0, ""
            self.t0 = self.last = time.monotonic()
            if self.tty:
                self._bar = _bar(self.stream, f"[{self.label}] {name}", total, unit, detail)
            else:
                self._line(f"{name}: {detail}" if detail else f"{name} ...")
        self._start_ticker()
        return self

    def advance(self, n: int = 1, status: str | None = None) -> None:
        """`n` more steps done; `status` replaces the status text. Non-terminal output
        prints at most one line every `interval` seconds."""
        if not self.on or self.name is None:
            return
        with self._lock:
            self.count += n
            if status is not None:
                self.status = status
            if self._bar is not None:
                if status is not None:
                    self._bar.set_postfix_str(status, refresh=False)
                self._bar.update(n)
            elif time.monotonic() - self.last >= self.interval:
                self._line(self._summary())

    def set_status(self, status: str) -> None:
        """Replace the status text (`advance(0, status)`)."""
        self.advance(0, status)

    def end(self, status: str | None = None) -> None:
        """End the current phase (a no-op without one), with a summary line."""
        if not self.on or self.name is None:
            return
        self._stop_ticker()
        with self._lock:
            if status is not None:
                self.status = status
            if self._bar is not None:
                self._bar.set_postfix_str(self.status, refresh=False)
                self._bar.close()
                self._bar = None
            else:
                self._line(f"{self.name} done in {time.monotonic() - self.t0:.1f} s" + self._counts())
            self.name = None

    close = end

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.end()

    # -- output ----------------------------------------------------------------------------

    def _counts(self) -> str:
        if self.total is not None:
            c = f"{self.count}/{self.total}" + (f" {self.unit}" if self.unit else "")
        elif self.unit:
            c = f"{self.count} {self.unit}"
        else:
            c = ""
        parts = [x for x in (c, self.status) if x]
        return ": " + ", ".join(parts) if parts else ""

    def _summary(self) -> str:
        return f"{self.name} ({time.monotonic() - self.t0:.0f} s)" + self._counts()

    def _line(self, text: str) -> None:
        self.last = time.monotonic()
        try:
            print(f"[{self.label}] {text}", file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed or broken stderr does not stop the search
            self.on = False

    # -- the ticker: a line (or a redraw) while nothing advances ---------------------------

    def _start_ticker(self) -> None:
        self._stop = threading.Event()
        t = threading.Thread(target=self._tick, args=(self._stop,), name="mirage-progress", daemon=True)
        # kept once started: Ctrl-C inside start() (it waits for the thread) would leave a
        # thread that join() refuses ("cannot join thread before it is started"), raised
        # from the search's clean-up instead of returning what it found; the stop event ends it
        t.start()
        self._ticker = t

    def _stop_ticker(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def _tick(self, stop: threading.Event) -> None:
        period = 1.0 if self.tty else min(1.0, self.interval)
        while not stop.wait(period):
            with self._lock:
                if self.name is None or not self.on:
                    continue
                if self._bar is not None:
                    self._bar.refresh()  # elapsed time moves on while one long step runs
                elif time.monotonic() - self.last >= self.interval:
                    self._line(self._summary())


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _bar(stream, desc: str, total, unit: str, detail: str):
    from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no tqdm monitor thread: the ticker redraws

    fmt = None if total is None else "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} " + unit + " [{elapsed}{postfix}]"
    return Bar(total=total, desc=desc, unit=unit or "it", file=stream, leave=True, dynamic_ncols=True,
               mininterval=0.2, bar_format=fmt, postfix=detail or None)


def enumeration_status(stats, found: dict) -> str:
    """States, pruning counts, candidates and the best cost so far (not yet verified)."""
    best = min((v[1] for v in found.values()), default=None)
    pr = " ".join(f"{k}={v}" for k, v in sorted(stats.pruned.items()))
    return (f"candidates {len(found)}, best " + (f"{best * 1e6:.2f}us" if best is not None else "-")
            + f", states {stats.states}, pruned[{pr}]")
