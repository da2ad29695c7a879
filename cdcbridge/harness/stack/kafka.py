"""Apache Kafka as one KRaft node (broker + controller) on loopback, from the Maven Central jars."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from cdcbridge.harness.processes import ProcessRecord, require_free_port, start_service
from cdcbridge.harness.stack.artifacts import ensure_component
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java

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


#: Bind addresses that mean "every interface": Kafka refuses to advertise them, clients cannot connect to them.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def advertised_host_for(bind_host: str, advertised_host: str | None = None) -> str:
    """The address clients are told to use: `advertised_host` if given, else the bind address, else (for a
    wildcard bind) loopback. To reach a wildcard-bound broker from other machines, name this machine."""
    if advertised_host:
        return advertised_host
    return "127.0.0.1" if bind_host in WILDCARD_HOSTS else bind_host


def _server_properties(
    host: str, port: int, controller_port: int, data_dir: Path, advertised_host: str | None = None
) -> str:
    # A static voter set needs no quorum flag at format time and works the same on Kafka 3.9 and 4.x.
    advertised = advertised_host_for(host, advertised_host)
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{advertised}:{controller_port}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{advertised}:{port}
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
# The log cleaner takes its dedupe buffer from the heap at start (128 MiB by default): too much for a small node.
log.cleaner.dedupe.buffer.size=16777216
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


def new_cluster_id() -> str:
    """A random KRaft cluster id as Kafka writes them (URL-safe base64 of a UUID), never starting with "-", as
    Kafka's own ``Uuid.randomUuid`` avoids: one in 64 would otherwise read as an option on a command line."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _cluster_id(work: Path) -> str:
    """One id per data folder, kept beside it: a formatted folder refuses any other id."""
    path = work / "cluster.id"
    if not path.exists():
        path.write_text(new_cluster_id())
    return path.read_text().strip()


def start_kafka(
    state_dir: Path, host: str, port: int, controller_port: int, heap_mb: int = 512, advertised_host: str | None = None
) -> ProcessRecord:
    """Format the KRaft log folder (once) and start the node; ready when a client gets broker metadata.

    `host` is the bind address (loopback by default in `cdcbridge stack`); `advertised_host` what clients are told.
    """
    require_free_port("Kafka", host, port)
    require_free_port("Kafka controller", host, controller_port)
    jars = ensure_component("kafka")
    java = find_java(17, purpose="Apache Kafka 4.x")
    work = state_dir / "kafka"
    data = work / "data"
    work.mkdir(parents=True, exist_ok=True)
    properties = work / "server.properties"
    properties.write_text(_server_properties(host, port, controller_port, data, advertised_host))
    (work / "log4j2.properties").write_text(_LOG4J2)
    base = [
        str(java.java), f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC",
        "-Dlog4j2.configurationFile=file:" + str(work / "log4j2.properties"),
        f"-Dkafka.logs.dir={work / 'logs'}", "-cp", str(jars / "*"),
    ]  # fmt: skip
    cluster_id = _cluster_id(work)
    fmt = subprocess.run(
        # One argument, so that an id kept from before new_cluster_id (it may start with "-") is read as the value.
        [*base, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(properties),
         "--ignore-formatted"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if fmt.returncode != 0:
        log = state_dir / "kafka-format.log"
        log.write_text(fmt.stdout + fmt.stderr)
        raise StackError(f"formatting the Kafka log folder {data} failed; see {log}")
    bootstrap = f"{advertised_host_for(host, advertised_host)}:{port}"
    return start_service(
        "kafka", [*base, "kafka.Kafka", str(properties)], state_dir=state_dir, endpoint=bootstrap,
        ready=lambda: _broker_answers(bootstrap), timeout=120,
    )  # fmt: skip


def kafka_listeners(state_dir: Path) -> tuple[str, str, int, int]:
    """(bind host, advertised host, port, controller port) of the broker last started in `state_dir`, read from
    its server.properties, so a restart binds and advertises exactly as before."""
    properties = state_dir / "kafka" / "server.properties"
    try:
        text = properties.read_text()
    except OSError as error:
        raise StackError(f"no Kafka configuration at {properties}; start the stack first ({error})") from None
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    plaintext = next(part for part in values["listeners"].split(",") if part.startswith("PLAINTEXT://"))
    host, port = plaintext.removeprefix("PLAINTEXT://").rsplit(":", 1)
    advertised = values["advertised.listeners"].removeprefix("PLAINTEXT://").rsplit(":", 1)[0]
    controller_port = values["controller.quorum.voters"].rsplit(":", 1)[1]
    return host, advertised, int(port), int(controller_port)


def restart_kafka(state_dir: Path, *, hard: bool = False, down_seconds: float = 0.0) -> ProcessRecord:
    """Stop the broker recorded in `state_dir` and start it again on the same ports and log folder.

    Topics, offsets and producer state survive (the log folder is kept), so clients only see an outage. `hard`
    kills it with SIGKILL (an unclean shutdown: the broker recovers its logs at start) instead of SIGTERM;
    `down_seconds` is how long it stays away. Returns the new process record; only the recorded process (pid and
    start time checked) is ever signalled.
    """
    record = ProcessRecord.load(state_dir, "kafka")
    if record is None or not record.is_running():
        raise StackError(f"no running Kafka broker recorded in {state_dir}; start the stack first")
    host, advertised, port, controller_port = kafka_listeners(state_dir)
    if hard:
        os.kill(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while record.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        (state_dir / "kafka.json").unlink(missing_ok=True)
    else:
        record.stop(state_dir, timeout=60)
    if record.is_running():
        raise StackError(f"the Kafka broker (pid {record.pid}) did not stop; see {record.log}")
    time.sleep(down_seconds)
    return start_kafka(state_dir, host, port, controller_port, advertised_host=advertised)
