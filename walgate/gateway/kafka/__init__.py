"""The Kafka listener: connection loop, per-API handlers, long-poll fetch."""
