from pathlib import Path

import pytest

from cdcbridge.config import ApplyTarget, ConfigError, load_config, parse_config

MINIMAL = {"source": {"tables": [{"name": "orders"}]}}


def test_minimal_config_gets_defaults() -> None:
    config = parse_config(MINIMAL, environ={})
    assert config.source.endpoint == "http://127.0.0.1:8900"
    assert config.source.tables[0].partitions == 6
    assert config.coordination.lease_duration_seconds == 20
    assert config.kafka.schema_registry.url.endswith("/apis/ccompat/v7")
    assert config.apply.target is ApplyTarget.DELTA
    assert config.source.tables[0].topics(prefix="cdc", table="orders")


def test_env_references_fill_secrets_and_never_show_in_repr(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "source:\n  access_key_id: ${AK_ID}\n  access_key_secret: ${AK_SECRET}\n  tables: [{name: t}]\n"
        "kafka:\n  bootstrap_servers: ${BOOTSTRAP:-localhost:9092}\n"
    )
    config = load_config(path, environ={"AK_ID": "id-123", "AK_SECRET": "s3cr3t-value"})
    assert config.source.access_key_secret.get_secret_value() == "s3cr3t-value"
    assert config.kafka.bootstrap_servers == "localhost:9092"
    assert "s3cr3t-value" not in repr(config) and "s3cr3t-value" not in str(config.model_dump())


def test_missing_secret_names_the_field_and_the_variable() -> None:
    data = {"source": {"access_key_secret": "${NOT_SET_ANYWHERE}", "tables": [{"name": "t"}]}}
    with pytest.raises(
        ConfigError, match=r"source.access_key_secret: environment variable NOT_SET_ANYWHERE is not set"
    ):
        parse_config(data, environ={})


def test_unknown_key_is_an_error_naming_its_path() -> None:
    data = {"source": {"tables": [{"name": "t", "partitons": 3}]}}
    with pytest.raises(ConfigError) as error:
        parse_config(data, origin="bridge.yaml", environ={})
    assert "invalid configuration in bridge.yaml: source.tables.0.partitons: unknown key" in str(error.value)


def test_wrong_type_names_the_field() -> None:
    data = {"source": {"tables": [{"name": "t", "partitions": "many"}]}}
    with pytest.raises(ConfigError, match=r"source.tables.0.partitions: Input should be a valid integer"):
        parse_config(data, environ={})


def test_missing_tables_is_reported() -> None:
    with pytest.raises(ConfigError, match=r"source: required field is missing"):
        parse_config({}, environ={})


def test_env_override_replaces_one_field() -> None:
    config = parse_config(MINIMAL, environ={"CDCBRIDGE__KAFKA__BOOTSTRAP_SERVERS": "broker:19092"})
    assert config.kafka.bootstrap_servers == "broker:19092"


def test_two_tables_cannot_share_a_topic() -> None:
    data = {"source": {"tables": [{"name": "a", "mutation_topic": "x"}, {"name": "b", "mutation_topic": "x"}]}}
    with pytest.raises(ConfigError, match="topic x is used by both table a and table b"):
        parse_config(data, environ={})


def test_kafka_security_passes_through_to_client_config() -> None:
    data = {
        **MINIMAL,
        "kafka": {"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u",
                               "sasl_password": "pw", "ssl_ca_location": "/ca.pem"},
                  "schema_registry": {"basic_auth_user_info": "u:pw"}},
    }  # fmt: skip
    config = parse_config(data, environ={})
    assert config.kafka.client_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem",
    }
    assert config.kafka.schema_registry.client_config()["basic.auth.user.info"] == "u:pw"


def test_unreadable_file_and_bad_yaml_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read configuration file .*missing\.yaml"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)


def test_secret_files_fill_secrets_without_their_trailing_newline(tmp_path: Path) -> None:
    secret = tmp_path / "ak_secret"
    secret.write_text("from-a-file-s3cr3t\n")
    data = {"source": {"access_key_secret": f"${{file:{secret}}}", "tables": [{"name": "t"}]}}
    config = parse_config(data, environ={})
    assert config.source.access_key_secret.get_secret_value() == "from-a-file-s3cr3t"


