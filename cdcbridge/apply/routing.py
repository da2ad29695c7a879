"""Which topics the apply job reads, and which table and format each message feeds.

A target row is fed from one format only (the fold refuses a mix: both formats share seq_keys). A table
published in one format is applied from that format's topic; a table published in both is applied from
``apply.prefer_format``'s topic, and with a topic pattern the other format's messages are skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdcbridge.config import BridgeConfig
from cdcbridge.contract import MessageFormat


@dataclass(frozen=True, slots=True)
class TableRoute:
    """A topic of a configured table and the format it carries."""

    topic: str
    table: str
    message_format: MessageFormat


@dataclass(frozen=True)
class TopicRouting:
    """Topic → table/format of every configured table, and the format each table is applied from."""

    routes: dict[str, TableRoute]
    applied_formats: dict[str, MessageFormat]
    pattern: str | None = None

    @classmethod
    def from_config(cls, config: BridgeConfig) -> TopicRouting:
        routes: dict[str, TableRoute] = {}
        applied: dict[str, MessageFormat] = {}
        prefer = config.apply.prefer_format
        for table in config.source.tables:
            topics = table.topics(prefix=config.kafka.topic_prefix, table=table.name)
            for message_format, topic in topics.items():
                routes[topic] = TableRoute(topic, table.name, message_format)
            applied[table.name] = prefer if prefer in topics else next(iter(topics))
        return cls(routes, applied, config.apply.topic_pattern)

    def subscribed_topics(self) -> list[str]:
        """The topics to subscribe to (without a pattern): the applied format's topic of each table."""
        return sorted(
            route.topic for route in self.routes.values() if self.applied_formats[route.table] is route.message_format
        )

    def route(self, topic: str) -> TableRoute | None:
        return self.routes.get(topic)

    def is_applied(self, table: str, message_format: MessageFormat) -> bool:
        return self.applied_formats.get(table) is message_format

    def knows_table(self, table: str) -> bool:
        return table in self.applied_formats
