"""Fixtures of the security tests: the loopback tripwire, fake DNS, the figures summary."""

from tests.reliability.hostile.figures import refused_lines
from tests.reliability.security.tripwire import fake_dns, loopback_only

__all__ = ["fake_dns", "loopback_only"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = refused_lines()
    if lines:
        terminalreporter.section("address policy (issue 8)")
        for line in lines:
            terminalreporter.write_line(line)
