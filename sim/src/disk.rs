//! SimDisk: partition segment files that know which of their bytes are
//! durable. Every file has `data` (what a read returns: the page cache) and
//! `synced_len` (the prefix that survives a power cut).
//!
//! The model follows the net driver's disk worker (net/src/disk.rs): ops are
//! carried out in the order the core emitted them; a `Sync` fdatasyncs the
//! files touched since the previous `Sync` and promises only what was written
//! *before* it was issued, so an append made while a sync is in flight rides
//! the next one. A write error (a full disk) is kept and reported by the next
//! `Sync`, as on Linux where a failed write-back surfaces at fsync.
//!
//! Faults: a failed fsync (nothing new becomes durable), a full disk (appends
//! write a short prefix and fail), a process crash (the page cache survives:
//! nothing is lost, nothing new is durable), a power cut (unsynced bytes are
//! lost, except that a random prefix of a file's unsynced tail may have been
//! written back: whole batches and a torn one).
//!
//! Simplification: truncates and deletes are durable at once. The core only
//! cuts what is not durable or not valid, and a cut that came back after a
//! power cut would be cut again at the next boot.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, DiskOp, IoError, IoId, PartitionDir};
use rand::RngExt;

pub type FileKey = (PartitionDir, i64);

#[derive(Clone, Debug, Default)]
pub struct SimFile {
    pub data: Vec<u8>,
    /// The prefix of `data` that survives a power cut.
    pub synced_len: usize,
}

/// A `Sync` issued and not completed: what it will make durable.
struct SyncInFlight {
    io: IoId,
    /// Each file dirty when the sync was issued, with its length then.
    covers: Vec<(FileKey, usize)>,
    /// A write error since the previous sync, reported by this one.
    write_error: Option<String>,
}

#[derive(Default)]
pub struct SimDisk {
    files: BTreeMap<FileKey, SimFile>,
    /// Files written or cut since the last `Sync` was issued, by this process.
    dirty: BTreeSet<FileKey>,
    write_error: Option<String>,
    syncs: VecDeque<SyncInFlight>,
    /// While true, appends fail with ENOSPC after writing a short prefix.
    pub full: bool,
    pub bytes_appended: u64,
}

impl SimDisk {
    pub fn files(&self) -> &BTreeMap<FileKey, SimFile> {
        &self.files
    }

    pub fn sync_in_flight(&self) -> bool {
        !self.syncs.is_empty()
    }

    /// Carries out one disk op. Returns a one-line summary for the trace.
    pub fn apply(&mut self, op: DiskOp, rng: &mut impl rand::Rng) -> String {
        match op {
            DiskOp::Append {
                dir,
                segment_base,
                bytes,
            } => {
                let key = (dir, segment_base);
                let file = self.files.entry(key.clone()).or_default();
                self.dirty.insert(key.clone());
                if self.full {
                    // write(2) on a full disk: a short write, then ENOSPC.
                    let written_bytes = rng.random_range(0..=bytes.len());
                    file.data.extend_from_slice(&bytes[..written_bytes]);
                    self.write_error
                        .get_or_insert_with(|| "ENOSPC: no space left on device".into());
                    return format!(
                        "append {} +{}B FAILED (disk full, {written_bytes}B written)",
                        name(&key),
                        bytes.len()
                    );
                }
                file.data.extend_from_slice(&bytes);
                self.bytes_appended += bytes.len() as u64;
                format!(
                    "append {} +{}B -> {}B",
                    name(&key),
                    bytes.len(),
                    file.data.len()
                )
            }
            DiskOp::Sync { io } => {
                let covers = std::mem::take(&mut self.dirty)
                    .into_iter()
                    .filter_map(|key| self.files.get(&key).map(|f| (key.clone(), f.data.len())))
                    .collect::<Vec<_>>();
                let summary = format!("sync#{io} issued covering {} files", covers.len());
                self.syncs.push_back(SyncInFlight {
                    io,
                    covers,
                    write_error: self.write_error.take(),
                });
                summary
            }
            DiskOp::Truncate {
                dir,
                segment_base,
                len,
            } => {
                let key = (dir, segment_base);
                let file = self.files.entry(key.clone()).or_default();
                let len = usize::try_from(len).expect("a segment length fits in memory");
                file.data.truncate(len);
                file.synced_len = file.synced_len.min(len);
                self.dirty.insert(key.clone());
                format!("truncate {} to {len}B", name(&key))
            }
            DiskOp::DeleteSegment { dir, segment_base } => {
                let key = (dir, segment_base);
                self.files.remove(&key);
                self.dirty.remove(&key);
                format!("delete segment {}", name(&key))
            }
            DiskOp::DeletePartition { dir } => {
                self.files.retain(|(d, _), _| *d != dir);
                self.dirty.retain(|(d, _)| *d != dir);
                format!("delete partition {}", dir.dir_name())
            }
        }
    }

    /// Completes the oldest sync in flight, which must be `io` (the core has
    /// one in flight at a time, and the driver completes them in order).
    ///
    /// `fail`: an injected fsync error. `lie`: the planted bug, a fsync that
    /// answers Ok without making anything durable.
    pub fn complete_sync(&mut self, io: IoId, fail: bool, lie: bool) -> Result<(), IoError> {
        let sync = self
            .syncs
            .pop_front()
            .expect("a sync completion without a sync in flight");
        assert_eq!(sync.io, io, "syncs complete in the order they were issued");
        if let Some(e) = sync.write_error {
            return Err(IoError(e));
        }
        if fail {
            return Err(IoError("EIO: injected fsync failure".into()));
        }
        if lie {
            return Ok(());
        }
        for (key, len) in sync.covers {
            if let Some(file) = self.files.get_mut(&key) {
                // A file cut after the sync was issued keeps only what is left.
                let durable_len = len.min(file.data.len());
                file.synced_len = file.synced_len.max(durable_len);
            }
        }
        Ok(())
    }

