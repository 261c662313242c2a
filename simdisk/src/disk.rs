//! SimDisk: the segment files of every partition (`.log`, `.index`,
//! `.timeindex`, `.txnindex`, and the log cleaner's `.cleaned` and `.swap`
//! copies of them), each knowing which of its bytes are durable.
//! Every file has `data` (what a read returns: the page cache), `synced_len`
//! (the prefix that survives a power cut) and `durable` (whether its
//! directory entry does: a file created since the last sync that covered it
//! may vanish whole at a power cut).
//!
//! The model follows the net driver's disk worker (net/src/disk.rs): ops are
//! carried out in the order the core emitted them; a `Sync` fdatasyncs the
//! files touched (or adopted) since the previous `Sync` and promises only
//! what was written *before* it was issued, so an append made while a sync is
//! in flight rides the next one. A `SyncScope::Logs` sync leaves out a live
//! index file whose only change is appends: its bytes wait for an `All`
//! sync (its directory entry, synced with the directory, does not). A write error (a full disk, a rename of a
//! file that is not there) is kept and reported by the next `Sync`, as on
//! Linux where a failed write-back surfaces at fsync. A `Read` sees every op
//! emitted before it, and reads live files only.
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
//! Directories and cuts: removing a file (a segment, a partition, the
//! cleaner's staged copies) changes its directory, which is durable only
//! once a sync covering that directory completes (the sync after the
//! removal: production fsyncs the directory of every file it created,
//! removed, renamed or adopted). Until then a power cut brings back the
//! file's durable bytes. Likewise a truncate below a file's durable length:
//! until a sync covers the file, a power cut restores the durable bytes from
//! before the cut. Both come back whole, with no draw of randomness.
//!
//! Renames (the cleaner's `.cleaned` -> `.swap` -> live, rename(2) replacing
//! what the destination held) change the directory too, and a power cut
//! before a sync covering it undoes them: the file goes back to the name it
//! left, where it was durable, and the file it replaced comes back. What a
//! power cut leaves of the file's *bytes* does not depend on its name: data
//! belongs to the inode, so bytes written before the rename and never synced
//! are lost (but for a written-back prefix) at either name, and a sync
//! issued before the rename still makes the bytes it covered durable. So a
//! file is an inode under a name: `files` holds what a reader sees, and
//! `shadows` the durable entries that differ from it (a file removed,
//! renamed away or replaced), each naming the inode a power cut puts back
//! there (still visible under its new name, or kept in `orphans`).
//!
//! The madsim store (net/src/simstore.rs) uses this model too, with its own
//! latencies and madsim's seeded randomness, and so do the core's tests
//! (core/tests/support, and core/src/log/tests.rs, into which this file is
//! compiled), cutting power with `power_cut_losing_all`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::log::clean::work::{CleanerFiles, CleanerOutcome, CleanerTask, CleanerWork};
use doze_core::{
    BootState, DiskOp, FileRange, FileStage, IoError, IoId, PartitionDir, SegmentFile, SyncScope,
};
use rand::RngExt;

/// One file: a partition directory, a segment's base offset, and which of
/// the segment's files under which of its names (live, or the cleaner's
/// `.cleaned` / `.swap`). Kind and stage are one pair, so that `(dir, base,
/// _)` still matches every file of a segment.
pub type FileKey = (PartitionDir, i64, (SegmentFile, FileStage));

/// The key of a segment's live file (what `Append`, `Truncate` and `Read`
/// name).
pub fn live_key(dir: PartitionDir, segment_base: i64, file: SegmentFile) -> FileKey {
    (dir, segment_base, (file, FileStage::Live))
}

#[derive(Clone, Debug, Default)]
pub struct SimFile {
    pub data: Vec<u8>,
    /// The prefix of `data` that survives a power cut (whatever the file's
    /// name then).
    pub synced_len: usize,
    /// The file survives a power cut under this name: a sync covered it
    /// since it was created here, or covered its directory since it was
    /// renamed here.
    pub durable: bool,
    /// Which incarnation (inode) this is: a file deleted and created again
    /// is another file, which a sync issued for the first must not make
    /// durable. A rename keeps it.
    incarnation: u64,
    /// A truncate cut into the durable bytes and no sync has covered the
    /// file since: what a power cut brings back, and the op number of the
    /// (first) cut.
    cut: Option<(Vec<u8>, u64)>,
    /// The renames that brought the file here that no sync covering its
    /// directory has made durable, oldest first: the name it left and the
    /// op number. A power cut takes it back to the first one's name (when
    /// it is durable there, a shadow of that name says so; when it is not,
    /// it is a file never synced, which may vanish).
    moved: Vec<(FileKey, u64)>,
}

impl SimFile {
    /// What a power cut leaves of a file that is not written to any more
    /// (removed): its durable bytes, whole.
    fn durable_bytes(&self) -> Vec<u8> {
        match &self.cut {
            Some((bytes, _)) => bytes.clone(),
            None => self.data[..self.synced_len].to_vec(),
        }
    }
}

/// A durable directory entry that no longer names the file a reader sees
/// under it (the file was removed, renamed away, or replaced by a rename),
/// and that no sync covering the directory has dropped since: a power cut
/// puts the file back under this name.
#[derive(Clone, Debug)]
struct Shadow {
    /// The file: visible under another name in `files` (renamed away), or
    /// in `orphans` (removed or replaced).
    incarnation: u64,
    /// The op number of the change: a sync issued after it drops the shadow.
    at: u64,
}

/// A file no name holds any more that a power cut may still bring back.
#[derive(Clone, Debug)]
struct Orphan {
    file: SimFile,
    /// The name it was removed from (or replaced under), and the op number.
    name: FileKey,
    at: u64,
}

/// A `Sync` issued and not completed: what it will make durable.
struct SyncInFlight {
    io: IoId,
    /// Each file dirty when the sync was issued, its incarnation and its
    /// length then. The incarnation finds the file if a rename moved it
    /// meanwhile: the fdatasync is of the inode.
    covers: Vec<(FileKey, u64, usize)>,
    /// Index files whose appends a `SyncScope::Logs` sync leaves unsynced,
    /// with their incarnation: only their directory entry becomes durable.
    entries: Vec<(FileKey, u64)>,
    /// Each directory whose entries changed (or that was adopted) before
    /// the sync was issued.
    dirs: Vec<PartitionDir>,
    /// The op number at issue: removals, renames and cuts before it are
    /// covered.
    at: u64,
    /// A write error since the previous sync, reported by this one.
    write_error: Option<String>,
}

/// The clean-shutdown file (`doze_core::io::CLEAN_SHUTDOWN_FILE_NAME`, in
/// `logs/`): its contents say nothing, so only its directory entry is
/// modelled. The write (create, fsync of the file and of `logs/`) and the
/// removal (unlink, fsync of `logs/`) change what a listing shows at once,
/// and what survives a power cut only when they complete; a power cut
/// between the two keeps either, by a draw (write-back may or may not
/// have reached the directory).
#[derive(Clone, Copy, Debug, Default)]
struct CleanShutdownFile {
    /// A listing shows it.
    present: bool,
    /// Whether a power cut leaves it.
    durable: bool,
    /// The write or removal whose completion has not come.
    in_flight: Option<IoId>,
}

