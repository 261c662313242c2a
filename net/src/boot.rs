//! Start-up: list what the core needs from the data dir.
//!
//! The driver does not judge what it finds: it hands the core every meta.db
//! pair, and for every segment the length of its `.log` and the whole of its
//! three index files, as they are on disk. It reads no segment data and
//! fsyncs no segment: the core reads what it must scan through the disk
//! worker (`DiskOp::Read`) and makes what it keeps durable (`DiskOp::Adopt`
//! and a `Sync`) before serving, so a clean start costs the indexes alone.
//! Repairs (`DiskOp::Truncate`, `DiskOp::DeleteSegment`) go through the same
//! worker as any other write. The log cleaner's leftovers are listed as they
//! are too: a complete replacement (a `.log.swap` present) for the core to
//! finish swapping in, and any other `.cleaned` or `.swap` file as an
//! abandoned cleaning for it to discard. Anything under `logs/` that is not a partition
//! dir or a segment file is left alone with a warning: it is not ours to
//! delete.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, FileStage, PartitionDir, SegmentFile};
use tracing::{info, warn};

use crate::datadir::DataDir;
use crate::metastore::MetaStore;

/// An index file larger than this is not read: it is handed over as absent,
/// and the core rebuilds it from the log (the indexes are a cache). A 1 GiB
/// segment's offset and time indexes are a few MiB; only an aborted
/// transaction index of a segment made of tiny aborted transactions comes
/// near this.
const INDEX_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// What start-up found: the state for `Input::Boot`, and meta.db, which the
/// meta worker owns from here on.
pub struct Boot {
    pub state: BootState,
    pub meta: MetaStore,
}

pub fn load(data: &DataDir) -> anyhow::Result<Boot> {
    let started = Instant::now();
    let store = MetaStore::open(data)?;
    let mut meta = Vec::new();
    for pair in store.db().iter() {
        let (key, value) =
            pair.with_context(|| format!("cannot read {}", data.meta_db_path().display()))?;
        meta.push((key.to_vec(), value.to_vec()));
    }

    let partitions = scan_logs(&data.logs_dir())?;
    // Only its presence counts; the core removes it before anything else.
    let clean_shutdown = data
        .logs_dir()
        .join(doze_core::io::CLEAN_SHUTDOWN_FILE_NAME)
        .symlink_metadata()
        .is_ok_and(|m| m.is_file());
    let swaps = partitions.iter().map(|p| p.swaps.len()).sum::<usize>();
    let abandoned = partitions.iter().map(|p| p.abandoned.len()).sum::<usize>();
    let segments = partitions.iter().flat_map(|p| &p.segments);
    let log_bytes: u64 = segments.clone().filter_map(|s| s.log_bytes).sum();
    let index_bytes: usize = segments
        .clone()
        .flat_map(|s| [&s.offset_index, &s.time_index, &s.txn_index])
        .flatten()
        .map(Bytes::len)
        .sum();
    info!(
        data_dir = %data.root().display(),
        meta_keys = meta.len(),
        partitions = partitions.len(),
        segments = segments.count(),
        swaps,
        abandoned,
        clean_shutdown,
        log_bytes,
        index_bytes_read = index_bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "listed data dir"
    );
    Ok(Boot {
        state: BootState {
            meta,
            partitions,
            entropy: os_entropy()?,
            clean_shutdown,
        },
        meta: store,
    })
}

