"""The per rate key counters: jobs admitted and started by key, for the busiest keys.

Owns RateKeyTally, one per MeterProvider (the two observable counters are registered
once per provider and fed by every server observed through it). The event handlers
(``_metrics``) add to it on the server's loop: a dict lookup and an add per event.
The exporter's thread reads it: each collection names at most ``reported`` keys, the
ones with the most admissions and starts in the last full ``epoch`` (then in the
current one, then by name), so a fleet of 100,000 tenants exports a bounded set of
series, and a busy key keeps its series from one scrape to the next. Both counters
name the same keys. A key's totals are cumulative for the life of the process, so a
key that comes back into the set goes on from where it was; a key's first observation
is 0, so its series is born at zero. Keys idle for two epochs are forgotten once more
than ``keep`` keys are held (memory stays bounded too).
Never spells a metric name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from kilnotel import _names as n
from kilnotel._instruments import observable

EPOCH = 60.0  # seconds of activity that rank the keys
_SAME = 1.0  # seconds during which a collection reuses the last ranking (both counters)


class RateKeyTally:
    def __init__(self, reported: int = n.RATE_KEYS_REPORTED, epoch: float = EPOCH,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reported = reported
        self.keep = 10 * reported
        self._epoch = epoch
        self._clock = clock
        # written on the loop: key -> [admitted, started, last event epoch number]
        self._totals: dict[str, list[int]] = {}
        # the exporter's thread only
        self._epoch_no = 0
        self._epoch_start = clock()
        self._marks: dict[str, int] = {}  # events per key at the start of this epoch
        self._last: dict[str, int] = {}  # events per key in the last full epoch
        self._chosen: list[str] = []
        self._chosen_at = -_SAME
        self._attrs: dict[str, dict[str, str]] = {}
        # the keys each counter has reported: a key's first observation is 0, so its
        # series is born at zero and increase() counts its first jobs (observability
        # notes: counters born at zero); after that its cumulative total, which goes on
        # from where it was if the key leaves the reported set and comes back
        self._shown: tuple[set[str], set[str]] = (set(), set())

    def admitted(self, key: str, count: int) -> None:
        cell = self._totals.get(key)
        if cell is None:
            cell = self._totals[key] = [0, 0, self._epoch_no]
        cell[0] += count
        cell[2] = self._epoch_no

    def started(self, key: str) -> None:
        cell = self._totals.get(key)
        if cell is None:
            cell = self._totals[key] = [0, 0, self._epoch_no]
        cell[1] += 1
        cell[2] = self._epoch_no

    def top(self) -> list[tuple[str, int, int]]:
        """(key, admitted, started) of the keys to report now, busiest first."""
        now = self._clock()
        totals = self._totals.copy()  # one C call: safe against the loop's inserts
        if now - self._chosen_at < _SAME:  # the same keys, their totals now
            return [(k, totals[k][0], totals[k][1]) for k in self._chosen if k in totals]
        sums = {key: cell[0] + cell[1] for key, cell in totals.items()}
        if now - self._epoch_start >= self._epoch:
            self._last = {k: v - self._marks.get(k, 0) for k, v in sums.items()}
            self._marks = sums
            self._epoch_start = now
            self._epoch_no += 1
            self._forget(totals)
        marks, last = self._marks, self._last
        ranked = sorted(sums, key=lambda k: (-last.get(k, 0), -(sums[k] - marks.get(k, 0)), k))
        self._chosen = ranked[:self.reported]
        self._chosen_at = now
        return [(k, totals[k][0], totals[k][1]) for k in self._chosen]

    def _forget(self, totals: dict[str, list[int]]) -> None:
        if len(totals) <= self.keep:
            return
        for key, cell in totals.items():
            if cell[2] < self._epoch_no - 1:
                self._totals.pop(key, None)
                self._marks.pop(key, None)
                self._attrs.pop(key, None)
                for shown in self._shown:
                    shown.discard(key)

    def observations(self, field: int) -> Iterable[Observation]:
        out = []
        shown = self._shown[field]
        for key, admitted, started in self.top():
            attrs = self._attrs.get(key)
            if attrs is None:
                attrs = self._attrs[key] = {n.RATE_KEY: key}
            if key in shown:
                out.append(Observation(admitted if field == 0 else started, attrs))
            else:
                shown.add(key)
                out.append(Observation(0, attrs))
        return out


def rate_key_tally(meter: Meter) -> RateKeyTally:
    """A RateKeyTally with its two counters registered on ``meter`` (call once per
    provider: through ``_instruments.shared``)."""
    tally = RateKeyTally()

    def admitted(options: CallbackOptions) -> Iterable[Observation]:
        return tally.observations(0)

    def started(options: CallbackOptions) -> Iterable[Observation]:
        return tally.observations(1)

    observable(meter, n.RATE_LIMIT_ADMITTED, admitted)
    observable(meter, n.RATE_LIMIT_STARTED, started)
    return tally
