"""What a store without notifications says about them (MySQL, SQLite): servers on it
are woken through a Bus, or poll, and claim when woken (ADR 0004)."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.stores._protocol import Capabilities, ClaimCallback, ClaimWatch, NotifyCallback


class Unnotified:
    """The notification half of the Store protocol, for a store that has none."""

    capabilities = Capabilities(listen_notify=False, claim_on_notify=False)
    database = "this database"  # for the message of ``listen``

    async def listen(self, callback: NotifyCallback) -> None:
        raise NotImplementedError(f"{self.database} has no notifications: use a Bus")

    def listening(self) -> bool:
        return False

    def job_claim_watch(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        on_claimed: ClaimCallback,
    ) -> ClaimWatch | None:
        return None  # no LISTEN connection to claim on: servers claim when woken
