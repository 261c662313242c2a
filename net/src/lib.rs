//! doze-net: the tokio adapter around the core, as a library so that the
//! `doze-kafka` binary and the madsim tests run the same server code.
//!
//! Built normally, `tokio` is real tokio and the storage is the disk worker
//! thread, the response file reader and sled (`storage::DiskAndSled`). Built with
//! `RUSTFLAGS="--cfg madsim"`, `tokio` is madsim's simulated runtime, network
//! and clock (the `madsim-tokio` package), and the storage is
//! `simstore::SimStorage`, an in-memory disk and meta store that survives a
//! simulated node kill. `server.rs` and `conn.rs` are the same code in both.

pub mod alloc;
pub mod batches;
pub mod boot;
pub mod budget;
pub mod client;
// A thread and real files: not in a madsim build (see `storage.rs`).
#[cfg(not(madsim))]
pub mod cleaner_work;
pub mod config;
pub mod conn;
pub mod console;
pub mod datadir;
pub mod direct_write;
pub mod dump_log;
// Threads and real files: not in a madsim build (see `storage.rs`).
#[cfg(not(madsim))]
pub mod disk;
#[cfg(not(madsim))]
pub mod filereader;
pub mod metadb;
pub mod metajournal;
pub mod metastore;
pub mod produce_prep;
pub mod quotas;
pub mod server;
#[cfg(madsim)]
pub mod simstore;
pub mod sledsync;
#[cfg(not(madsim))]
mod splice;
pub mod storage;
pub mod syncpool;
pub mod tls;
pub mod tools;
pub mod users;
