"""Built-in sources: synthetic, Kafka topic, directory."""
