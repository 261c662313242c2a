//! SimDisk: the segment files of every partition (`.log`, `.index`,
//! `.timeindex`, `.txnindex`), each knowing which of its bytes are durable.
//! Every file has `data` (what a read returns: the page cache), `synced_len`
//! (the prefix that survives a power cut) and `durable` (whether its
//! directory entry does: a file created since the last sync that covered it
//! may vanish whole at a power cut).
//!
//! The model follows the net driver's disk worker (net/src/disk.rs): ops are
//! carried out in the order the core emitted them; a `Sync` fdatasyncs the
//! files touched (or adopted) since the previous `Sync` and promises only
//! what was written *before* it was issued, so an append made while a sync is
//! in flight rides the next one. A write error (a full disk) is kept and
//! reported by the next `Sync`, as on Linux where a failed write-back
//! surfaces at fsync. A `Read` sees every op emitted before it.
//!
//! Faults: a failed fsync (nothing new becomes durable), a full disk (appends
//! write a short prefix and fail), a process crash (the page cache survives:
//! nothing is lost, nothing new is durable), a power cut (unsynced bytes are
//! lost, except that a random prefix of a file's unsynced tail may have been
//! written back: whole batches and a torn one). Each file is cut on its own,
//! so a power cut may keep a `.log`'s unsynced tail and lose its index
//! entries, or the other way round: a crash between a segment roll and its
//! index. Read errors are decided by the world (`World::disk_read`).
//!
//! Directories and cuts: removing a file (a segment, a partition) changes
//! its directory, which is durable only once a sync covering that directory
//! completes (the sync after the removal: production fsyncs the directory
//! of every file it created, removed or adopted). Until then a power cut
//! brings back the file's durable bytes. Likewise a truncate below a file's
//! durable length: until a sync covers the file, a power cut restores the
//! durable bytes from before the cut. Both come back whole, with no draw of
//! randomness.
//!
//! The madsim store (net/src/simstore.rs) uses this model too, with its own
//! latencies and madsim's seeded randomness.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, DiskOp, FileRange, IoError, IoId, PartitionDir, SegmentFile};
use rand::RngExt;

/// One file: a partition directory, a segment's base offset, and which of
/// the segment's four files.
pub type FileKey = (PartitionDir, i64, SegmentFile);

#[derive(Clone, Debug, Default)]
pub struct SimFile {
    pub data: Vec<u8>,
    /// The prefix of `data` that survives a power cut.
    pub synced_len: usize,
    /// The file itself survives a power cut (a sync covered it since it was
    /// created).
    pub durable: bool,
    /// Which incarnation of the name this is: a file deleted and created
    /// again is another file, which a sync issued for the first must not
    /// make durable.
    incarnation: u64,
    /// A truncate cut into the durable bytes and no sync has covered the
    /// file since: what a power cut brings back, and the op number of the
    /// (first) cut.
    cut: Option<(Vec<u8>, u64)>,
}

/// A durable file removed before a sync covered its directory: a power cut
/// brings it back.
#[derive(Clone, Debug)]
struct Unlinked {
    /// What comes back.
    bytes: Vec<u8>,
    /// What the file held when it was removed, and its incarnation: a sync
    /// issued before the removal still makes it durable (up to its length
    /// then) when it completes.
    data: Vec<u8>,
    incarnation: u64,
    /// The op number of the removal.
    at: u64,
}

/// A `Sync` issued and not completed: what it will make durable.
struct SyncInFlight {
    io: IoId,
    /// Each file dirty when the sync was issued, its incarnation and its
    /// length then.
    covers: Vec<(FileKey, u64, usize)>,
    /// Each directory whose entries changed (or that was adopted) before
    /// the sync was issued.
    dirs: Vec<PartitionDir>,
    /// The op number at issue: removals and cuts before it are covered.
    at: u64,
    /// A write error since the previous sync, reported by this one.
    write_error: Option<String>,
}

