"""The walgate the tests start (livewalgate.WALGATE) runs as installed in production, where hypothesis (a test
dependency) is absent: kio would otherwise register hypothesis strategies for its types at every start."""

from __future__ import annotations

import subprocess

from livewalgate import WALGATE, walgate_env


def test_the_walgate_command_runs_the_cli_without_importing_hypothesis() -> None:
    done = subprocess.run([WALGATE[0], "-X", "importtime", *WALGATE[1:], "--help"], capture_output=True, text=True,
                          env=walgate_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: walgate"), done.stdout  # the CLI's own parser ran
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"walgate.gateway.config", "kio.static._phantom"} <= imported  # the CLI's and the kio module that asks for it
    assert "hypothesis" not in imported  # its package never loads (only the refused hypothesis.strategies shows)
