//! doze-simdisk: the one simulated disk of doze-kafka's tests (`SimDisk`,
//! `disk.rs` says what it models: durable prefixes, directory entries made
//! durable only by a sync, renames and removals a power cut undoes).
//!
//! A crate of its own so that the simulator (`sim/`), the madsim store
//! (`net/src/simstore.rs`) and the core's tests (`core/tests/support`) run on
//! the same disk: a test on a kinder disk passes where the simulator fails.
//! It depends on the core's public I/O types (`DiskOp`, `FileRange`, ...).

pub mod disk;