#[derive(Default)]
pub struct SimDisk {
    files: BTreeMap<FileKey, SimFile>,
    /// Files written, cut or adopted since the last `Sync` was issued, by
    /// this process.
    dirty: BTreeSet<FileKey>,
    /// Directories whose entries changed (a file created or removed) or
    /// that were adopted since the last `Sync` was issued, by this process.
    dirty_dirs: BTreeSet<PartitionDir>,
    /// Durable files removed whose directory no sync has covered since.
    unlinked: BTreeMap<FileKey, Unlinked>,
    /// Counts ops applied: orders removals and cuts against syncs.
    ops: u64,
    write_error: Option<String>,
    syncs: VecDeque<SyncInFlight>,
    next_incarnation: u64,
    /// While true, appends fail with ENOSPC after writing a short prefix.
    pub full: bool,
    /// Planted (harness side): `Adopt` is ignored, as by a driver that never
    /// fsyncs what it found at start-up.
    pub ignore_adopt: bool,
    pub bytes_appended: u64,
    pub bytes_read: u64,
}

impl SimDisk {
    /// An empty disk; `ignore_adopt` plants `PlantedBug::IgnoreAdopt`.
    pub fn new(ignore_adopt: bool) -> Self {
        Self {
            ignore_adopt,
            ..Self::default()
        }
    }

    pub fn files(&self) -> &BTreeMap<FileKey, SimFile> {
        &self.files
    }

    pub fn sync_in_flight(&self) -> bool {
        !self.syncs.is_empty()
    }

    /// The file, created empty (not durable) when absent.
    fn file_mut(&mut self, key: &FileKey) -> &mut SimFile {
        if !self.files.contains_key(key) {
            self.dirty_dirs.insert(key.0.clone());
            self.next_incarnation += 1;
            let file = SimFile {
                incarnation: self.next_incarnation,
                ..SimFile::default()
            };
            self.files.insert(key.clone(), file);
        }
        self.files.get_mut(key).expect("inserted above")
    }

    /// Carries out one disk op (every kind but `Read`, which the world
    /// carries out with `read`). Returns a one-line summary for the trace.
    pub fn apply(&mut self, op: DiskOp, rng: &mut impl rand::Rng) -> String {
        self.ops += 1;
        match op {
            DiskOp::Append {
                dir,
                segment_base,
                file,
                bytes,
            } => {
                let key = (dir, segment_base, file);
                self.dirty.insert(key.clone());
                let full = self.full;
                let f = self.file_mut(&key);
                if full && !bytes.is_empty() {
                    // write(2) on a full disk: a short write, then ENOSPC.
                    let written_bytes = rng.random_range(0..=bytes.len());
                    f.data.extend_from_slice(&bytes[..written_bytes]);
                    self.write_error
                        .get_or_insert_with(|| "ENOSPC: no space left on device".into());
                    return format!(
                        "append {} +{}B FAILED (disk full, {written_bytes}B written)",
                        name(&key),
                        bytes.len()
                    );
                }
                f.data.extend_from_slice(&bytes);
                let len = f.data.len();
                self.bytes_appended += bytes.len() as u64;
                if bytes.is_empty() {
                    return format!("create {}", name(&key));
                }
                format!("append {} +{}B -> {len}B", name(&key), bytes.len())
            }
            DiskOp::Sync { io } => {
                let covers = std::mem::take(&mut self.dirty)
                    .into_iter()
                    .filter_map(|key| {
                        let f = self.files.get(&key)?;
                        Some((key, f.incarnation, f.data.len()))
                    })
                    .collect::<Vec<_>>();
                let summary = format!("sync#{io} issued covering {} files", covers.len());
                self.syncs.push_back(SyncInFlight {
                    io,
                    covers,
                    dirs: std::mem::take(&mut self.dirty_dirs).into_iter().collect(),
                    at: self.ops,
                    write_error: self.write_error.take(),
                });
                summary
            }
            DiskOp::Truncate {
                dir,
                segment_base,
                file,
                len,
            } => {
                let key = (dir, segment_base, file);
                self.dirty.insert(key.clone());
                let at = self.ops;
                let f = self.file_mut(&key);
                let len = usize::try_from(len).expect("a segment length fits in memory");
                let before = f.data.len();
                if len < f.synced_len && f.cut.is_none() {
                    // The cut is not durable until a sync covers the file.
                    f.cut = Some((f.data[..f.synced_len].to_vec(), at));
                }
                // ftruncate(2): a longer length pads with zeros.
                f.data.resize(len, 0);
                f.synced_len = f.synced_len.min(len);
                if before == len {
                    return format!("truncate {} to {len}B (unchanged)", name(&key));
                }
                format!("truncate {} from {before}B to {len}B", name(&key))
            }
            DiskOp::DeleteSegment { dir, segment_base } => {
                let removed = self.remove(|(d, b, _)| *d == dir && *b == segment_base);
                format!(
                    "delete segment {}/{segment_base} ({removed} files)",
                    dir.dir_name()
                )
            }
            DiskOp::DeletePartition { dir } => {
                self.remove(|(d, _, _)| *d == dir);
                format!("delete partition {}", dir.dir_name())
            }
            DiskOp::Adopt { dir, segment_base } => {
                let keys: Vec<FileKey> = self
                    .files
                    .keys()
                    .filter(|(d, b, _)| *d == dir && *b == segment_base)
                    .cloned()
                    .collect();
                let unsynced: usize = keys
                    .iter()
                    .map(|k| self.files[k].data.len() - self.files[k].synced_len)
                    .sum();
                if self.ignore_adopt {
                    return format!(
                        "adopt {}/{segment_base} IGNORED (planted bug; {unsynced}B unsynced)",
                        dir.dir_name()
                    );
                }
                let count = keys.len();
                self.dirty.extend(keys);
                self.dirty_dirs.insert(dir.clone());
                format!(
                    "adopt {}/{segment_base} ({count} files, {unsynced}B unsynced)",
                    dir.dir_name()
                )
            }
            DiskOp::Read { .. } => unreachable!("reads are carried out with SimDisk::read"),
        }
    }

