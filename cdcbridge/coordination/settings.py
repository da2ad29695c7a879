"""Timings and limits of lease coordination (defaults as the Java Tablestore Stream Client, leases.md §2.9/§5.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CoordinationSettings(BaseModel):
    """Settings of one worker. Durations are seconds. Embedded as the `coordination` section of the YAML config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status_table: str = Field("cdcbridge_status", min_length=1, description="Tablestore table holding the leases")
    lease_duration_seconds: float = Field(
        20.0, gt=0, description="a lease whose counter did not move for this long is expired"
    )
    renew_interval_seconds: float = Field(6.0, gt=0, description="how often held leases are renewed (≈ lease / 3)")
    take_interval_seconds: float = Field(6.0, gt=0, description="how often the lease table is scanned to take leases")
    shard_sync_interval_seconds: float = Field(10.0, gt=0, description="how often shards are listed to create leases")
    parent_poll_interval_seconds: float = Field(5.0, gt=0, description="how often a child re-checks its parents")
    max_records: int = Field(1000, gt=0, description="records per GetStreamRecord call")
    read_ahead: bool = Field(
        True, description="read a shard's next page while the current one is processed (overlaps the network wait)"
    )
    no_progress_abort_seconds: float = Field(
        60.0, gt=0, description="abort (FENCED) when no renew or take reached the store for this long"
    )
    handoff_timeout_seconds: float = Field(
        30.0, gt=0, description="how long a processor may drain before a steal hand-off or a release is forced"
    )
    steals_per_cycle: int = Field(1, ge=0, description="steal requests one worker may make per take cycle")
    self_fence_margin_seconds: float = Field(
        1.0, ge=0, description="an owner stops handing out records this long before a peer may consider it expired"
    )
    idle_fetch_interval_seconds: float = Field(0.5, ge=0, description="pause after a fetch that returned no records")
    task_retry_backoff_seconds: float = Field(1.0, ge=0, description="pause before retrying a failed shard task")
    worker_loop_interval_seconds: float = Field(0.05, gt=0, description="pause between dispatch loops of the worker")
    max_consumer_threads: int = Field(32, gt=0, description="size of the thread pool running shard tasks")
    store_read_retries: int = Field(10, ge=0, description="retries of lease-table reads on transport errors")
    store_retry_backoff_seconds: float = Field(0.1, ge=0, description="back-off step between store retries (×n)")
    store_retry_backoff_cap_seconds: float = Field(1.0, ge=0, description="upper bound of one store back-off")

    @model_validator(mode="after")
    def _renewal_fits_in_lease(self) -> CoordinationSettings:
        fence_at = self.lease_duration_seconds - self.self_fence_margin_seconds
        if self.renew_interval_seconds >= fence_at:
            raise ValueError(
                f"coordination.renew_interval_seconds ({self.renew_interval_seconds}) must be shorter than "
                f"lease_duration_seconds - self_fence_margin_seconds ({fence_at}); use about a third of the lease"
            )
        return self

    @property
    def self_fence_after_seconds(self) -> float:
        """Age of the last successful renewal after which an owner stops acting as owner (I5)."""
        return self.lease_duration_seconds - self.self_fence_margin_seconds
