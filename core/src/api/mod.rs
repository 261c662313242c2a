//! One file per Kafka API key.