    /// Removes the files `gone` picks (unlink(2)); a durable one stays
    /// recoverable until a sync covers its directory. Returns how many.
    fn remove(&mut self, gone: impl Fn(&FileKey) -> bool) -> usize {
        let keys: Vec<FileKey> = self.files.keys().filter(|k| gone(k)).cloned().collect();
        for key in &keys {
            let f = self.files.remove(key).expect("listed above");
            self.dirty_dirs.insert(key.0.clone());
            if f.durable {
                let bytes = match f.cut {
                    Some((bytes, _)) => bytes,
                    None => f.data[..f.synced_len].to_vec(),
                };
                let unlinked = Unlinked {
                    bytes,
                    data: f.data,
                    incarnation: f.incarnation,
                    at: self.ops,
                };
                self.unlinked.insert(key.clone(), unlinked);
            }
        }
        self.dirty.retain(|k| !gone(k));
        keys.len()
    }

    /// What a reader sees of `range` now: exactly its bytes, or an error
    /// when the file is absent or shorter than the range.
    pub fn read(&mut self, range: &FileRange) -> Result<Bytes, IoError> {
        let key = (range.dir.clone(), range.segment_base, range.file);
        let Some(f) = self.files.get(&key) else {
            return Err(IoError(format!("ENOENT: {} is absent", name(&key))));
        };
        let start = usize::try_from(range.position).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(range.len).unwrap_or(usize::MAX));
        let Some(bytes) = f.data.get(start..end) else {
            return Err(IoError(format!(
                "short read: {} holds {}B, asked {}..{end}",
                name(&key),
                f.data.len(),
                range.position
            )));
        };
        self.bytes_read += range.len;
        Ok(Bytes::copy_from_slice(bytes))
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
        // A failed sync makes nothing durable; the directories it was to
        // cover stay dirty, so the next sync covers their removals (as the
        // net driver does: a directory stays dirty until an fsync of it
        // succeeds). Files are not: the core rewrites what it cannot trust.
        if let Some(e) = sync.write_error {
            self.dirty_dirs.extend(sync.dirs);
            return Err(IoError(e));
        }
        if fail {
            self.dirty_dirs.extend(sync.dirs);
            return Err(IoError("EIO: injected fsync failure".into()));
        }
        if lie {
            return Ok(());
        }
        for (key, incarnation, len) in sync.covers {
            let Some(file) = self.files.get_mut(&key) else {
                // Removed since the sync was issued: what comes back if the
                // removal does is what this sync wrote.
                if let Some(u) = self.unlinked.get_mut(&key) {
                    if u.incarnation == incarnation {
                        u.bytes = u.data[..len.min(u.data.len())].to_vec();
                    }
                }
                continue;
            };
            if file.incarnation != incarnation {
                continue; // deleted and created again since the sync was issued
            }
            // A file cut after the sync was issued keeps only what is left.
            let durable_len = len.min(file.data.len());
            file.synced_len = file.synced_len.max(durable_len);
            file.durable = true;
            if file.cut.as_ref().is_some_and(|(_, at)| *at < sync.at) {
                file.cut = None;
            }
        }
        for dir in &sync.dirs {
            self.unlinked
                .retain(|(d, _, _), u| d != dir || u.at >= sync.at);
        }
        Ok(())
    }

    /// The process died: the page cache survives, syncs in flight never
    /// answer, and the next process fsyncs only what it touches itself.
    pub fn crash(&mut self) {
        self.syncs.clear();
        self.dirty.clear();
        self.dirty_dirs.clear();
        self.write_error = None;
    }

    /// The machine lost power: unsynced bytes are gone, except a random
    /// prefix of a file's unsynced tail that write-back had reached (which
    /// may end inside a batch or an index entry: a torn write); a file no
    /// sync covered since its creation may be gone whole. Each file on its
    /// own. A cut or a removal no sync covered is undone: the file's durable
    /// bytes come back whole. Returns (bytes lost, files lost).
    pub fn power_cut(&mut self, rng: &mut impl rand::Rng) -> (u64, u64) {
        self.crash();
        let mut lost_bytes = 0u64;
        let mut lost_files = Vec::new();
        for (key, file) in self.files.iter_mut() {
            if let Some((bytes, _)) = file.cut.take() {
                lost_bytes += file.data.len().saturating_sub(file.synced_len) as u64;
                file.synced_len = bytes.len();
                file.data = bytes;
                continue;
            }
            if !file.durable && rng.random_bool(0.5) {
                // Its directory entry never reached the disk.
                lost_bytes += (file.data.len() - file.synced_len) as u64;
                lost_files.push(key.clone());
                continue;
            }
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
            file.durable = true;
        }
        for key in &lost_files {
            self.files.remove(key);
        }
        for (key, Unlinked { bytes, .. }) in std::mem::take(&mut self.unlinked) {
            self.next_incarnation += 1;
            let file = SimFile {
                synced_len: bytes.len(),
                data: bytes,
                durable: true,
                incarnation: self.next_incarnation,
                cut: None,
            };
            self.files.insert(key, file);
        }
        (lost_bytes, lost_files.len() as u64)
    }

    /// Bytes a power cut now could take away (a file no sync covered since
    /// its creation may vanish with all it holds), and the files holding
    /// them. An empty file that vanishes takes nothing.
    pub fn unsynced(&self) -> (u64, Vec<String>) {
        let mut bytes = 0u64;
        let mut names = Vec::new();
        for (key, f) in &self.files {
            let at_risk = if f.durable {
                f.data.len() - f.synced_len
            } else {
                f.data.len()
            };
            if at_risk > 0 {
                bytes += at_risk as u64;
                let whole = if f.durable { "" } else { ", the file itself" };
                names.push(format!("{} (+{at_risk}B{whole})", name(key)));
            } else if f.cut.is_some() {
                names.push(format!("{} (a cut no sync covered)", name(key)));
            }
        }
        for key in self.unlinked.keys() {
            names.push(format!(
                "{} (removed, no sync covered its directory)",
                name(key)
            ));
        }
        (bytes, names)
    }

    /// Deletes index files (`.index`, `.timeindex`, `.txnindex`) while the
    /// broker is down, each with chance `p`, at least one when any exists:
    /// the core must rebuild them from the batch headers. Returns their names.
    pub fn lose_index_files(&mut self, p: f64, rng: &mut impl rand::Rng) -> Vec<String> {
        let indexes: Vec<FileKey> = self
            .files
            .keys()
            .filter(|(_, _, kind)| *kind != SegmentFile::Log)
            .cloned()
            .collect();
        if indexes.is_empty() {
            return Vec::new();
        }
        let mut lost: Vec<FileKey> = indexes
            .iter()
            .filter(|_| rng.random_bool(p))
            .cloned()
            .collect();
        if lost.is_empty() {
            lost.push(indexes[rng.random_range(0..indexes.len())].clone());
        }
        for key in &lost {
            self.files.remove(key);
        }
        lost.iter().map(name).collect()
    }

    /// What a starting broker finds: every segment with any file present,
    /// the `.log`'s length and the index files' contents as a reader sees
    /// them now. No segment data, no fsync.
    pub fn boot_state(&self, meta: Vec<(Vec<u8>, Vec<u8>)>) -> BootState {
        let mut parts: BTreeMap<PartitionDir, BTreeMap<i64, RecoveredSegment>> = BTreeMap::new();
        for ((dir, base, kind), f) in &self.files {
            let segment = parts
                .entry(dir.clone())
                .or_default()
                .entry(*base)
                .or_insert_with(|| RecoveredSegment {
                    base_offset: *base,
                    ..RecoveredSegment::default()
                });
            let contents = Some(Bytes::from(f.data.clone()));
            match kind {
                SegmentFile::Log => segment.log_bytes = Some(f.data.len() as u64),
                SegmentFile::OffsetIndex => segment.offset_index = contents,
                SegmentFile::TimeIndex => segment.time_index = contents,
                SegmentFile::TxnIndex => segment.txn_index = contents,
            }
        }
        // A directory whose last files were removed still exists (as a real
        // listing would show it), and its removals may not be durable yet.
        for (dir, _, _) in self.unlinked.keys() {
            parts.entry(dir.clone()).or_default();
        }
        let partitions = parts
            .into_iter()
            .map(|(dir, segments)| RecoveredPartition {
                dir,
                segments: segments.into_values().collect(),
            })
            .collect();
        BootState { meta, partitions }
    }
}

