"""formats builds messages and never sends them: importing it pulls in no Kafka, registry or coordination code."""

from __future__ import annotations

import subprocess
import sys


def test_formats_imports_no_kafka_registry_or_coordination_module() -> None:
    probe = (
        "import sys, cdcbridge.formats\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'confluent_kafka'"
        " or m.startswith(('cdcbridge.kafka', 'cdcbridge.coordination', 'cdcbridge.tablestore')))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == ""