/// Every `<topic>-<partition>` dir under `logs/`, sorted so that start-up is
/// the same from one run to the next whatever order the file system lists.
fn scan_logs(logs: &Path) -> anyhow::Result<Vec<RecoveredPartition>> {
    let mut dirs = Vec::new();
    let entries = fs::read_dir(logs).with_context(|| format!("cannot list {}", logs.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", logs.display()))?;
        let path = entry.path();
        if entry.file_name() == doze_core::io::CLEAN_SHUTDOWN_FILE_NAME {
            continue; // looked for by `load`
        }
        let file_type = entry
            .file_type()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let parsed = entry
            .file_name()
            .to_str()
            .and_then(PartitionDir::parse_dir_name);
        let Some(dir) = parsed.filter(|_| file_type.is_dir()) else {
            warn!(path = %path.display(), "not a partition directory; ignored");
            continue;
        };
        dirs.push((dir, path));
    }
    let mut partitions = list_in_parallel(dirs)?;
    partitions.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(partitions)
}

/// Threads that list partition directories at start-up.
const LISTING_THREADS_MAX: usize = 4;

/// `list_segments` of every dir, on up to `LISTING_THREADS_MAX` threads
/// (each lists a contiguous share). Why: listing is system calls (a
/// directory read and a stat per file), and one thread took 0.4-0.7 s of a
/// start with 10,000 partitions, where a second core sat idle.
fn list_in_parallel(dirs: Vec<(PartitionDir, PathBuf)>) -> anyhow::Result<Vec<RecoveredPartition>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, LISTING_THREADS_MAX);
    let share = dirs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let listers: Vec<_> = dirs
            .chunks(share)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|(dir, path)| list_segments(dir.clone(), path))
                        .collect::<anyhow::Result<Vec<_>>>()
                })
            })
            .collect();
        let mut partitions = Vec::with_capacity(dirs.len());
        for lister in listers {
            partitions.extend(lister.join().expect("a listing thread panicked")?);
        }
        Ok(partitions)
    })
}

/// A partition's files: every segment with any of its four live files
/// present (the `.log`'s length, the index files' contents); every base
/// with a `.log.swap`, described by its `.swap` files alike; and every other
/// base with a `.cleaned` or `.swap` file. A base with a `.log.swap` is a
/// swap and never abandoned, whatever else lies beside it: the core's
/// discard would remove the swap with the rest. A stray `.cleaned` there
/// outlives the swap and is found abandoned at the next start.
fn list_segments(dir: PartitionDir, path: &Path) -> anyhow::Result<RecoveredPartition> {
    let mut live: BTreeMap<i64, RecoveredSegment> = BTreeMap::new();
    let mut swap: BTreeMap<i64, RecoveredSegment> = BTreeMap::new();
    let mut staged: BTreeSet<i64> = BTreeSet::new();
    let entries = fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", path.display()))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let parsed = entry
            .file_name()
            .to_str()
            .and_then(FileStage::parse_file_name);
        let Some((base_offset, kind, stage)) = parsed.filter(|_| file_type.is_file()) else {
            warn!(path = %path.display(), "not a segment file; ignored");
            continue;
        };
        let segments = match stage {
            FileStage::Live => &mut live,
            FileStage::Swap => {
                staged.insert(base_offset);
                &mut swap
            }
            FileStage::Cleaned => {
                staged.insert(base_offset);
                continue;
            }
        };
        let segment = segments
            .entry(base_offset)
            .or_insert_with(|| RecoveredSegment {
                base_offset,
                ..RecoveredSegment::default()
            });
        match kind {
            SegmentFile::Log => {
                let len = entry
                    .metadata()
                    .with_context(|| format!("cannot stat {}", path.display()))?
                    .len();
                segment.log_bytes = Some(len);
            }
            SegmentFile::OffsetIndex => segment.offset_index = read_index(&entry),
            SegmentFile::TimeIndex => segment.time_index = read_index(&entry),
            SegmentFile::TxnIndex => segment.txn_index = read_index(&entry),
        }
    }
    let swaps: Vec<RecoveredSegment> = swap
        .into_values()
        .filter(|s| s.log_bytes.is_some())
        .collect();
    let abandoned = staged
        .into_iter()
        .filter(|base| !swaps.iter().any(|s| s.base_offset == *base))
        .collect();
    Ok(RecoveredPartition {
        dir,
        segments: live.into_values().collect(),
        swaps,
        abandoned,
    })
}

