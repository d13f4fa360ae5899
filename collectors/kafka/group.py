"""How the Kafka collector joins its consumer group: the consumer's settings, static
membership, and whether it is in the group right now (``/readyz``).

Static membership (KIP-345, Kafka >= 2.3): a member that rejoins with the same
``group.instance.id`` within the session timeout gets its partitions back without
a rebalance. The id is ``collectors.kafka.group_instance_id``, else the
``POD_NAME`` environment variable (the Kubernetes manifest sets it from the
downward API), else none: a dynamic member.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer
from kafka.coordinator.base import MemberState

from collectors.kafka.config import GROUP_INSTANCE_ID, KafkaConfig

# Under ``collectors.kafka.consumer``. kafka-python waits 30 s by default for a
# broker that is down, and the stop flag is only seen between attempts: SIGTERM
# would wait that long (about a Kubernetes grace period). Its reconnect backoff
# grows to 30 s, so a broker that came back would be noticed up to 30 s late.
# ``consumer`` may set them higher for slow handshakes.
_CONSUMER_DEFAULTS = {
    "max_poll_records": 500,
    "bootstrap_timeout_ms": 5000,
    "reconnect_backoff_max_ms": 5000,
}


def consumer_settings(
    config: KafkaConfig, environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """The consumer's kafka-python settings: ours, then ``consumer`` and ``security``."""
    settings = {
        "bootstrap_servers": config.bootstrap_servers,
        "group_id": config.group_id,
        "enable_auto_commit": False,  # offsets are committed after processing
        "auto_offset_reset": "earliest",
        **_CONSUMER_DEFAULTS,
        **config.consumer,
        **config.security,
    }
    instance_id = group_instance_id(config, environ)
    if instance_id is not None:
        settings["group_instance_id"] = instance_id
    return settings


def group_instance_id(config: KafkaConfig, environ: Mapping[str, str]) -> str | None:
    """The static member id: ``group_instance_id``, else ``POD_NAME``; None: dynamic member."""
    if not config.static_membership:
        return None
    if config.group_instance_id is not None:
        return config.group_instance_id
    pod_name = environ.get("POD_NAME", "").strip()
    if not pod_name:
        return None
    if re.fullmatch(GROUP_INSTANCE_ID, pod_name) is None:
        raise ValueError(
            f"POD_NAME {pod_name!r} is not a valid Kafka group instance id (letters, digits, "
            "'.', '_', '-'): set collectors.kafka.group_instance_id or static_membership: false"
        )
    return pod_name


def in_group(consumer: KafkaConsumer) -> bool:
    """A stable member of its group whose coordinator connection is up.

    kafka-python keeps a member STABLE, with its assignment, while the broker is
    unreachable; only the coordinator lookup tells (it answers None once the
    connection dropped). A stable member with no partitions (more replicas than
    partitions) is in the group: it takes partitions over on the next rebalance.
    """
    return consumer.group_metadata().state is MemberState.STABLE and coordinator_known(consumer)


def coordinator_known(consumer: KafkaConsumer) -> bool:
    """The group coordinator is known and its connection up (no public API tells)."""
    return consumer._coordinator.coordinator() is not None
