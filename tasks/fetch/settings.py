"""Every knob of the fetch engine in one place (environment variables ``RECRAWL_<NAME>``).

``FetchSettings()`` reads the environment; ``FetchSettings(concurrency=4)`` overrides in code;
``settings.model_copy(update={...})`` derives a variant. The pure policies the engine asks
(pacing, AIMD, backoff, retries, robots cache, validator trust) are built from these values
by the ``*_policy`` properties, so there is one source of truth for each number.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from models.fetching.net_policy import AddressPolicy, parse_networks
from models.fetching.politeness import AimdLimit, PacingPolicy, RetryPolicy, ThrottleBackoff
from models.fetching.robots_policy import ROBOTS_MAX_BYTES, RobotsCachePolicy
from models.fetching.validators import ValidatorPolicy

DEFAULT_USER_AGENT = "recrawler/0.1 (+https://example.invalid/recrawler; ops@example.invalid)"
DEFAULT_CONTENT_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "text/plain",
    "text/xml",
    "application/xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/json",
)


class FetchSettings(BaseSettings):
    """Settings of the fetch engine; every field can be set as ``RECRAWL_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="RECRAWL_", frozen=True, extra="forbid")

    # Identity: the full User-Agent header names a contact URL; robots.txt groups are
    # matched against the bare product token (RFC 9309 section 2.2.1).
    user_agent: str = DEFAULT_USER_AGENT
    robots_token: str = "recrawler"

    # How requests leave the process: directly, through a forward proxy, or through a
    # scraping API (GET <api_url>/fetch?url=<target>) whose own concurrency cap is learned
    # by an AIMD gate that starts at, and never exceeds, api_concurrency.
    mode: Literal["direct", "api", "proxy"] = "direct"
    api_url: str | None = None
    # Secrets: never in a repr, a log line, a WARC record or a history row. The API key goes
    # in the ``api_key_header`` header of API requests (archives strip it); a proxy URL may
    # carry user:password. Set them in the environment (RECRAWL_API_KEY, RECRAWL_PROXY_URL)
    # or name a Prefect Secret block holding the key (``api_key_block``, see with_secrets).
    api_key: SecretStr | None = None
    api_key_header: str = "X-Api-Key"
    api_key_block: str | None = None
    proxy_url: SecretStr | None = None
    api_concurrency: Annotated[int, Field(ge=1)] = 8
    api_plan_backoff_s: Annotated[float, Field(ge=0)] = 1.0  # API pause after a plan 429
    # The client (see tasks.fetch.client): aiohttp used directly, or httpx with its own pool.
    http_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    # How long a host name's resolved addresses are kept (tasks.fetch.net_guard.DnsCache,
    # shared by the batches of a process): one lookup per host per dns_ttl_s; every use
    # judges the cached addresses again, and a connection only ever goes to one of them.
    dns_ttl_s: Annotated[float, Field(ge=0)] = 300.0
    # Address policy (models.fetching.net_policy): loopback, private, link-local (cloud metadata),
    # multicast and reserved addresses are refused, after DNS resolution and on every
    # redirect hop, unless in one of these CIDR networks (env: comma-separated). The sandbox
    # and loopback tests pass sandbox.SANDBOX_NETWORKS ("127.0.0.0/8", "::1/128").
    allowed_networks: Annotated[tuple[str, ...], NoDecode] = ()

    # Concurrency: workers (requests in flight in the whole batch) and the per-host AIMD
    # limit (start, fixed ceiling, floor; below 1 the pacing gap is stretched by 1/limit).
    concurrency: Annotated[int, Field(ge=1)] = 16
    host_concurrency_start: Annotated[float, Field(gt=0)] = 1.0
    host_concurrency_ceiling: Annotated[float, Field(gt=0)] = 1.0
    host_concurrency_floor: Annotated[float, Field(gt=0)] = 0.125

    # Pacing: gap = delay_factor x last fetch duration within [min_delay_s, max_delay_s],
    # at least the robots.txt Crawl-delay (if honoured, capped). A latency above
    # slow_latency_factor x the host's moving average stops the limit from growing.
    delay_factor: Annotated[float, Field(ge=0)] = 10.0
    min_delay_s: Annotated[float, Field(ge=0)] = 1.0
    max_delay_s: Annotated[float, Field(ge=0)] = 30.0
    honour_crawl_delay: bool = True
    crawl_delay_cap_s: Annotated[float, Field(ge=0)] = 30.0
    slow_latency_factor: Annotated[float, Field(gt=1)] = 2.0

    # Throttling (429/503/challenge): Retry-After, else a doubling pause. A Retry-After up to
    # retry_after_cap_s is waited within the batch (a minute or more is logged); a longer
    # one is not waited for: the host's pages are recorded throttled, the reason naming when.
    throttle_backoff_s: Annotated[float, Field(ge=0)] = 60.0
    throttle_backoff_cap_s: Annotated[float, Field(ge=0)] = 3600.0
    retry_after_cap_s: Annotated[float, Field(ge=0)] = 3600.0

    # Retries: attempts per URL (first included), exponential backoff with jitter, and a
    # budget per batch of max(retry_budget_min, retry_budget_ratio x URLs).
    max_attempts: Annotated[int, Field(ge=1)] = 3
    retry_base_s: Annotated[float, Field(ge=0)] = 1.0
    retry_cap_s: Annotated[float, Field(ge=0)] = 60.0
    retry_budget_ratio: Annotated[float, Field(ge=0)] = 0.1
    retry_budget_min: Annotated[int, Field(ge=0)] = 10

    # Guard rails on every response: total time per attempt (connect, headers, whole body,
    # redirect hops), decoded body size, decoded/raw ratio (decompression bombs), content
    # types, redirects.
    request_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    connect_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    max_body_bytes: Annotated[int, Field(ge=1)] = 10 * 1024 * 1024
    max_decompression_ratio: Annotated[float, Field(gt=1)] = 100.0
    accepted_content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES
    accept_missing_content_type: bool = True
    max_redirects: Annotated[int, Field(ge=0)] = 5

    # robots.txt (RFC 9309): at least 500 KiB parsed, at least 5 redirects followed; good
    # answers and 4xx kept robots_ttl_s, 5xx/unreachable (disallow all) robots_error_ttl_s.
    robots_max_bytes: Annotated[int, Field(ge=ROBOTS_MAX_BYTES)] = ROBOTS_MAX_BYTES
    robots_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    robots_max_redirects: Annotated[int, Field(ge=5)] = 5
    robots_ttl_s: Annotated[float, Field(ge=0)] = 24 * 3600.0
    robots_error_ttl_s: Annotated[float, Field(ge=0)] = 3600.0

    # Conditional requests and the checks of a host's validators (models.fetching.validators).
    conditional_requests: bool = True
    validator_min_probes: Annotated[int, Field(ge=0)] = 2
    validator_probe_rate: Annotated[float, Field(ge=0, le=1)] = 0.05
    validator_min_evidence: Annotated[int, Field(ge=1)] = 3

    # Admission: URLs one host lane may hold, URLs one batch may hold.
    max_host_queue: Annotated[int, Field(ge=1)] = 100_000
    max_batch_urls: Annotated[int, Field(ge=1)] = 1_000_000
    # Tail: once at most this share of a batch's hosts (at least one; batches of two hosts
    # or more) still has work, the batch is in its tail (throttled, failing or slow hosts
    # it waits on) and gives its active place back (``tasks.cycle.work.ActiveBatches``), so
    # another batch starts fetching from healthy hosts. 0 turns it off.
    tail_host_share: Annotated[float, Field(ge=0, lt=1)] = 0.25
    seed: int | None = None  # jitter and probe sampling; None = fresh randomness

    @field_validator("allowed_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: Any) -> Any:
        if isinstance(value, str):  # RECRAWL_ALLOWED_NETWORKS="127.0.0.0/8,::1"
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, list | tuple):
            parse_networks(value)  # ValueError naming the bad network
            return tuple(v.strip() for v in value)
        return value

    @model_validator(mode="after")
    def _check(self) -> FetchSettings:
        if self.min_delay_s > self.max_delay_s:
            raise ValueError(
                f"min_delay_s ({self.min_delay_s}) must not exceed max_delay_s ({self.max_delay_s})"
            )
        floor, start, ceiling = (
            self.host_concurrency_floor,
            self.host_concurrency_start,
            self.host_concurrency_ceiling,
        )
        if not floor <= start <= ceiling:
            raise ValueError(
                "host concurrency must satisfy floor <= start <= ceiling, got "
                f"{floor} <= {start} <= {ceiling}"
            )
        if self.mode == "api" and not self.api_url:
            raise ValueError("mode 'api' needs api_url (RECRAWL_API_URL)")
        if self.mode == "proxy" and not self.proxy_url:
            raise ValueError("mode 'proxy' needs proxy_url (RECRAWL_PROXY_URL)")
        if not self.robots_token or any(c.isspace() or c == "/" for c in self.robots_token):
            raise ValueError(
                f"robots_token must be a bare product token like 'recrawler', "
                f"got {self.robots_token!r}"
            )
        return self

    @property
    def address_policy(self) -> AddressPolicy:
        return AddressPolicy.from_strings(self.allowed_networks)

    def with_secrets(self) -> FetchSettings:
        """These settings with the API key read from the Prefect Secret block named by
        ``api_key_block`` (inside a flow or task run; unchanged when no block is named)."""
        if not self.api_key_block:
            return self
        from prefect.blocks.system import Secret

        block: Any = Secret.load(self.api_key_block)  # sync in a sync caller
        value = block.get()
        return self.model_copy(update={"api_key": SecretStr(str(value))})

    @property
    def pacing_policy(self) -> PacingPolicy:
        return PacingPolicy(self.delay_factor, self.min_delay_s, self.max_delay_s)

    @property
    def initial_limit(self) -> AimdLimit:
        return AimdLimit(
            self.host_concurrency_start,
            self.host_concurrency_floor,
            self.host_concurrency_ceiling,
        )

    @property
    def throttle_policy(self) -> ThrottleBackoff:
        return ThrottleBackoff(
            self.throttle_backoff_s,
            max(self.throttle_backoff_cap_s, self.throttle_backoff_s),
            self.retry_after_cap_s,
        )

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            self.max_attempts, self.retry_base_s, max(self.retry_cap_s, self.retry_base_s)
        )

    @property
    def robots_cache_policy(self) -> RobotsCachePolicy:
        return RobotsCachePolicy(self.robots_ttl_s, self.robots_ttl_s, self.robots_error_ttl_s)

    @property
    def validator_policy(self) -> ValidatorPolicy:
        return ValidatorPolicy(
            self.validator_min_probes, self.validator_probe_rate, self.validator_min_evidence
        )

    def retry_budget(self, urls: int) -> int:
        """Retries one batch of ``urls`` URLs may spend in total."""
        return max(self.retry_budget_min, int(self.retry_budget_ratio * urls))
