//! Start-up: list what the core needs from the data dir.
//!
//! The driver does not judge what it finds: it hands the core every meta.db
//! pair, and for every segment the length of its `.log` and the whole of its
//! three index files, as they are on disk. It reads no segment data and
//! fsyncs no segment: the core reads what it must scan through the disk
//! worker (`DiskOp::Read`) and makes what it keeps durable (`DiskOp::Adopt`
//! and a `Sync`) before serving, so a clean start costs the indexes alone.
//! Repairs (`DiskOp::Truncate`, `DiskOp::DeleteSegment`) go through the same
//! worker as any other write. Anything under `logs/` that is not a partition
//! dir or a segment file is left alone with a warning: it is not ours to
//! delete.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, PartitionDir, SegmentFile};
use tracing::{info, warn};

use crate::datadir::{sync_dir, DataDir};

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
    pub db: sled::Db,
}

pub fn load(data: &DataDir) -> anyhow::Result<Boot> {
    let started = Instant::now();
    let db_path = data.meta_db_path();
    let fresh = !db_path.exists();
    let db = sled::open(&db_path).with_context(|| format!("cannot open {}", db_path.display()))?;
    if fresh {
        // sled makes its own files durable, not its directory's entry in ours.
        sync_dir(data.root()).with_context(|| format!("cannot fsync {}", data.root().display()))?;
    }
    // What a crashed process wrote but never flushed may still sit in the
    // page cache, where sled reads it back; the core treats meta.db as
    // durable, so make it so before handing it over.
    db.flush()
        .with_context(|| format!("cannot flush {}", db_path.display()))?;
    let mut meta = Vec::new();
    for pair in db.iter() {
        let (key, value) = pair.with_context(|| format!("cannot read {}", db_path.display()))?;
        meta.push((key.to_vec(), value.to_vec()));
    }

    let partitions = scan_logs(&data.logs_dir())?;
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
        log_bytes,
        index_bytes_read = index_bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "listed data dir"
    );
    Ok(Boot {
        state: BootState { meta, partitions },
        db,
    })
}

/// Every `<topic>-<partition>` dir under `logs/`, sorted so that start-up is
/// the same from one run to the next whatever order the file system lists.
fn scan_logs(logs: &Path) -> anyhow::Result<Vec<RecoveredPartition>> {
    let mut partitions = Vec::new();
    let entries = fs::read_dir(logs).with_context(|| format!("cannot list {}", logs.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", logs.display()))?;
        let path = entry.path();
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
        let segments = list_segments(&path)?;
        partitions.push(RecoveredPartition { dir, segments });
    }
    partitions.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(partitions)
}

/// Every segment of a partition with any of its four files present: the
/// `.log`'s length, and the index files' contents.
fn list_segments(dir: &Path) -> anyhow::Result<Vec<RecoveredSegment>> {
    let mut segments: BTreeMap<i64, RecoveredSegment> = BTreeMap::new();
    let entries = fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let parsed = entry
            .file_name()
            .to_str()
            .and_then(SegmentFile::parse_file_name);
        let Some((base_offset, kind)) = parsed.filter(|_| file_type.is_file()) else {
            warn!(path = %path.display(), "not a segment file; ignored");
            continue;
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
            SegmentFile::OffsetIndex => segment.offset_index = read_index(&path),
            SegmentFile::TimeIndex => segment.time_index = read_index(&path),
            SegmentFile::TxnIndex => segment.txn_index = read_index(&path),
        }
    }
    Ok(segments.into_values().collect())
}

/// An index file whole. One that cannot be read (or is implausibly large) is
/// handed over as absent: the core rebuilds it from the log and overwrites it,
/// which is better than refusing to start over a cache.
fn read_index(path: &Path) -> Option<Bytes> {
    let read = fs::metadata(path).and_then(|meta| {
        if meta.len() > INDEX_FILE_BYTES_MAX {
            return Err(std::io::Error::other(format!(
                "{} bytes, above {INDEX_FILE_BYTES_MAX}",
                meta.len()
            )));
        }
        fs::read(path)
    });
    match read {
        Ok(bytes) => Some(Bytes::from(bytes)),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "index file not read; the core rebuilds it");
            None
        }
    }
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
        // above drops; wait for it rather than race it.
        let boot = (0..100)
            .find_map(|_| {
                load(&data).ok().or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    None
                })
            })
            .expect("meta.db opens within 5 s");
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
}