#[derive(Default)]
pub struct SimDisk {
    clean_shutdown: CleanShutdownFile,
    /// Every file a reader sees, by name.
    files: BTreeMap<FileKey, SimFile>,
    /// Files written, cut or adopted since the last `Sync` was issued, by
    /// this process (a rename carries the mark to the new name).
    dirty: BTreeSet<FileKey>,
    /// Live index files whose only unsynced change is appends: a
    /// `SyncScope::Logs` sync leaves them for an `All` one.
    index_appends: BTreeSet<FileKey>,
    /// Directories whose entries changed (a file created, removed or
    /// renamed) or that were adopted since the last `Sync` was issued, by
    /// this process.
    dirty_dirs: BTreeSet<PartitionDir>,
    /// Durable entries changed since a sync last covered their directory.
    shadows: BTreeMap<FileKey, Shadow>,
    /// Files no name holds any more, by incarnation, that a shadow brings
    /// back at a power cut, or that a sync in flight, issued before their
    /// removal, covers: its completion makes them durable where they were
    /// then, and their removal (which it does not cover) undone by a cut.
    orphans: BTreeMap<u64, Orphan>,
    /// Partition directories removed whole (`DeletePartition`), each with
    /// the op count at its removal: the entry in `logs/` goes, which the
    /// driver's fsync of `logs/` as it opens the data dir makes durable
    /// (`open_data_dir`) if no sync covered it before.
    removed_dirs: BTreeMap<PartitionDir, u64>,
    /// Counts ops applied: orders removals, renames and cuts against syncs.
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