    /// The process died: the page cache survives, syncs in flight never
    /// answer, and the next process fsyncs only what it touches itself.
    pub fn crash(&mut self) {
        self.syncs.clear();
        self.dirty.clear();
        self.write_error = None;
    }

    /// The machine lost power: unsynced bytes are gone, except a random
    /// prefix of a file's unsynced tail that write-back had reached (which
    /// may end inside a batch: a torn write). Returns the bytes lost.
    pub fn power_cut(&mut self, rng: &mut impl rand::Rng) -> u64 {
        self.crash();
        let mut lost_bytes = 0u64;
        for file in self.files.values_mut() {
            let unsynced = file.data.len() - file.synced_len;
            let kept = if unsynced > 0 && rng.random_bool(0.5) {
                rng.random_range(0..=unsynced)
            } else {
                0
            };
            lost_bytes += (unsynced - kept) as u64;
            file.data.truncate(file.synced_len + kept);
            // What reached the platter is durable now.
            file.synced_len = file.data.len();
        }
        lost_bytes
    }

    /// fsyncs every file, as a driver must at start-up: after a process
    /// crash the page cache still holds bytes that were never synced, and the
    /// core treats everything it recovers as durable (it serves it, and
    /// answers resent batches from it), so the driver makes it so first.
    pub fn sync_everything(&mut self) -> u64 {
        let mut synced_bytes = 0;
        for file in self.files.values_mut() {
            synced_bytes += (file.data.len() - file.synced_len) as u64;
            file.synced_len = file.data.len();
        }
        synced_bytes
    }

    /// What a starting broker finds: every file as it is now.
    pub fn boot_state(&self, meta: Vec<(Vec<u8>, Vec<u8>)>) -> BootState {
        let mut parts: BTreeMap<PartitionDir, Vec<RecoveredSegment>> = BTreeMap::new();
        for ((dir, base), f) in &self.files {
            let segment = RecoveredSegment {
                base_offset: *base,
                bytes: Bytes::from(f.data.clone()),
            };
            parts.entry(dir.clone()).or_default().push(segment);
        }
        let partitions = parts
            .into_iter()
            .map(|(dir, segments)| RecoveredPartition { dir, segments })
            .collect();
        BootState { meta, partitions }
    }
}

fn name((dir, base): &FileKey) -> String {
    format!("{}/{base}", dir.dir_name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::ChaCha8Rng;
    use rand::SeedableRng;

    fn append(disk: &mut SimDisk, rng: &mut ChaCha8Rng, bytes: &[u8]) {
        let op = DiskOp::Append {
            dir: PartitionDir::new("t", 0),
            segment_base: 0,
            bytes: Bytes::copy_from_slice(bytes),
        };
        disk.apply(op, rng);
    }

    fn file(disk: &SimDisk) -> &SimFile {
        &disk.files()[&(PartitionDir::new("t", 0), 0)]
    }

    #[test]
    fn sync_covers_only_what_came_before_it() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
        append(&mut disk, &mut rng, b"def");
        disk.complete_sync(1, false, false).unwrap();
        assert_eq!(
            file(&disk).synced_len,
            3,
            "the append made during the sync is not durable"
        );
        assert_eq!(file(&disk).data.len(), 6);
    }

    #[test]
    fn failed_and_lying_syncs_make_nothing_durable() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
        assert!(disk.complete_sync(1, true, false).is_err());
        assert_eq!(file(&disk).synced_len, 0);
        append(&mut disk, &mut rng, b"d");
        disk.apply(DiskOp::Sync { io: 2 }, &mut rng);
        assert!(disk.complete_sync(2, false, true).is_ok());
        assert_eq!(file(&disk).synced_len, 0);
    }

    #[test]
    fn full_disk_fails_the_next_sync_then_clears() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk {
            full: true,
            ..Default::default()
        };
        append(&mut disk, &mut rng, b"abc");
        disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
        assert!(disk.complete_sync(1, false, false).is_err());
        disk.full = false;
        append(&mut disk, &mut rng, b"x");
        disk.apply(DiskOp::Sync { io: 2 }, &mut rng);
        assert!(disk.complete_sync(2, false, false).is_ok());
    }

    #[test]
    fn crash_keeps_page_cache_power_cut_keeps_at_most_a_prefix() {
        for seed in 0..50 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = SimDisk::default();
            append(&mut disk, &mut rng, b"abc");
            disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
            disk.complete_sync(1, false, false).unwrap();
            append(&mut disk, &mut rng, b"defgh");
            disk.crash();
            assert_eq!(file(&disk).data, b"abcdefgh");
            disk.power_cut(&mut rng);
            let f = file(&disk);
            assert!(
                f.data.len() >= 3 && b"abcdefgh".starts_with(&f.data),
                "seed {seed}: {:?}",
                f.data
            );
            assert_eq!(f.synced_len, f.data.len());
        }
    }
}