/// `sim-topic-0/00000000000000000042.index`.
pub fn name((dir, base, kind): &FileKey) -> String {
    format!("{}/{}", dir.dir_name(), kind.file_name(*base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::ChaCha8Rng;
    use rand::SeedableRng;

    fn dir() -> PartitionDir {
        PartitionDir::new("t", 0)
    }

    fn append_to(disk: &mut SimDisk, rng: &mut ChaCha8Rng, file: SegmentFile, bytes: &[u8]) {
        let op = DiskOp::Append {
            dir: dir(),
            segment_base: 0,
            file,
            bytes: Bytes::copy_from_slice(bytes),
        };
        disk.apply(op, rng);
    }

    fn append(disk: &mut SimDisk, rng: &mut ChaCha8Rng, bytes: &[u8]) {
        append_to(disk, rng, SegmentFile::Log, bytes);
    }

    fn sync(disk: &mut SimDisk, rng: &mut ChaCha8Rng, io: IoId) {
        disk.apply(DiskOp::Sync { io }, rng);
        disk.complete_sync(io, false, false).unwrap();
    }

    fn file_of(disk: &SimDisk, kind: SegmentFile) -> Option<&SimFile> {
        disk.files().get(&(dir(), 0, kind))
    }

    fn file(disk: &SimDisk) -> &SimFile {
        file_of(disk, SegmentFile::Log).expect("the .log exists")
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
        assert!(!file(&disk).durable);
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
            sync(&mut disk, &mut rng, 1);
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

    #[test]
    fn power_cut_cuts_each_file_on_its_own() {
        // Over a few seeds, a .log keeps its unsynced tail while its index
        // loses its own, and the other way round.
        let (mut log_only, mut index_only) = (false, false);
        for seed in 0..200 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = SimDisk::default();
            append(&mut disk, &mut rng, b"");
            append_to(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"");
            sync(&mut disk, &mut rng, 1);
            append(&mut disk, &mut rng, b"batch");
            append_to(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"entry");
            disk.power_cut(&mut rng);
            let log = file(&disk).data.len();
            let index = file_of(&disk, SegmentFile::OffsetIndex).unwrap().data.len();
            log_only |= log == 5 && index == 0;
            index_only |= log == 0 && index == 5;
        }
        assert!(log_only && index_only);
    }

    #[test]
    fn a_file_never_synced_may_vanish_at_a_power_cut() {
        let mut vanished = false;
        for seed in 0..50 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = SimDisk::default();
            append(&mut disk, &mut rng, b"");
            disk.power_cut(&mut rng);
            vanished |= file_of(&disk, SegmentFile::Log).is_none();
        }
        assert!(vanished);
    }

    #[test]
    fn adopt_makes_the_next_sync_cover_what_a_dead_process_left() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        append_to(&mut disk, &mut rng, SegmentFile::TimeIndex, b"t");
        disk.crash();
        disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
        disk.complete_sync(1, false, false).unwrap();
        assert_eq!(file(&disk).synced_len, 0, "the new process touched nothing");
        let adopt = DiskOp::Adopt {
            dir: dir(),
            segment_base: 0,
        };
        disk.apply(adopt, &mut rng);
        sync(&mut disk, &mut rng, 2);
        assert_eq!(file(&disk).synced_len, 3);
        assert!(file(&disk).durable);
        let t = file_of(&disk, SegmentFile::TimeIndex).unwrap();
        assert_eq!(t.synced_len, 1);
        assert_eq!(disk.unsynced().0, 0);
    }

    #[test]
    fn a_sync_does_not_cover_a_file_deleted_and_created_again() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        disk.apply(DiskOp::Sync { io: 1 }, &mut rng);
        disk.apply(DiskOp::DeletePartition { dir: dir() }, &mut rng);
        append(&mut disk, &mut rng, b"xyzw");
        disk.complete_sync(1, false, false).unwrap();
        assert_eq!(file(&disk).synced_len, 0);
        assert!(!file(&disk).durable);
    }

    fn cut_log_to(len: u64) -> DiskOp {
        DiskOp::Truncate {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::Log,
            len,
        }
    }

    #[test]
    fn a_removal_or_a_cut_no_sync_covered_comes_back_at_a_power_cut() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abcdef");
        append_to(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"12345678");
        sync(&mut disk, &mut rng, 1);
        disk.apply(cut_log_to(2), &mut rng);
        disk.apply(DiskOp::DeletePartition { dir: dir() }, &mut rng);
        assert!(disk.files().is_empty());
        assert_eq!(disk.unsynced().1.len(), 2);
        disk.power_cut(&mut rng);
        assert_eq!(file(&disk).data, b"abcdef", "the cut came back too");
        assert_eq!(
            file_of(&disk, SegmentFile::OffsetIndex).unwrap().data.len(),
            8
        );

        disk.apply(cut_log_to(2), &mut rng);
        disk.apply(DiskOp::Sync { io: 2 }, &mut rng);
        disk.apply(
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 0,
            },
            &mut rng,
        );
        disk.complete_sync(2, false, false).unwrap();
        disk.power_cut(&mut rng);
        assert_eq!(
            file(&disk).data,
            b"ab",
            "the cut is durable, the removal not"
        );
        disk.apply(
            DiskOp::DeleteSegment {
                dir: dir(),
                segment_base: 0,
            },
            &mut rng,
        );
        sync(&mut disk, &mut rng, 3);
        assert_eq!(disk.unsynced().1.len(), 0);
        disk.power_cut(&mut rng);
        assert!(disk.files().is_empty(), "the synced removal is durable");
    }

    #[test]
    fn reads_see_the_page_cache_and_fail_past_the_end() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abcdef");
        let range = |position, len| FileRange {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::Log,
            position,
            len,
        };
        assert_eq!(&disk.read(&range(1, 3)).unwrap()[..], b"bcd");
        assert!(disk.read(&range(4, 3)).is_err(), "short file");
        let mut absent = range(0, 1);
        absent.file = SegmentFile::TxnIndex;
        assert!(disk.read(&absent).is_err(), "absent file");
    }

    #[test]
    fn boot_state_lists_segments_with_their_index_files() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        append_to(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"12345678");
        let state = disk.boot_state(Vec::new());
        let s = &state.partitions[0].segments[0];
        assert_eq!(s.log_bytes, Some(3));
        assert_eq!(s.offset_index.as_deref(), Some(&b"12345678"[..]));
        assert!(s.time_index.is_none() && s.txn_index.is_none());
        let lost = disk.lose_index_files(1.0, &mut rng);
        assert_eq!(lost, vec!["t-0/00000000000000000000.index".to_string()]);
    }
}
