"""A local web of many hosts on loopback, with known change rates and configurable behaviours.

The sandbox is the recrawler's embedded target: pages change as seeded Poisson processes read
at a simulated clock (ground truth for freshness), hosts misbehave on request (latency,
throttling, broken validators, robots.txt errors, redirects), and every request is logged from
the server's side so tests can check politeness. See README.md, section "Sandbox web".
"""

from sandbox.api import ApiStats, ScrapingApi
from sandbox.behaviour import HostBehaviour
from sandbox.clock import SimClock
from sandbox.log import RequestLog, RequestRecord
from sandbox.server import RunningSandbox, SandboxServer, serve_sandbox
from sandbox.web import SANDBOX_NETWORKS, SandboxWeb, host_address, host_index

__all__ = [
    "SANDBOX_NETWORKS",
    "ApiStats",
    "HostBehaviour",
    "RequestLog",
    "RequestRecord",
    "RunningSandbox",
    "SandboxServer",
    "SandboxWeb",
    "ScrapingApi",
    "SimClock",
    "host_address",
    "host_index",
    "serve_sandbox",
]
