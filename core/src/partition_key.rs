//! The name of one partition of one incarnation of a topic: a leaf, so that
//! every layer (the partition, its checkpoint, the topics that hold it, the
//! coordinators) can name a partition without naming the layer that holds
//! it (`core/tests/layers.rs`).

use std::sync::Arc;

use uuid::Uuid;

/// Names one partition of one incarnation of a topic: a topic deleted and
/// created again under the same name has a new id, so a sync point or a
/// waiting request of the old one never lands on the new one. The name is
/// the topic's own, shared: keys are cloned for every append (sync points,
/// disk operations), and a clone must not allocate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic: Arc<str>,
    pub id: Uuid,
    pub partition: i32,
}