/// An index file whole. One that cannot be read (or is implausibly large) is
/// handed over as absent: the core rebuilds it from the log and overwrites it,
/// which is better than refusing to start over a cache. An empty one (an
/// active segment's, below the first index interval) is not opened: with
/// 10,000 partitions that was 30,000 opens, reads and closes of nothing.
fn read_index(entry: &fs::DirEntry) -> Option<Bytes> {
    let path = entry.path();
    let read = entry.metadata().and_then(|meta| match meta.len() {
        0 => Ok(Vec::new()),
        len if len > INDEX_FILE_BYTES_MAX => Err(std::io::Error::other(format!(
            "{len} bytes, above {INDEX_FILE_BYTES_MAX}"
        ))),
        _ => fs::read(&path),
    });
    match read {
        Ok(bytes) => Some(Bytes::from(bytes)),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "index file not read; the core rebuilds it");
            None
        }
    }
}

/// 32 bytes from the OS's generator: the core's SCRAM nonces are made from
/// them (`BootState::entropy`).
fn os_entropy() -> anyhow::Result<[u8; 32]> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_finds_meta_segments_and_indexes() {
        let root = std::env::temp_dir().join(format!("doze-boot-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let data = DataDir::open(&root).unwrap();
        let part = data.logs_dir().join("orders-3");
        fs::create_dir_all(&part).unwrap();
        fs::write(part.join(SegmentFile::Log.file_name(10)), b"later").unwrap();
        fs::write(part.join(SegmentFile::OffsetIndex.file_name(10)), b"oi").unwrap();
        fs::write(part.join(SegmentFile::Log.file_name(0)), b"first!").unwrap();
        fs::write(part.join(SegmentFile::OffsetIndex.file_name(0)), b"").unwrap();
        fs::write(part.join(SegmentFile::TimeIndex.file_name(0)), b"ti").unwrap();
        fs::write(part.join(SegmentFile::TxnIndex.file_name(0)), b"xi").unwrap();
        // Index files whose .log is gone (a deletion a crash interrupted):
        // listed, without a log length.
        fs::write(part.join(SegmentFile::TimeIndex.file_name(5)), b"orphan").unwrap();
        fs::write(part.join("notes.txt"), b"ignored").unwrap();
        fs::write(part.join("00000000000000000000.log.deleted"), b"ignored").unwrap();
        fs::create_dir_all(part.join(SegmentFile::Log.file_name(20))).unwrap(); // a dir
        fs::create_dir_all(data.logs_dir().join("not a partition")).unwrap();
        fs::create_dir_all(data.logs_dir().join("empty-0")).unwrap();
        {
            let db = sled::open(data.meta_db_path()).unwrap();
            db.insert(b"k", b"v".as_slice()).unwrap();
            db.flush().unwrap();
        }

        // sled releases its lock from a background thread after the handle
        // above drops; load waits for it (`metastore::open_sled`).
        let boot = load(&data).unwrap();
        assert_eq!(boot.state.meta, vec![(b"k".to_vec(), b"v".to_vec())]);
        let dirs: Vec<_> = boot.state.partitions.iter().map(|p| &p.dir).collect();
        assert_eq!(
            dirs,
            vec![
                &PartitionDir::new("empty", 0),
                &PartitionDir::new("orders", 3)
            ]
        );
        assert!(boot.state.partitions[0].segments.is_empty());
        let bytes = |b: &Option<Bytes>| b.as_ref().map(|b| b.to_vec());
        let segs: Vec<_> = boot.state.partitions[1]
            .segments
            .iter()
            .map(|s| {
                (
                    s.base_offset,
                    s.log_bytes,
                    bytes(&s.offset_index),
                    bytes(&s.time_index),
                    bytes(&s.txn_index),
                )
            })
            .collect();
        assert_eq!(
            segs,
            vec![
                (
                    0,
                    Some(6),
                    Some(vec![]),
                    Some(b"ti".to_vec()),
                    Some(b"xi".to_vec())
                ),
                (5, None, None, Some(b"orphan".to_vec()), None),
                (10, Some(5), Some(b"oi".to_vec()), None, None),
            ]
        );
        drop(boot);
        drop(data);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn partitions_listed_on_several_threads_are_all_there_in_order() {
        let logs = std::env::temp_dir().join(format!("doze-boot-test-many-{}", std::process::id()));
        let _ = fs::remove_dir_all(&logs);
        // More dirs than threads, in a count no share divides evenly.
        let count = LISTING_THREADS_MAX * 9 + 1;
        for p in 0..count {
            let part = logs.join(format!("t-{p}"));
            fs::create_dir_all(&part).unwrap();
            fs::write(part.join(SegmentFile::Log.file_name(0)), vec![b'x'; p]).unwrap();
        }
        let listed = scan_logs(&logs).unwrap();
        let mut want: Vec<_> = (0..count)
            .map(|p| (PartitionDir::new("t", p as i32), Some(p as u64)))
            .collect();
        want.sort();
        let got: Vec<_> = listed
            .iter()
            .map(|p| (p.dir.clone(), p.segments[0].log_bytes))
            .collect();
        assert_eq!(got, want);
        fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn the_cleaners_files_are_listed_as_swaps_and_abandoned() {
        use FileStage::{Cleaned, Live, Swap};
        let part =
            std::env::temp_dir().join(format!("doze-boot-test-staged-{}/t-0", std::process::id()));
        let _ = fs::remove_dir_all(&part);
        fs::create_dir_all(&part).unwrap();
        let write = |base, file: SegmentFile, stage: FileStage, bytes: &[u8]| {
            fs::write(part.join(stage.file_name(file, base)), bytes).unwrap();
        };
        // 0: a live segment mid-swap: its .log.swap and .index.swap are
        // complete; its .timeindex was already renamed into place.
        write(0, SegmentFile::Log, Live, b"old log");
        write(0, SegmentFile::OffsetIndex, Live, b"old oi");
        write(0, SegmentFile::Log, Swap, b"new");
        write(0, SegmentFile::OffsetIndex, Swap, b"oi");
        write(0, SegmentFile::TimeIndex, Live, b"new ti");
        // 10: a cleaning stopped while writing: .cleaned files only.
        write(10, SegmentFile::Log, Live, b"ten");
        write(10, SegmentFile::Log, Cleaned, b"half");
        write(10, SegmentFile::TxnIndex, Cleaned, b"x");
        // 20: stopped while renaming to .swap: the .log (renamed last) is
        // still .cleaned.
        write(20, SegmentFile::Log, Live, b"twenty");
        write(20, SegmentFile::TimeIndex, Swap, b"ti");
        write(20, SegmentFile::Log, Cleaned, b"tw");
        // 30: a .log.swap whose live files are all gone (every other file
        // already renamed into place and the old .log deleted by hand, or
        // never there): a swap, and no live segment.
        write(30, SegmentFile::Log, Swap, b"thirty");
        // 40: staged files only, no .log.swap: abandoned, not a segment.
        write(40, SegmentFile::TxnIndex, Swap, b"t");
        fs::write(part.join("00000000000000000050.log.swap.swap"), b"?").unwrap();

        let found = list_segments(PartitionDir::new("t", 0), &part).unwrap();
        let describe = |segments: &[RecoveredSegment]| -> Vec<_> {
            let bytes = |b: &Option<Bytes>| b.as_ref().map(|b| b.to_vec());
            segments
                .iter()
                .map(|s| {
                    (
                        s.base_offset,
                        s.log_bytes,
                        bytes(&s.offset_index),
                        bytes(&s.time_index),
                        bytes(&s.txn_index),
                    )
                })
                .collect()
        };
        assert_eq!(
            describe(&found.segments),
            vec![
                (
                    0,
                    Some(7),
                    Some(b"old oi".to_vec()),
                    Some(b"new ti".to_vec()),
                    None
                ),
                (10, Some(3), None, None, None),
                (20, Some(6), None, None, None),
            ]
        );
        assert_eq!(
            describe(&found.swaps),
            vec![
                (0, Some(3), Some(b"oi".to_vec()), None, None),
                (30, Some(6), None, None, None),
            ]
        );
        assert_eq!(found.abandoned, vec![10, 20, 40]);
        fs::remove_dir_all(part.parent().unwrap()).unwrap();
    }
}