    /// Every file a reader sees, live and staged.
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
            } => self.append(live_key(dir, segment_base, file), &bytes, rng),
            DiskOp::AppendBatch {
                dir,
                segment_base,
                base_offset,
                batch,
            } => {
                let bytes = doze_core::batch::with_base_offset(&batch, base_offset);
                self.append(live_key(dir, segment_base, SegmentFile::Log), &bytes, rng)
            }
            DiskOp::AppendCleaned {
                dir,
                segment_base,
                file,
                bytes,
            } => {
                let key = (dir, segment_base, (file, FileStage::Cleaned));
                self.append(key, &bytes, rng)
            }
            DiskOp::Sync { io, scope } => {
                let mut keys = std::mem::take(&mut self.dirty);
                let mut entries = Vec::new();
                match scope {
                    SyncScope::All => keys.append(&mut self.index_appends),
                    SyncScope::Logs => {
                        for key in &self.index_appends {
                            if let Some(f) = self.files.get(key) {
                                entries.push((key.clone(), f.incarnation));
                            }
                        }
                    }
                }
                let covers = keys
                    .into_iter()
                    .filter_map(|key| {
                        let f = self.files.get(&key)?;
                        Some((key, f.incarnation, f.data.len()))
                    })
                    .collect::<Vec<_>>();
                let summary = format!(
                    "sync#{io} ({scope:?}) issued covering {} files ({} index files left unsynced)",
                    covers.len(),
                    entries.len()
                );
                self.syncs.push_back(SyncInFlight {
                    io,
                    covers,
                    entries,
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
                let key = live_key(dir, segment_base, file);
                self.index_appends.remove(&key);
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
            DiskOp::Rename {
                dir,
                segment_base,
                file,
                from,
                to,
            } => {
                let from = (dir.clone(), segment_base, (file, from));
                let to = (dir, segment_base, (file, to));
                self.rename(from, to)
            }
            DiskOp::DeleteSegment { dir, segment_base } => {
                let removed = self.remove(|(d, b, _)| *d == dir && *b == segment_base);
                format!(
                    "delete segment {}/{segment_base} ({removed} files)",
                    dir.dir_name()
                )
            }
            DiskOp::DiscardStaged { dir, segment_base } => {
                let removed = self.remove(|(d, b, (_, stage))| {
                    *d == dir && *b == segment_base && *stage != FileStage::Live
                });
                format!(
                    "discard staged {}/{segment_base} ({removed} files)",
                    dir.dir_name()
                )
            }
            DiskOp::DeletePartition { dir } => {
                self.remove(|(d, _, _)| *d == dir);
                self.removed_dirs.insert(dir.clone(), self.ops);
                format!("delete partition {}", dir.dir_name())
            }
            DiskOp::Adopt { dir, segment_base } => {
                // Live files only, as the net driver adopts them: a start
                // finishes a committed swap by renames and discards the
                // rest, and relies on no staged file's bytes it never synced.
                let keys: Vec<FileKey> = self
                    .files
                    .keys()
                    .filter(|(d, b, (_, stage))| {
                        *d == dir && *b == segment_base && *stage == FileStage::Live
                    })
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
                for key in &keys {
                    self.index_appends.remove(key);
                }
                self.dirty.extend(keys);
                self.dirty_dirs.insert(dir.clone());
                format!(
                    "adopt {}/{segment_base} ({count} files, {unsynced}B unsynced)",
                    dir.dir_name()
                )
            }
            DiskOp::WriteCleanShutdown { io } => self.begin_clean_shutdown(io, true),
            DiskOp::RemoveCleanShutdown { io } => self.begin_clean_shutdown(io, false),
            DiskOp::Read { .. } => unreachable!("reads are carried out with SimDisk::read"),
        }
    }

    fn begin_clean_shutdown(&mut self, io: IoId, create: bool) -> String {
        let file = &mut self.clean_shutdown;
        assert!(
            file.in_flight.is_none(),
            "one clean-shutdown write or removal at a time"
        );
        file.in_flight = Some(io);
        let before = std::mem::replace(&mut file.present, create);
        format!(
            "clean-shutdown file #{io}: {} (it was {})",
            if create { "written" } else { "removed" },
            if before { "there" } else { "absent" }
        )
    }

    /// Completes the clean-shutdown file's write or removal `io` (its fsyncs
    /// done): on `Ok`, what a listing shows of it survives a power cut.
    /// `fail`: an injected error (nothing becomes durable).
    pub fn complete_clean_shutdown(&mut self, io: IoId, fail: bool) -> Result<(), IoError> {
        let file = &mut self.clean_shutdown;
        assert_eq!(
            file.in_flight.take(),
            Some(io),
            "the completion of the clean-shutdown op in flight"
        );
        if fail {
            return Err(IoError("EIO: injected fsync failure of logs/".into()));
        }
        file.durable = file.present;
        Ok(())
    }

    /// Whether a listing shows the clean-shutdown file, and whether a power
    /// cut now would leave it.
    pub fn clean_shutdown_file(&self) -> (bool, bool) {
        (self.clean_shutdown.present, self.clean_shutdown.durable)
    }

    /// Carries out an `Output::Clean` job at once, against the model: its
    /// reads of the live `.log` are `read`s, its writes `AppendCleaned`s
    /// (unsynced until a later sync; short on a full disk, the error kept
    /// for that sync), so a crash or power cut after it finds what the
    /// net driver's would. Returns the outcome and a summary for the trace.
    pub fn clean(
        &mut self,
        work: CleanerWork,
        rng: &mut impl rand::Rng,
    ) -> (CleanerOutcome, String) {
        let what = format!(
            "clean {}/{} ({}B, {})",
            work.dir.dir_name(),
            SegmentFile::Log.file_name(work.segment_base),
            work.size_bytes,
            match work.task {
                CleanerTask::Map { .. } => "map",
                CleanerTask::Clean { .. } => "clean",
            }
        );
        let mut files = SimCleanerFiles {
            dir: work.dir.clone(),
            segment_base: work.segment_base,
            disk: self,
            rng,
            appended: 0,
        };
        let outcome = doze_core::log::clean::work::run(work, &mut files);
        let appended = files.appended;
        let summary = match &outcome.result {
            Ok(_) => format!("{what}: read {}B, wrote {appended}B", outcome.bytes_read),
            Err(e) => format!("{what}: FAILED {e:?}"),
        };
        (outcome, summary)
    }

    /// `Append` and `AppendCleaned`: write(2) at the end, creating the file.
    fn append(&mut self, key: FileKey, bytes: &[u8], rng: &mut impl rand::Rng) -> String {
        let live_index = key.2 .0 != SegmentFile::Log && key.2 .1 == FileStage::Live;
        if live_index && !self.dirty.contains(&key) {
            self.index_appends.insert(key.clone());
        } else {
            self.dirty.insert(key.clone());
        }
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
        f.data.extend_from_slice(bytes);
        let len = f.data.len();
        self.bytes_appended += bytes.len() as u64;
        if bytes.is_empty() {
            return format!("create {}", name(&key));
        }
        format!("append {} +{}B -> {len}B", name(&key), bytes.len())
    }

    /// rename(2) within a partition directory: the file leaves `from` (a
    /// shadow keeps `from` for a power cut when it was durable there) and
    /// replaces what `to` held (removed as by unlink). Its dirtiness goes
    /// with it. A missing source (or a rename onto itself, which the net
    /// driver refuses) is a write error the next sync reports.
    fn rename(&mut self, from: FileKey, to: FileKey) -> String {
        let error = if from == to {
            Some(format!("EINVAL: cannot rename {} onto itself", name(&from)))
        } else if !self.files.contains_key(&from) {
            Some(format!(
                "ENOENT: cannot rename {} to {}: no such file",
                name(&from),
                name(&to)
            ))
        } else {
            None
        };
        if let Some(e) = error {
            let summary = format!("rename FAILED ({e})");
            self.write_error.get_or_insert(e);
            return summary;
        }
        let at = self.ops;
        let mut file = self.files.remove(&from).expect("checked above");
        if file.durable {
            debug_assert!(file.moved.is_empty(), "durable here: no rename to undo");
            let shadow = Shadow {
                incarnation: file.incarnation,
                at,
            };
            self.shadows.insert(from.clone(), shadow);
        }
        file.durable = false;
        file.moved.push((from.clone(), at));
        let replaced = self.remove(|k| *k == to);
        // Appends to an index file renamed are not left for an `All` sync
        // any more: the rename's sync covers them.
        if self.dirty.remove(&from) | self.index_appends.remove(&from) {
            self.dirty.insert(to.clone());
        }
        self.dirty_dirs.insert(from.0.clone());
        let len = file.data.len();
        let unsynced = len - file.synced_len;
        self.files.insert(to.clone(), file);
        format!(
            "rename {} -> {} ({len}B, {unsynced}B unsynced{})",
            name(&from),
            name(&to),
            if replaced > 0 {
                ", replacing a file"
            } else {
                ""
            }
        )
    }

    /// Removes the files `gone` picks (unlink(2)); one durable where it is
    /// (or where a power cut would take it back to), or made durable by a
    /// sync in flight, stays recoverable until a sync covers its directory.
    /// Returns how many.
    fn remove(&mut self, gone: impl Fn(&FileKey) -> bool) -> usize {
        let keys: Vec<FileKey> = self.files.keys().filter(|k| gone(k)).cloned().collect();
        let kept = self.kept_incarnations();
        let at = self.ops;
        for key in &keys {
            let file = self.files.remove(key).expect("listed above");
            self.dirty_dirs.insert(key.0.clone());
            let incarnation = file.incarnation;
            // Renamed here before a sync in flight was issued: that sync
            // makes it durable here.
            let rename_covered = file.moved.first().is_some_and(|(_, moved_at)| {
                self.syncs
                    .iter()
                    .any(|s| *moved_at < s.at && s.dirs.contains(&key.0))
            });
            if file.durable {
                self.shadows.insert(key.clone(), Shadow { incarnation, at });
            } else if !kept.contains(&incarnation) && !rename_covered {
                continue; // never durable, and no sync in flight covers it
            }
            let orphan = Orphan {
                file,
                name: key.clone(),
                at,
            };
            self.orphans.insert(incarnation, orphan);
        }
        self.dirty.retain(|k| !gone(k));
        self.index_appends.retain(|k| !gone(k));
        keys.len()
    }

    /// What a reader sees of `range` (of a live file) now: exactly its
    /// bytes, or an error when the file is absent or shorter than the range.
    pub fn read(&mut self, range: &FileRange) -> Result<Bytes, IoError> {
        let key = live_key(range.dir.clone(), range.segment_base, range.file);
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

    /// Files a power cut may bring back under a name they no longer have
    /// (a shadow's), or that a sync in flight covers.
    fn kept_incarnations(&self) -> BTreeSet<u64> {
        let shadowed = self.shadows.values().map(|s| s.incarnation);
        let covered = self
            .syncs
            .iter()
            .flat_map(|s| s.covers.iter().map(|(_, incarnation, _)| *incarnation));
        shadowed.chain(covered).collect()
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
        // cover stay dirty, so the next sync covers their removals and
        // renames (as the net driver does: a directory stays dirty until an
        // fsync of it succeeds). Files are not: the core rewrites what it
        // cannot trust.
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
        // Directories first: the entries they held at the issue are
        // durable (removals and renames before it stay done; a file renamed
        // since is durable where it was then), and a file the sync covers is
        // durable under the name it had at the issue.
        for dir in &sync.dirs {
            self.shadows
                .retain(|(d, _, _), s| d != dir || s.at >= sync.at);
            let first = (dir.clone(), i64::MIN, (SegmentFile::Log, FileStage::Live));
            for (key, file) in self.files.range_mut(first..) {
                if key.0 != *dir {
                    break;
                }
                let covered = file.moved.iter().filter(|(_, at)| *at < sync.at).count();
                if covered == 0 {
                    continue;
                }
                file.moved.drain(..covered);
                match file.moved.first() {
                    None => file.durable = true,
                    // Renamed again after the sync was issued: durable where
                    // it was then, which a power cut takes it back to.
                    Some((home, at)) => {
                        let shadow = Shadow {
                            incarnation: file.incarnation,
                            at: *at,
                        };
                        self.shadows.entry(home.clone()).or_insert(shadow);
                    }
                }
            }
            // Likewise a file removed (or replaced) since the sync was
            // issued: durable where it was then, which a cut brings back.
            for (incarnation, orphan) in self.orphans.iter_mut() {
                if orphan.name.0 != *dir {
                    continue;
                }
                let moved = &mut orphan.file.moved;
                let covered = moved.iter().filter(|(_, at)| *at < sync.at).count();
                if covered == 0 {
                    continue;
                }
                moved.drain(..covered);
                let (home, at) = match moved.first() {
                    Some((home, at)) => (home.clone(), *at),
                    None if orphan.at >= sync.at => (orphan.name.clone(), orphan.at),
                    None => continue, // its removal is durable too
                };
                let shadow = Shadow {
                    incarnation: *incarnation,
                    at,
                };
                self.shadows.entry(home).or_insert(shadow);
            }
        }
        // The directory fsync makes a new index file's entry durable, not
        // the bytes a `Logs` sync left out.
        for (key, incarnation) in sync.entries {
            if let Some(file) = self.files.get_mut(&key) {
                if file.incarnation == incarnation && file.moved.is_empty() {
                    file.durable = true;
                }
            }
        }
        for (key, incarnation, len) in sync.covers {
            // The fdatasync is of the inode, wherever its name went since.
            let (file, home) = if self
                .files
                .get(&key)
                .is_some_and(|f| f.incarnation == incarnation)
            {
                (self.files.get_mut(&key).expect("found above"), None)
            } else if let Some(orphan) = self.orphans.get_mut(&incarnation) {
                let home = (orphan.name.clone(), orphan.at);
                (&mut orphan.file, Some(home))
            } else if let Some(file) = self
                .files
                .values_mut()
                .find(|f| f.incarnation == incarnation)
            {
                (file, None)
            } else {
                continue; // removed, never durable
            };
            // A file cut after the sync was issued keeps only what is left.
            let durable_len = len.min(file.data.len());
            file.synced_len = file.synced_len.max(durable_len);
            if file.cut.as_ref().is_some_and(|(_, at)| *at < sync.at) {
                file.cut = None;
            }
            // Durable where it was created (or last renamed durably): where
            // it is, or where a power cut takes it back to (renamed since),
            // or where it was removed from (removed since).
            let home = match file.moved.first() {
                Some((from, at)) => (from.clone(), *at),
                None => match home {
                    Some(removed) => removed,
                    None => {
                        file.durable = true;
                        continue;
                    }
                },
            };
            let (name, at) = home;
            self.shadows
                .entry(name)
                .or_insert(Shadow { incarnation, at });
        }
        let kept = self.kept_incarnations();
        self.orphans
            .retain(|incarnation, _| kept.contains(incarnation));
        Ok(())
    }

    /// A driver opens the data dir and fsyncs `logs/` (net's
    /// `DataDir::open`): a partition directory an earlier process removed
    /// whole, with no sync since, is now durably gone. Without it, a topic
    /// deleted just before a crash and created again after the restart
    /// could meet the deleted topic's files at the next power cut.
    pub fn open_data_dir(&mut self) {
        for (dir, removed_at) in std::mem::take(&mut self.removed_dirs) {
            self.shadows
                .retain(|(d, _, _), s| *d != dir || s.at > removed_at);
        }
        let kept = self.kept_incarnations();
        self.orphans
            .retain(|incarnation, _| kept.contains(incarnation));
    }

    /// The process died: the page cache survives, syncs in flight never
    /// answer, and the next process fsyncs only what it touches itself.
    pub fn crash(&mut self) {
        self.clean_shutdown.in_flight = None;
        self.syncs.clear();
        self.dirty.clear();
        self.index_appends.clear();
        self.dirty_dirs.clear();
        self.write_error = None;
    }

    /// The machine lost power: unsynced bytes are gone, except a random
    /// prefix of a file's unsynced tail that write-back had reached (which
    /// may end inside a batch or an index entry: a torn write); a file no
    /// sync covered since its creation may be gone whole. Each file on its
    /// own. A cut, a removal or a rename no sync covered is undone: the
    /// file's durable bytes come back whole under its durable name (a
    /// renamed file, still written to, keeps what write-back reached).
    /// Returns (bytes lost, files lost).
    pub fn power_cut(&mut self, rng: &mut impl rand::Rng) -> (u64, u64) {
        self.power_cut_with(&mut RandomWriteBack(rng))
    }

    /// A power cut that write-back reached nothing of: every unsynced byte
    /// is lost, and every file no sync made durable under its name (a
    /// rename no sync covered is undone, as by `power_cut`). The harshest
    /// of `power_cut`'s outcomes, with no randomness: what the core's tests
    /// cut power with, so that their assertions are exact.
    pub fn power_cut_losing_all(&mut self) -> (u64, u64) {
        self.power_cut_with(&mut NoWriteBack)
    }

    fn power_cut_with(&mut self, write_back: &mut impl WriteBack) -> (u64, u64) {
        self.crash();
        let clean = &mut self.clean_shutdown;
        if clean.present != clean.durable {
            // Its write or removal had not completed: write-back had
            // reached `logs/`, or not.
            if write_back.entry_lost() {
                clean.present = clean.durable;
            } else {
                clean.durable = clean.present;
            }
        }
        let shadowed: BTreeSet<u64> = self.shadows.values().map(|s| s.incarnation).collect();
        let mut lost_bytes = 0u64;
        let mut lost_files = Vec::new();
        for (key, file) in self.files.iter_mut() {
            let durable = file.durable || shadowed.contains(&file.incarnation);
            if let Some((bytes, _)) = file.cut.take() {
                lost_bytes += file.data.len().saturating_sub(file.synced_len) as u64;
                file.synced_len = bytes.len();
                file.data = bytes;
            } else if !durable && write_back.entry_lost() {
                // Its directory entry never reached the disk.
                lost_bytes += (file.data.len() - file.synced_len) as u64;
                lost_files.push(key.clone());
                continue;
            } else {
                let unsynced = file.data.len() - file.synced_len;
                let kept = if unsynced > 0 {
                    write_back.tail_kept(unsynced)
                } else {
                    0
                };
                lost_bytes += (unsynced - kept) as u64;
                file.data.truncate(file.synced_len + kept);
            }
            // What reached the platter is durable now (under the name a
            // shadow gives it, if one does).
            file.synced_len = file.data.len();
            file.durable = true;
            file.moved.clear();
        }
        for key in &lost_files {
            self.files.remove(key);
        }
        // Every durable entry a shadow keeps comes back. The files first
        // leave the names they hold now, then take their durable ones: one
        // may come back to a name another leaves.
        let named: BTreeMap<u64, FileKey> = self
            .files
            .iter()
            .filter(|(_, f)| shadowed.contains(&f.incarnation))
            .map(|(key, f)| (f.incarnation, key.clone()))
            .collect();
        let mut back = Vec::new();
        for (key, shadow) in std::mem::take(&mut self.shadows) {
            let bytes = match self.orphans.remove(&shadow.incarnation) {
                Some(orphan) => orphan.file.durable_bytes(),
                None => {
                    let at = named
                        .get(&shadow.incarnation)
                        .expect("a shadow's file is an orphan or has a name");
                    self.files.remove(at).expect("named above").data
                }
            };
            back.push((key, bytes));
        }
        for (key, bytes) in back {
            self.next_incarnation += 1;
            let file = SimFile {
                synced_len: bytes.len(),
                data: bytes,
                durable: true,
                incarnation: self.next_incarnation,
                cut: None,
                moved: Vec::new(),
            };
            self.files.insert(key, file);
        }
        self.orphans.clear();
        // Every removal a sync did not cover is undone.
        self.removed_dirs.clear();
        (lost_bytes, lost_files.len() as u64)
    }

    /// Bytes a power cut now could take away (a file no sync covered since
    /// its creation may vanish with all it holds), and the files holding
    /// them, and the removals and renames a power cut would undo. An empty
    /// file that vanishes takes nothing.
    pub fn unsynced(&self) -> (u64, Vec<String>) {
        let shadowed: BTreeSet<u64> = self.shadows.values().map(|s| s.incarnation).collect();
        let mut bytes = 0u64;
        let mut names = Vec::new();
        for (key, f) in &self.files {
            let durable = f.durable || shadowed.contains(&f.incarnation);
            let at_risk = if durable {
                f.data.len() - f.synced_len
            } else {
                f.data.len()
            };
            if at_risk > 0 {
                bytes += at_risk as u64;
                let whole = if durable { "" } else { ", the file itself" };
                names.push(format!("{} (+{at_risk}B{whole})", name(key)));
            } else if f.cut.is_some() {
                names.push(format!("{} (a cut no sync covered)", name(key)));
            }
        }
        for (key, shadow) in &self.shadows {
            let now = self
                .files
                .iter()
                .find(|(_, f)| f.incarnation == shadow.incarnation);
            names.push(match now {
                Some((to, _)) => format!(
                    "{} (renamed to {}, no sync covered its directory)",
                    name(key),
                    name(to)
                ),
                None => format!(
                    "{} (removed or replaced, no sync covered its directory)",
                    name(key)
                ),
            });
        }
        (bytes, names)
    }

    /// Deletes live index files (`.index`, `.timeindex`, `.txnindex`) while
    /// the broker is down, each with chance `p`, at least one when any
    /// exists: the core must rebuild them from the batch headers. Returns
    /// their names. An operator's `rm` and whatever syncs it: what it takes
    /// does not come back.
    pub fn lose_index_files(&mut self, p: f64, rng: &mut impl rand::Rng) -> Vec<String> {
        let indexes: Vec<FileKey> = self
            .files
            .keys()
            .filter(|(_, _, (kind, stage))| *kind != SegmentFile::Log && *stage == FileStage::Live)
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
            let f = self.files.remove(key).expect("listed above");
            self.shadows.retain(|_, s| s.incarnation != f.incarnation);
        }
        lost.iter().map(name).collect()
    }

    /// Removes a file behind the broker's back, durably (an operator's
    /// `rm`, or a test's): no power cut brings it back. False when absent.
    pub fn remove_file(&mut self, key: &FileKey) -> bool {
        let Some(f) = self.files.remove(key) else {
            return false;
        };
        self.shadows.retain(|_, s| s.incarnation != f.incarnation);
        self.dirty.remove(key);
        self.index_appends.remove(key);
        true
    }

    /// Changes a file's bytes behind the broker's back (a test's torn
    /// write or flipped bit), as written back and synced: what `change`
    /// leaves is durable. False when absent.
    pub fn tamper(&mut self, key: &FileKey, change: impl FnOnce(&mut Vec<u8>)) -> bool {
        let Some(f) = self.files.get_mut(key) else {
            return false;
        };
        change(&mut f.data);
        f.synced_len = f.data.len();
        f.cut = None;
        true
    }

    /// What a starting broker finds, as a listing and a read now show it
    /// (no segment data, no fsync): every segment with a live file, the
    /// `.log`'s length and the index files' contents; every segment whose
    /// `.log.swap` is there, its `.swap` files described the same way (a
    /// swap that committed); and every other segment with a `.cleaned` or
    /// `.swap` file (a cleaning that did not).
    pub fn boot_state(&self, meta: Vec<(Vec<u8>, Vec<u8>)>) -> BootState {
        #[derive(Default)]
        struct Listing {
            segments: BTreeMap<i64, RecoveredSegment>,
            swaps: BTreeMap<i64, RecoveredSegment>,
            cleaned: BTreeSet<i64>,
        }
        fn describe(
            found: &mut BTreeMap<i64, RecoveredSegment>,
            base: i64,
            kind: SegmentFile,
            f: &SimFile,
        ) {
            let segment = found.entry(base).or_insert_with(|| RecoveredSegment {
                base_offset: base,
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
        let mut parts: BTreeMap<PartitionDir, Listing> = BTreeMap::new();
        for ((dir, base, (kind, stage)), f) in &self.files {
            let listing = parts.entry(dir.clone()).or_default();
            match stage {
                FileStage::Live => describe(&mut listing.segments, *base, *kind, f),
                FileStage::Swap => describe(&mut listing.swaps, *base, *kind, f),
                FileStage::Cleaned => {
                    listing.cleaned.insert(*base);
                }
            }
        }
        // A directory whose last files were removed still exists (as a real
        // listing would show it), and its removals may not be durable yet.
        for (dir, _, _) in self.shadows.keys() {
            parts.entry(dir.clone()).or_default();
        }
        let partitions = parts
            .into_iter()
            .map(|(dir, listing)| {
                // `.swap` files without their `.log.swap`: the swap had not
                // committed (index files are renamed first).
                let (swaps, uncommitted): (Vec<_>, Vec<_>) = listing
                    .swaps
                    .into_values()
                    .partition(|s| s.log_bytes.is_some());
                let mut abandoned = listing.cleaned;
                abandoned.extend(uncommitted.iter().map(|s| s.base_offset));
                RecoveredPartition {
                    dir,
                    segments: listing.segments.into_values().collect(),
                    swaps,
                    abandoned: abandoned.into_iter().collect(),
                }
            })
            .collect();
        BootState {
            meta,
            partitions,
            entropy: [7; 32],
            clean_shutdown: self.clean_shutdown.present,
        }
    }
}

/// What write-back had reached when the power went (`SimDisk::power_cut`).
trait WriteBack {
    /// Whether a file whose directory entry is not durable is lost.
    fn entry_lost(&mut self) -> bool;
    /// How many of a file's `unsynced` (> 0) bytes past its durable prefix
    /// reached the disk.
    fn tail_kept(&mut self, unsynced: usize) -> usize;
}

/// The simulator's power cut: each file on its own, by a draw.
struct RandomWriteBack<'a, R>(&'a mut R);

impl<R: rand::Rng> WriteBack for RandomWriteBack<'_, R> {
    fn entry_lost(&mut self) -> bool {
        self.0.random_bool(0.5)
    }

    fn tail_kept(&mut self, unsynced: usize) -> usize {
        if self.0.random_bool(0.5) {
            self.0.random_range(0..=unsynced)
        } else {
            0
        }
    }
}

/// Write-back reached nothing.
struct NoWriteBack;

impl WriteBack for NoWriteBack {
    fn entry_lost(&mut self) -> bool {
        true
    }

    fn tail_kept(&mut self, _unsynced: usize) -> usize {
        0
    }
}

/// `sim-topic-0/00000000000000000042.index`, `….log.swap`.
pub fn name((dir, base, (kind, stage)): &FileKey) -> String {
    format!("{}/{}", dir.dir_name(), stage.file_name(*kind, *base))
}

/// A cleaner job's view of SimDisk: one segment's live `.log` and its
/// `.log.cleaned` copy.
struct SimCleanerFiles<'a, R> {
    disk: &'a mut SimDisk,
    rng: &'a mut R,
    dir: PartitionDir,
    segment_base: i64,
    appended: u64,
}

