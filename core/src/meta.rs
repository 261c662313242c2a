//! meta.db records.
