"""The delivery worker's counters for this process (exported as metrics, read by tests)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stats:
    """Counters for this process (exported as metrics, read by tests)."""

    claimed: int = 0
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    fenced: int = 0
    reclaimed: int = 0
    released: int = 0
    deferred: int = 0
    held: int = 0
    lease_extensions: int = 0
    claim_batches: int = 0  # claims that took work (their sizes: relay_claim_batch_size)
