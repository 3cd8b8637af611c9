"""The operator's read of a chief's /metrics: over aiohttp on the event loop, bounded in time and in size.

The endpoint is the job's own code, reachable by anyone its NetworkPolicy lets in: a body over METRICS_LIMIT
is refused, not read (the trainer's are a few KiB). What the body says is `chiefmetrics`'.
"""

from __future__ import annotations

import logging

import aiohttp

from agents_operator import api

log = logging.getLogger(__name__)

METRICS_LIMIT = 1 << 20
"""Most bytes of the chief's /metrics the operator reads."""
METRICS_CHUNK = 64 << 10


async def fetch(url: str, timeout: float, job: str) -> bytes | None:
    """The /metrics body at `url`, or None when unreadable: not up, not 200, too slow, or over METRICS_LIMIT.
    `job` names the job in the log."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as response,
        ):
            if response.status != 200:
                return None
            body = await _read_capped(response, METRICS_LIMIT)
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        log.debug("metrics of %s not read from %s: %s", job, url, err)
        return None
    if body is None:
        log.warning("metrics of %s at %s refused: larger than %d bytes", job, url, METRICS_LIMIT)
    return body


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` bytes: then no more than about `limit` is read."""
    if (response.content_length or 0) > limit:
        return None
    body = bytearray()
    async for chunk in response.content.iter_chunked(METRICS_CHUNK):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def metrics_port(job: dict) -> int | None:
    """The chief's metrics port, from the job's trainer settings; None when it serves none or cannot run."""
    try:
        parsed = api.parse_job({k: job[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        return parsed.config.metrics_port or None
    except (api.InvalidJob, KeyError, ValueError):
        return None