impl<R: rand::Rng> CleanerFiles for SimCleanerFiles<'_, R> {
    fn read(&mut self, position: u64, len: u64) -> Result<Bytes, IoError> {
        self.disk.read(&FileRange {
            dir: self.dir.clone(),
            segment_base: self.segment_base,
            file: SegmentFile::Log,
            position,
            len,
        })
    }

    fn append_cleaned(&mut self, bytes: Bytes) -> Result<(), IoError> {
        self.appended += bytes.len() as u64;
        let op = DiskOp::AppendCleaned {
            dir: self.dir.clone(),
            segment_base: self.segment_base,
            file: SegmentFile::Log,
            bytes,
        };
        self.disk.apply(op, self.rng);
        Ok(())
    }
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

    /// A sync of every scope (what the tests before `SyncScope` meant).
    fn full_sync(io: IoId) -> DiskOp {
        DiskOp::Sync {
            io,
            scope: SyncScope::All,
        }
    }

    fn append(disk: &mut SimDisk, rng: &mut ChaCha8Rng, bytes: &[u8]) {
        append_to(disk, rng, SegmentFile::Log, bytes);
    }

    fn sync(disk: &mut SimDisk, rng: &mut ChaCha8Rng, io: IoId) {
        disk.apply(
            DiskOp::Sync {
                io,
                scope: SyncScope::All,
            },
            rng,
        );
        disk.complete_sync(io, false, false).unwrap();
    }

    fn file_of(disk: &SimDisk, kind: SegmentFile) -> Option<&SimFile> {
        disk.files().get(&live_key(dir(), 0, kind))
    }

    fn file(disk: &SimDisk) -> &SimFile {
        file_of(disk, SegmentFile::Log).expect("the .log exists")
    }

    #[test]
    fn sync_covers_only_what_came_before_it() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        disk.apply(full_sync(1), &mut rng);
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
    fn a_logs_sync_leaves_index_appends_for_an_all_sync() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        let sync = |disk: &mut SimDisk, rng: &mut ChaCha8Rng, io, scope| {
            disk.apply(DiskOp::Sync { io, scope }, rng);
            disk.complete_sync(io, false, false).unwrap();
        };
        append(&mut disk, &mut rng, b"batch");
        append_to(&mut disk, &mut rng, SegmentFile::TimeIndex, b"entry");
        sync(&mut disk, &mut rng, 1, SyncScope::Logs);
        assert_eq!(file(&disk).synced_len, 5, "the log's bytes are durable");
        let index = file_of(&disk, SegmentFile::TimeIndex).unwrap();
        assert_eq!(index.synced_len, 0, "the index entry is not");
        assert!(index.durable, "its directory entry is, with the directory");
        // A cut is not an append: the next sync of any scope covers the file.
        disk.apply(
            DiskOp::Truncate {
                dir: dir(),
                segment_base: 0,
                file: SegmentFile::TimeIndex,
                len: 2,
            },
            &mut rng,
        );
        append_to(&mut disk, &mut rng, SegmentFile::TimeIndex, b"ry");
        sync(&mut disk, &mut rng, 2, SyncScope::Logs);
        assert_eq!(
            file_of(&disk, SegmentFile::TimeIndex).unwrap().synced_len,
            4
        );
        // Appends after that wait for an All sync again.
        append_to(&mut disk, &mut rng, SegmentFile::TimeIndex, b"++");
        sync(&mut disk, &mut rng, 3, SyncScope::Logs);
        assert_eq!(
            file_of(&disk, SegmentFile::TimeIndex).unwrap().synced_len,
            4
        );
        sync(&mut disk, &mut rng, 4, SyncScope::All);
        assert_eq!(
            file_of(&disk, SegmentFile::TimeIndex).unwrap().synced_len,
            6
        );
    }

    #[test]
    fn failed_and_lying_syncs_make_nothing_durable() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        disk.apply(full_sync(1), &mut rng);
        assert!(disk.complete_sync(1, true, false).is_err());
        assert_eq!(file(&disk).synced_len, 0);
        append(&mut disk, &mut rng, b"d");
        disk.apply(full_sync(2), &mut rng);
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
        disk.apply(full_sync(1), &mut rng);
        assert!(disk.complete_sync(1, false, false).is_err());
        disk.full = false;
        append(&mut disk, &mut rng, b"x");
        disk.apply(full_sync(2), &mut rng);
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
    fn opening_the_data_dir_makes_a_dead_processs_partition_removal_durable() {
        for open in [false, true] {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let mut disk = SimDisk::default();
            append(&mut disk, &mut rng, b"old topic");
            sync(&mut disk, &mut rng, 1);
            disk.apply(DiskOp::DeletePartition { dir: dir() }, &mut rng);
            disk.crash();
            if open {
                disk.open_data_dir();
            }
            disk.power_cut(&mut rng);
            let back = file_of(&disk, SegmentFile::Log).is_some();
            assert_eq!(
                back, !open,
                "open_data_dir={open}: whether the old files came back"
            );
        }
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
        disk.apply(full_sync(1), &mut rng);
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
        disk.apply(full_sync(1), &mut rng);
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
        disk.apply(full_sync(2), &mut rng);
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

    // The log cleaner's files: staged copies, renames, discards.

    use FileStage::{Cleaned, Live, Swap};

    fn staged(disk: &SimDisk, kind: SegmentFile, stage: FileStage) -> Option<&[u8]> {
        let key = (dir(), 0, (kind, stage));
        disk.files().get(&key).map(|f| &f.data[..])
    }

    fn append_cleaned(disk: &mut SimDisk, rng: &mut ChaCha8Rng, file: SegmentFile, bytes: &[u8]) {
        let op = DiskOp::AppendCleaned {
            dir: dir(),
            segment_base: 0,
            file,
            bytes: Bytes::copy_from_slice(bytes),
        };
        disk.apply(op, rng);
    }

    fn rename(
        disk: &mut SimDisk,
        rng: &mut ChaCha8Rng,
        file: SegmentFile,
        from: FileStage,
        to: FileStage,
    ) {
        let op = DiskOp::Rename {
            dir: dir(),
            segment_base: 0,
            file,
            from,
            to,
        };
        disk.apply(op, rng);
    }

    /// A durable live `.log` ("old") and a durable `.log.cleaned` ("new").
    fn old_log_and_cleaned_copy(rng: &mut ChaCha8Rng) -> SimDisk {
        let mut disk = SimDisk::default();
        append(&mut disk, rng, b"old");
        append_cleaned(&mut disk, rng, SegmentFile::Log, b"new");
        sync(&mut disk, rng, 1);
        assert_eq!(disk.unsynced().1.len(), 0);
        disk
    }

    #[test]
    fn append_cleaned_writes_a_file_of_its_own() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let disk = old_log_and_cleaned_copy(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
        let names: Vec<String> = disk.files().keys().map(name).collect();
        assert_eq!(
            names,
            [
                "t-0/00000000000000000000.log",
                "t-0/00000000000000000000.log.cleaned"
            ]
        );
    }

    #[test]
    fn a_rename_is_undone_by_a_power_cut_before_the_sync_of_its_directory() {
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = old_log_and_cleaned_copy(&mut rng);
            rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
            assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
            assert_eq!(staged(&disk, SegmentFile::Log, Swap), Some(&b"new"[..]));
            assert_eq!(disk.unsynced().1.len(), 1, "{:?}", disk.unsynced());
            disk.power_cut(&mut rng);
            assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
            assert_eq!(staged(&disk, SegmentFile::Log, Swap), None);
            assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        }
    }

    #[test]
    fn a_rename_is_durable_once_a_sync_covers_its_directory() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        sync(&mut disk, &mut rng, 2);
        assert_eq!(disk.unsynced().1.len(), 0);
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), Some(&b"new"[..]));
        assert!(disk.files()[&(dir(), 0, (SegmentFile::Log, Swap))].durable);
    }

    #[test]
    fn a_swap_over_the_live_file_is_undone_whole_before_its_sync() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        sync(&mut disk, &mut rng, 2);
        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Live);
        let range = FileRange {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::Log,
            position: 0,
            len: 3,
        };
        assert_eq!(
            &disk.read(&range).unwrap()[..],
            b"new",
            "readers see the swap"
        );
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), None);
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), Some(&b"new"[..]));

        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Live);
        sync(&mut disk, &mut rng, 3);
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"new"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), None);
        assert_eq!(disk.files().len(), 1);
    }

    #[test]
    fn renames_chained_without_a_sync_all_come_undone() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Live);
        assert_eq!(disk.files().len(), 1);
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
        assert_eq!(disk.files().len(), 2);
    }

    #[test]
    fn a_rename_issued_while_a_sync_is_in_flight_rides_the_next_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        disk.apply(full_sync(2), &mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        disk.complete_sync(2, false, false).unwrap();
        assert_eq!(
            disk.unsynced().1.len(),
            1,
            "the sync promised only what came before it"
        );
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), None);

        // Renamed again while the sync that covers the first rename is in
        // flight: durable where it was when that sync was issued.
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        disk.apply(full_sync(3), &mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Live);
        disk.complete_sync(3, false, false).unwrap();
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Swap), Some(&b"new"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
    }

    #[test]
    fn a_failed_sync_leaves_a_rename_to_the_next_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        disk.apply(full_sync(2), &mut rng);
        assert!(disk.complete_sync(2, true, false).is_err());
        assert_eq!(disk.unsynced().1.len(), 1);
        sync(&mut disk, &mut rng, 3);
        assert_eq!(disk.unsynced().1.len(), 0, "the directory stayed dirty");
    }

    #[test]
    fn bytes_written_before_a_rename_and_never_synced_are_lost_under_either_name() {
        let (mut kept_some, mut lost_all) = (false, false);
        for seed in 0..100 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = old_log_and_cleaned_copy(&mut rng);
            append_cleaned(&mut disk, &mut rng, SegmentFile::Log, b"+tail");
            rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
            disk.power_cut(&mut rng);
            let back = staged(&disk, SegmentFile::Log, Cleaned).expect("back at its old name");
            assert!(
                back.len() >= 3 && b"new+tail".starts_with(back),
                "seed {seed}: {back:?}"
            );
            kept_some |= back.len() > 3;
            lost_all |= back.len() == 3;

            // The rename made durable by a sync of the directory alone (a
            // new process's, after a crash forgot the file was written):
            // the name is durable, the bytes are still not.
            let mut disk = old_log_and_cleaned_copy(&mut rng);
            append_cleaned(&mut disk, &mut rng, SegmentFile::Log, b"+tail");
            rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
            disk.crash();
            disk.apply(
                DiskOp::Adopt {
                    dir: dir(),
                    segment_base: 0,
                },
                &mut rng,
            );
            sync(&mut disk, &mut rng, 2);
            disk.power_cut(&mut rng);
            assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
            let swapped = staged(&disk, SegmentFile::Log, Swap).expect("the rename is durable");
            assert!(
                swapped.len() >= 3 && b"new+tail".starts_with(swapped),
                "seed {seed}: {swapped:?}"
            );
        }
        assert!(
            kept_some && lost_all,
            "write-back reaches a prefix, or nothing"
        );
    }

    #[test]
    fn a_sync_issued_before_a_rename_makes_the_bytes_durable_under_the_new_name_too() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append_cleaned(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"12345678");
        disk.apply(full_sync(1), &mut rng);
        rename(&mut disk, &mut rng, SegmentFile::OffsetIndex, Cleaned, Swap);
        disk.complete_sync(1, false, false).unwrap();
        let f = &disk.files()[&(dir(), 0, (SegmentFile::OffsetIndex, Swap))];
        assert_eq!(f.synced_len, 8, "the fdatasync is of the inode");
        assert!(!f.durable, "the rename came after the sync");
        disk.power_cut(&mut rng);
        assert_eq!(
            staged(&disk, SegmentFile::OffsetIndex, Cleaned),
            Some(&b"12345678"[..]),
            "durable where it was created, by the sync issued there"
        );
    }

    #[test]
    fn a_file_renamed_before_any_sync_may_vanish_at_a_power_cut() {
        let mut vanished = false;
        for seed in 0..50 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = SimDisk::default();
            append_cleaned(&mut disk, &mut rng, SegmentFile::Log, b"new");
            rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
            disk.power_cut(&mut rng);
            assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
            vanished |= disk.files().is_empty();
        }
        assert!(vanished);
    }

    #[test]
    fn a_rename_without_a_source_fails_the_next_sync() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::TimeIndex, Cleaned, Swap);
        disk.apply(full_sync(2), &mut rng);
        let error = disk.complete_sync(2, false, false).unwrap_err();
        assert!(error.0.starts_with("ENOENT"), "{error:?}");
        assert!(error.0.contains(".timeindex.cleaned"), "{error:?}");
        sync(&mut disk, &mut rng, 3);
        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Swap);
        disk.apply(full_sync(4), &mut rng);
        assert!(disk.complete_sync(4, false, false).is_err(), "onto itself");
        assert_eq!(disk.files().len(), 2, "a failed rename changes nothing");
    }

    #[test]
    fn discarded_staged_files_come_back_at_a_power_cut_until_a_sync() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        append_cleaned(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"idx");
        sync(&mut disk, &mut rng, 2);
        rename(&mut disk, &mut rng, SegmentFile::OffsetIndex, Cleaned, Swap);
        sync(&mut disk, &mut rng, 3);
        let discard = DiskOp::DiscardStaged {
            dir: dir(),
            segment_base: 0,
        };
        disk.apply(discard.clone(), &mut rng);
        assert_eq!(disk.files().len(), 1, "the live .log stays");
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
        assert_eq!(
            staged(&disk, SegmentFile::OffsetIndex, Swap),
            Some(&b"idx"[..])
        );

        disk.apply(discard, &mut rng);
        sync(&mut disk, &mut rng, 4);
        disk.power_cut(&mut rng);
        assert_eq!(disk.files().len(), 1);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
    }

    #[test]
    fn a_renamed_file_removed_comes_back_where_it_was_durable() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        rename(&mut disk, &mut rng, SegmentFile::Log, Swap, Live);
        let delete = DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0,
        };
        disk.apply(delete, &mut rng);
        assert!(disk.files().is_empty());
        disk.power_cut(&mut rng);
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
    }

    #[test]
    fn delete_segment_removes_its_staged_files_too() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        append_cleaned(&mut disk, &mut rng, SegmentFile::TxnIndex, b"t");
        rename(&mut disk, &mut rng, SegmentFile::TxnIndex, Cleaned, Swap);
        let delete = DiskOp::DeleteSegment {
            dir: dir(),
            segment_base: 0,
        };
        let summary = disk.apply(delete, &mut rng);
        assert!(summary.contains("(3 files)"), "{summary}");
        assert!(disk.files().is_empty());
        sync(&mut disk, &mut rng, 2);
        disk.power_cut(&mut rng);
        assert!(disk.files().is_empty());
    }

    #[test]
    fn adopt_takes_live_files_only() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append(&mut disk, &mut rng, b"abc");
        append_cleaned(&mut disk, &mut rng, SegmentFile::Log, b"xyz");
        disk.crash();
        disk.apply(
            DiskOp::Adopt {
                dir: dir(),
                segment_base: 0,
            },
            &mut rng,
        );
        sync(&mut disk, &mut rng, 1);
        assert_eq!(file(&disk).synced_len, 3);
        let cleaned = &disk.files()[&(dir(), 0, (SegmentFile::Log, Cleaned))];
        assert_eq!(cleaned.synced_len, 0);
    }

    #[test]
    fn boot_state_lists_committed_swaps_and_abandoned_cleanings() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        let at = |base: i64, file, stage| (dir(), base, (file, stage));
        let mut put = |key: FileKey, bytes: &[u8]| {
            let (dir, segment_base, (file, stage)) = key;
            let bytes = Bytes::copy_from_slice(bytes);
            let op = match stage {
                Live => DiskOp::Append {
                    dir: dir.clone(),
                    segment_base,
                    file,
                    bytes,
                },
                _ => DiskOp::AppendCleaned {
                    dir: dir.clone(),
                    segment_base,
                    file,
                    bytes,
                },
            };
            disk.apply(op, &mut rng);
            if stage == Swap {
                let op = DiskOp::Rename {
                    dir,
                    segment_base,
                    file,
                    from: Cleaned,
                    to: Swap,
                };
                disk.apply(op, &mut rng);
            }
        };
        // 0: a committed swap; its .index was renamed into place already.
        put(at(0, SegmentFile::Log, Live), b"old-log");
        put(at(0, SegmentFile::TimeIndex, Live), b"old-time");
        put(at(0, SegmentFile::Log, Swap), b"log");
        put(at(0, SegmentFile::TimeIndex, Swap), b"time");
        // 100: index files renamed to .swap, the .log not yet.
        put(at(100, SegmentFile::Log, Live), b"live");
        put(at(100, SegmentFile::OffsetIndex, Swap), b"idx");
        put(at(100, SegmentFile::Log, Cleaned), b"log");
        // 200: only a .cleaned copy, no live file.
        put(at(200, SegmentFile::TxnIndex, Cleaned), b"txn");
        // 300: a live segment alone.
        put(at(300, SegmentFile::Log, Live), b"l");
        let state = disk.boot_state(Vec::new());
        assert_eq!(state.partitions.len(), 1);
        let p = &state.partitions[0];
        let bases: Vec<i64> = p.segments.iter().map(|s| s.base_offset).collect();
        assert_eq!(bases, [0, 100, 300], "segments: bases with a live file");
        assert_eq!(p.segments[0].log_bytes, Some(7));
        assert_eq!(p.segments[0].time_index.as_deref(), Some(&b"old-time"[..]));
        assert_eq!(p.swaps.len(), 1);
        let swap = &p.swaps[0];
        assert_eq!(swap.base_offset, 0);
        assert_eq!(swap.log_bytes, Some(3));
        assert_eq!(swap.time_index.as_deref(), Some(&b"time"[..]));
        assert!(swap.offset_index.is_none() && swap.txn_index.is_none());
        assert_eq!(p.abandoned, [100, 200]);
    }

    #[test]
    fn reads_see_live_files_only() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append_cleaned(&mut disk, &mut rng, SegmentFile::Log, b"abc");
        let range = FileRange {
            dir: dir(),
            segment_base: 0,
            file: SegmentFile::Log,
            position: 0,
            len: 1,
        };
        assert!(disk.read(&range).is_err());
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Live);
        assert_eq!(&disk.read(&range).unwrap()[..], b"a");
    }

    #[test]
    fn lost_index_files_are_live_ones() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = SimDisk::default();
        append_cleaned(&mut disk, &mut rng, SegmentFile::OffsetIndex, b"12345678");
        assert!(disk.lose_index_files(1.0, &mut rng).is_empty());
    }

    /// One random op on two segments of one partition, as the core and its
    /// cleaner might emit them (and some they would not: renames of files
    /// not there, renames back, removals mid-swap).
    fn random_op(rng: &mut ChaCha8Rng) -> DiskOp {
        let segment_base = [0, 100][rng.random_range(0..2)];
        let file = SegmentFile::ALL[rng.random_range(0..2)];
        let bytes = Bytes::copy_from_slice(&b"abcdefgh"[..rng.random_range(0..4)]);
        let stages = [Live, Cleaned, Swap];
        match rng.random_range(0..10) {
            0 | 1 => DiskOp::Append {
                dir: dir(),
                segment_base,
                file,
                bytes,
            },
            2 | 3 => DiskOp::AppendCleaned {
                dir: dir(),
                segment_base,
                file,
                bytes,
            },
            4..=6 => DiskOp::Rename {
                dir: dir(),
                segment_base,
                file,
                from: stages[rng.random_range(0..3)],
                to: stages[rng.random_range(0..3)],
            },
            7 => DiskOp::DiscardStaged {
                dir: dir(),
                segment_base,
            },
            8 => DiskOp::DeleteSegment {
                dir: dir(),
                segment_base,
            },
            _ => DiskOp::Truncate {
                dir: dir(),
                segment_base,
                file,
                len: rng.random_range(0..6),
            },
        }
    }

    /// What a reader sees: every name and its bytes.
    fn listing(disk: &SimDisk) -> BTreeMap<String, Vec<u8>> {
        disk.files()
            .iter()
            .map(|(k, f)| (name(k), f.data.clone()))
            .collect()
    }

    /// Random ops that succeed (no rename without a source: its error
    /// would fail the next sync, which then syncs nothing).
    fn apply_valid_ops(
        disk: &mut SimDisk,
        rng: &mut ChaCha8Rng,
        count: usize,
        trace: &mut Vec<String>,
    ) {
        for _ in 0..count {
            let op = random_op(rng);
            if let DiskOp::Rename {
                segment_base,
                file,
                from,
                to,
                ..
            } = &op
            {
                let source = (dir(), *segment_base, (*file, *from));
                if from == to || !disk.files().contains_key(&source) {
                    continue;
                }
            }
            trace.push(disk.apply(op, rng));
        }
    }

    #[test]
    fn a_power_cut_goes_back_to_the_last_sync_whatever_came_after_it() {
        for seed in 0..3000 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut disk = SimDisk::default();
            // What happened, for a failure's message.
            let mut trace = Vec::new();
            // Twice: ops, a sync after all of them, and a power cut, which
            // then changes nothing (the second time, removals and renames
            // of what the first made durable stay done).
            for io in [0, 1] {
                let count = rng.random_range(0..12);
                apply_valid_ops(&mut disk, &mut rng, count, &mut trace);
                sync(&mut disk, &mut rng, io);
                assert_eq!(disk.unsynced(), (0, Vec::new()), "seed {seed}");
                let synced = listing(&disk);
                disk.power_cut(&mut rng);
                assert_eq!(
                    listing(&disk),
                    synced,
                    "seed {seed}: a synced disk keeps all"
                );
            }

            // More, a sync issued, then anything while it is in flight and
            // after it completes (renames, removals, cuts, crashes once it
            // has, syncs that fail): a power cut goes back to what readers
            // saw when it was issued, but for unsynced tails written back.
            let count = rng.random_range(0..6);
            apply_valid_ops(&mut disk, &mut rng, count, &mut trace);
            trace.push(disk.apply(full_sync(2), &mut rng));
            let synced = listing(&disk);
            let mut pending = Some(2);
            let mut in_flight = VecDeque::new();
            let mut issued = 2;
            for _ in 0..rng.random_range(0..16) {
                match rng.random_range(0..12) {
                    0 => {
                        issued += 1;
                        trace.push(disk.apply(full_sync(issued), &mut rng));
                        in_flight.push_back(issued);
                    }
                    1 => {
                        if let Some(io) = pending.take() {
                            disk.complete_sync(io, false, false).unwrap();
                            trace.push(format!("sync#{io} done"));
                        } else if let Some(io) = in_flight.pop_front() {
                            assert!(disk.complete_sync(io, true, false).is_err());
                            trace.push(format!("sync#{io} failed"));
                        }
                    }
                    2 if pending.is_none() => {
                        disk.crash();
                        in_flight.clear();
                        trace.push("crash".into());
                    }
                    _ => {
                        let op = random_op(&mut rng);
                        if pending.is_some() && matches!(op, DiskOp::Truncate { .. }) {
                            // A cut racing the fdatasync of a file the sync
                            // covers may be caught by it (a sync may make
                            // more durable than it promises).
                            continue;
                        }
                        trace.push(disk.apply(op, &mut rng));
                    }
                }
            }
            if let Some(io) = pending {
                disk.complete_sync(io, false, false).unwrap();
            }
            // A durable file changed is at risk (an empty file created is
            // not: it may vanish, but takes nothing with it).
            let (_, at_risk) = disk.unsynced();
            let now = listing(&disk);
            let changed = synced
                .iter()
                .any(|(name, bytes)| now.get(name) != Some(bytes));
            assert!(
                !changed || !at_risk.is_empty(),
                "seed {seed}: a change nothing reports"
            );
            disk.power_cut(&mut rng);
            let after = listing(&disk);
            for (name, bytes) in &synced {
                let back = after.get(name);
                assert!(
                    back.is_some_and(|b| b.starts_with(bytes)),
                    "seed {seed}: {name} held {bytes:?} at the sync, {back:?} after the cut:\n{}",
                    trace.join("\n")
                );
            }
            for f in disk.files().values() {
                assert!(f.durable && f.synced_len == f.data.len(), "seed {seed}");
                assert!(f.moved.is_empty() && f.cut.is_none(), "seed {seed}");
            }
            assert!(disk.shadows.is_empty() && disk.orphans.is_empty());
        }
    }

    #[test]
    fn a_power_cut_losing_all_keeps_exactly_what_syncs_made_durable() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        append(&mut disk, &mut rng, b"+tail");
        append_to(
            &mut disk,
            &mut rng,
            SegmentFile::OffsetIndex,
            b"never synced",
        );
        rename(&mut disk, &mut rng, SegmentFile::Log, Cleaned, Swap);
        assert_eq!(disk.power_cut_losing_all(), (17, 1));
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), Some(&b"new"[..]));
        assert_eq!(
            staged(&disk, SegmentFile::Log, Swap),
            None,
            "the rename undone"
        );
        assert!(file_of(&disk, SegmentFile::OffsetIndex).is_none());
    }

    #[test]
    fn a_file_removed_or_tampered_with_by_hand_stays_so_after_a_power_cut() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut disk = old_log_and_cleaned_copy(&mut rng);
        let log = live_key(dir(), 0, SegmentFile::Log);
        assert!(disk.tamper(&log, |data| data[0] = b'O'));
        assert!(disk.remove_file(&(dir(), 0, (SegmentFile::Log, Cleaned))));
        assert!(!disk.remove_file(&(dir(), 0, (SegmentFile::Log, Cleaned))));
        disk.power_cut_losing_all();
        assert_eq!(staged(&disk, SegmentFile::Log, Live), Some(&b"Old"[..]));
        assert_eq!(staged(&disk, SegmentFile::Log, Cleaned), None);
    }
}
