"""Apache Kafka as one KRaft node (broker + controller) on loopback, from the Maven Central jars."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from cdcbridge.localstack.artifacts import ensure_component
from cdcbridge.localstack.errors import StackError
from cdcbridge.localstack.java import find_java
from cdcbridge.localstack.process import ProcessRecord, require_free_port, start_service

_LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.state.name=state.change.logger
logger.state.level=WARN
"""


def _server_properties(host: str, port: int, controller_port: int, data_dir: Path) -> str:
    # A static voter set needs no quorum flag at format time and works the same on Kafka 3.9 and 4.x.
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{controller_port}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data_dir}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=168
"""


def _broker_answers(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": _silent})
    metadata = admin.list_topics(timeout=1.0)
    return bool(metadata.brokers)


class _SilentLogger:
    def log(self, *args: object, **kwargs: object) -> None:
        return None


_silent = _SilentLogger()


def _cluster_id(work: Path) -> str:
    """One id per data folder, kept beside it: a formatted folder refuses any other id."""
    path = work / "cluster.id"
    if not path.exists():
        path.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
    return path.read_text().strip()


def start_kafka(state_dir: Path, host: str, port: int, controller_port: int, heap_mb: int = 512) -> ProcessRecord:
    """Format the KRaft log folder (once) and start the node; ready when a client gets broker metadata."""
    require_free_port("Kafka", host, port)
    require_free_port("Kafka controller", host, controller_port)
    jars = ensure_component("kafka")
    java = find_java(17, purpose="Apache Kafka 4.x")
    work = state_dir / "kafka"
    data = work / "data"
    work.mkdir(parents=True, exist_ok=True)
    properties = work / "server.properties"
    properties.write_text(_server_properties(host, port, controller_port, data))
    (work / "log4j2.properties").write_text(_LOG4J2)
    base = [
        str(java.java), f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC",
        "-Dlog4j2.configurationFile=file:" + str(work / "log4j2.properties"),
        f"-Dkafka.logs.dir={work / 'logs'}", "-cp", str(jars / "*"),
    ]  # fmt: skip
    cluster_id = _cluster_id(work)
    fmt = subprocess.run(
        [*base, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties), "--ignore-formatted"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if fmt.returncode != 0:
        log = state_dir / "kafka-format.log"
        log.write_text(fmt.stdout + fmt.stderr)
        raise StackError(f"formatting the Kafka log folder {data} failed; see {log}")
    bootstrap = f"{host}:{port}"
    return start_service(
        "kafka", [*base, "kafka.Kafka", str(properties)], state_dir=state_dir, endpoint=bootstrap,
        ready=lambda: _broker_answers(bootstrap), timeout=120,
    )  # fmt: skip
