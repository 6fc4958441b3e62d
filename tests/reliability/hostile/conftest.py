"""Fixtures of the hostile-server tests: the loopback tripwire and the figures summary."""

from tests.reliability.hostile.figures import hostile_lines
from tests.reliability.security.tripwire import fake_dns, loopback_only

__all__ = ["fake_dns", "loopback_only"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = hostile_lines()
    if lines:
        terminalreporter.section("hostile servers (issue 8)")
        for line in lines:
            terminalreporter.write_line(line)
