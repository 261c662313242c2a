"""(c) kcat (librdkafka as packaged by Debian): 1,000 lines in, the same lines out."""

import shutil
import subprocess

import pytest

from conftest import missing_dependency
from wireutil import create_topic, unique_topic

KCAT = shutil.which("kcat")
LINES = 1_000


@pytest.mark.timeout(120)
def test_kcat_produce_consume(broker):
    if KCAT is None:
        missing_dependency("kcat not installed (make deps installs it with apt-get)")
    topic = create_topic(broker, unique_topic("rt-kcat"), 1)
    lines = [f"kcat line {i:05d}" for i in range(LINES)]
    p = subprocess.run(
        [KCAT, "-P", "-b", broker.bootstrap, "-t", topic, "-X", "acks=all",
         "-X", "broker.address.family=v4"],
        input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=60)
    assert p.returncode == 0, f"kcat -P exited {p.returncode}: {p.stderr}"

    c = subprocess.run(
        [KCAT, "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-X", "broker.address.family=v4"],
        text=True, capture_output=True, timeout=60)
    assert c.returncode == 0, f"kcat -C exited {c.returncode}: {c.stderr}"
    got = c.stdout.splitlines()
    assert len(got) == LINES, f"kcat read {len(got)} lines, expected {LINES}; stderr: {c.stderr[-2000:]}"
    assert got == lines