def test_a_missing_secret_file_names_the_field_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "secret"
    data = {"source": {"access_key_secret": f"${{file:{missing}}}", "tables": [{"name": "t"}]}}
    with pytest.raises(ConfigError, match=r"source.access_key_secret: cannot read secret file .*nowhere/secret.*fix"):
        parse_config(data, environ={})


def test_a_yaml_error_never_quotes_the_line_that_may_hold_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kafka: {security: {sasl_password: hunter2-secret, protocol: [SASL_SSL}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    message = str(raised.value)
    assert "hunter2-secret" not in message
    assert "is not valid YAML at line 1" in message and "fix the syntax there" in message


def test_apply_spark_defaults_to_every_local_core_and_spark_s_own_settings() -> None:
    spark = parse_config(MINIMAL, environ={}).apply.spark
    assert spark.master == "local[*]"
    assert spark.conf == {} and spark.jars_dir is None and spark.java_home is None and spark.driver_memory is None


def test_apply_spark_conf_takes_yaml_scalars_as_the_text_spark_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "source: {tables: [{name: t}]}\napply:\n  spark:\n    master: spark://head:7077\n    driver_memory: 4g\n"
        "    conf: {spark.executor.instances: 4, spark.ui.enabled: true, spark.hadoop.fs.s3a.endpoint: s3.local}\n"
    )
    spark = load_config(path, environ={"CDCBRIDGE__APPLY__SPARK__JARS_DIR": "/opt/cdcbridge/jars"}).apply.spark
    assert spark.master == "spark://head:7077" and spark.driver_memory == "4g"
    assert spark.conf == {
        "spark.executor.instances": "4",
        "spark.ui.enabled": "true",
        "spark.hadoop.fs.s3a.endpoint": "s3.local",
    }
    assert spark.jars_dir == Path("/opt/cdcbridge/jars")


@pytest.mark.parametrize(
    ("spark", "message"),
    [
        ({"master": "locl[2]"}, r"apply\.spark\.master: .*'locl\[2\]' is not a Spark master URL"),
        ({"conf": {"spark.master": "yarn"}}, r"apply\.spark\.conf: .*set apply\.spark\.master"),
        ({"conf": {"spark.driver.memory": "2g"}}, r"apply\.spark\.conf: .*set apply\.spark\.driver_memory"),
        ({"conf": {"fs.s3a.endpoint": "x"}}, r"apply\.spark\.conf: .*'fs\.s3a\.endpoint' is not a Spark setting"),
        ({"driver_memory": "a lot"}, r"apply\.spark\.driver_memory"),
    ],
)
def test_a_bad_apply_spark_setting_names_the_field(spark: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**MINIMAL, "apply": {"spark": spark}}, environ={})


def test_with_spark_replaces_only_apply_spark() -> None:
    config = parse_config({**MINIMAL, "apply": {"target": "postgres"}}, environ={})
    resolved = config.with_spark(config.apply.spark.model_copy(update={"jars_dir": Path("/jars")}))
    assert resolved.apply.spark.jars_dir == Path("/jars") and resolved.apply.target is ApplyTarget.POSTGRES
    assert config.apply.spark.jars_dir is None


def test_incremental_snapshot_settings_have_defaults_and_a_timeout_beyond_the_refresh() -> None:
    incremental = parse_config(MINIMAL, environ={}).snapshot.incremental
    assert (incremental.chunk_rows, incremental.rows_per_second, incremental.max_key_retries) == (1000, None, 5)
    assert (incremental.fence_refresh_seconds, incremental.exporter_timeout_seconds) == (1.0, 15.0)
    data = {**MINIMAL, "snapshot": {"incremental": {"exporter_timeout_seconds": 2.5, "fence_refresh_seconds": 1}}}
    with pytest.raises(ConfigError, match=r"exporter_timeout_seconds \(2.5\) must exceed .* \(3.0\)"):
        parse_config(data, environ={})
