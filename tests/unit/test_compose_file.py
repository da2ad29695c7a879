"""docker-compose.yml cannot be started here (no Docker engine); check its wiring instead."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_their_dependencies() -> None:
    services = _compose()["services"]
    assert set(services) == {"kafka", "registry", "emulator", "create-tables", "bridge-1", "bridge-2", "apply",
                             "traffic", "prometheus", "grafana"}  # fmt: skip
    assert services["prometheus"]["profiles"] == services["grafana"]["profiles"] == ["monitoring"]
    assert services["traffic"]["profiles"] == ["traffic"]
    for worker in ("bridge-1", "bridge-2"):
        deps = services[worker]["depends_on"]
        assert deps == {
            **{name: {"condition": "service_healthy"} for name in ("kafka", "registry", "emulator")},
            "create-tables": {"condition": "service_completed_successfully"},
        }
        assert services[worker]["command"][:3] == ["run", "--config", "/config/cdcbridge.yaml"]
        assert services[worker]["command"][-1] == worker
    assert set(services["apply"]["depends_on"]) == {"kafka", "registry", "bridge-1"}
    assert services["traffic"]["depends_on"] == {"create-tables": {"condition": "service_completed_successfully"}}


def test_the_table_set_up_runs_once_per_up_and_tolerates_an_existing_table() -> None:
    """A one-shot: never restarted (its exit 0 releases the workers), and idempotent, since it runs on every `up`."""
    service = _compose()["services"]["create-tables"]
    assert service["restart"] == "no"
    command = service["command"]
    assert command[:3] == ["table", "create", "accounts"]
    assert {"--stream", "--if-not-exists"} <= set(command)
    assert command[command.index("--pk") + 1] == "region:string,id:integer"


def test_under_compose_workers_wait_for_tables_and_the_job_for_topics() -> None:
    from cdcbridge.config import load_config

    environ = {"TABLESTORE_ENDPOINT": "http://emulator:8900", "TABLESTORE_INSTANCE": "cdcbridge",
               "TABLESTORE_ACCESS_KEY_ID": "id", "TABLESTORE_ACCESS_KEY_SECRET": "secret",
               "KAFKA_BOOTSTRAP_SERVERS": "kafka:19092", "SCHEMA_REGISTRY_URL": "http://registry:8080"}  # fmt: skip
    config = load_config(ROOT / "deploy" / "compose" / "cdcbridge.yaml", environ=environ)
    assert config.source.wait_for_tables and config.apply.wait_for_topics


def test_every_long_running_infrastructure_service_has_a_healthcheck() -> None:
    services = _compose()["services"]
    for name in ("kafka", "registry", "emulator"):
        assert services[name]["healthcheck"]["test"][0] == "CMD-SHELL", name


def test_ports_are_published_on_loopback_only() -> None:
    services = _compose()["services"]
    published = {name: spec.get("ports", []) for name, spec in services.items()}
    assert published["kafka"] == ["127.0.0.1:9092:9092"]
    assert published["registry"] == ["127.0.0.1:8081:8080"]
    assert published["emulator"] == ["127.0.0.1:8900:8900"]
    assert all(port.startswith("127.0.0.1:") for ports in published.values() for port in ports)


def test_our_services_share_one_image_and_are_wired_by_environment() -> None:
    services = _compose()["services"]
    ours = ["emulator", "create-tables", "bridge-1", "bridge-2", "apply", "traffic"]
    for name in ours:
        spec = services[name]
        assert spec["build"]["dockerfile"] == "deploy/docker/cdcbridge.Dockerfile"
        env = spec["environment"]
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:19092"
        assert env["SCHEMA_REGISTRY_URL"] == "http://registry:8080/apis/ccompat/v7"
        assert env["TABLESTORE_ENDPOINT"].endswith("http://emulator:8900}")
    assert (ROOT / "deploy" / "docker" / "cdcbridge.Dockerfile").exists()


def test_the_kafka_listener_the_containers_use_is_advertised() -> None:
    env = _compose()["services"]["kafka"]["environment"]
    assert "PLAINTEXT://kafka:19092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:29093"


def test_the_compose_configuration_is_valid_with_the_compose_environment() -> None:
    from cdcbridge.config import load_config

    services = _compose()["services"]
    environ = {k: v.split(":-", 1)[1].rstrip("}") if v.startswith("${") else v
               for k, v in services["bridge-1"]["environment"].items()}  # fmt: skip
    config = load_config(ROOT / "deploy" / "compose" / "cdcbridge.yaml", environ=environ)
    assert config.source.endpoint == "http://emulator:8900"
    assert config.kafka.bootstrap_servers == "kafka:19092"
    assert config.source.access_key_secret.get_secret_value() == "emulator-secret"
