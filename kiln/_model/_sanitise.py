"""What a result may carry into the database: bounded delays, writable and capped text.

Owns the rules applied to every result before the completer writes it; it does no
I/O. An attempt's outcome is decided by the executor, but its error text comes from
user code and its delay from a backoff or a ``Snooze``: a NUL in an exception message
(PostgreSQL's jsonb rejects ``\\u0000``), a lone surrogate (not UTF-8), an infinite or
huge delay ("interval out of range", or past year 9999) would make the whole batch of
results fail. So each of them is made writable here, once, at the boundary.
"""

from __future__ import annotations

import dataclasses

from kiln._model._job import AttemptError, JobResult

MAX_DELAY = 10 * 365 * 24 * 3600.0  # seconds: ten years, far inside every store's range
MAX_ERROR = 2_000  # characters of an attempt's error message kept in the job
MAX_TRACEBACK = 16_000  # characters of its traceback (the head and the tail are kept)


def bounded_delay(delay: float) -> float:
    """``delay`` within [0, MAX_DELAY]; NaN (no meaningful wait) is 0."""
    if not delay > 0:  # NaN and negatives
        return 0.0
    return min(float(delay), MAX_DELAY)


def writable(text: str) -> str:
    """``text`` as every store accepts it: NUL and unencodable code points escaped."""
    if text.isascii() and "\x00" not in text:
        return text
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def capped(text: str, limit: int, *, keep_tail: bool = False) -> str:
    """``text`` cut to about ``limit`` characters, the cut marked in place. With
    ``keep_tail`` (tracebacks: the head says where it began, the tail where it raised)
    a quarter of the room goes to the head and the rest to the tail."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if not keep_tail:
        return f"{text[:limit]} [... kiln cut {cut} more characters]"
    head = limit // 4
    return (f"{text[:head]}\n[... kiln cut {cut} characters here ...]\n"
            f"{text[len(text) - (limit - head):]}")


def sanitised_error(error: AttemptError) -> AttemptError:
    message = capped(writable(error.error), MAX_ERROR)
    trace = capped(writable(error.traceback), MAX_TRACEBACK, keep_tail=True)
    if message is error.error and trace is error.traceback:
        return error
    return dataclasses.replace(error, error=message, traceback=trace)


def sanitised(result: JobResult) -> JobResult:
    """``result`` as it may be written; the common result (no error, no delay) as is."""
    delay, error = result.run_at_delay, result.error
    if error is None and (delay == 0.0 or 0.0 < delay <= MAX_DELAY):
        return result
    fixed_delay = bounded_delay(delay)
    fixed_error = None if error is None else sanitised_error(error)
    if fixed_error is error and fixed_delay == delay:
        return result
    return dataclasses.replace(result, run_at_delay=fixed_delay, error=fixed_error)
