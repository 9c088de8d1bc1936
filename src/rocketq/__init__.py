"""rocketq: a RocketMQ-compatible message broker, storage engine and client SDK."""

__version__ = "0.1.0"
