//! Start-up: read everything the core needs from the data dir.
//!
//! The driver does not judge what it finds: it hands the core every meta.db
//! pair and every segment's bytes as they are on disk, torn tails included.
//! The core validates them and asks for repairs (`DiskOp::Truncate`,
//! `DiskOp::DeleteSegment`) through the same disk worker as any other write.
//! Anything under `logs/` that is not a partition dir or a segment file is
//! left alone with a warning: it is not ours to delete.

use std::fs;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use doze_core::io::{RecoveredPartition, RecoveredSegment};
use doze_core::{BootState, PartitionDir};
use tracing::{info, warn};

use crate::datadir::{sync_dir, DataDir};

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
    // page cache, where sled reads it back; the core treats everything in
    // BootState as durable, so make it so before handing it over.
    db.flush()
        .with_context(|| format!("cannot flush {}", db_path.display()))?;
    let mut meta = Vec::new();
    for pair in db.iter() {
        let (key, value) = pair.with_context(|| format!("cannot read {}", db_path.display()))?;
        meta.push((key.to_vec(), value.to_vec()));
    }

    let partitions = scan_logs(&data.logs_dir())?;
    let segments: usize = partitions.iter().map(|p| p.segments.len()).sum();
    let bytes: usize = partitions
        .iter()
        .flat_map(|p| &p.segments)
        .map(|s| s.bytes.len())
        .sum();
    info!(
        data_dir = %data.root().display(),
        meta_keys = meta.len(),
        partitions = partitions.len(),
        segments,
        bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "loaded data dir"
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
        let segments = read_segments(&path)?;
        sync_dir(&path).with_context(|| format!("cannot fsync {}", path.display()))?;
        partitions.push(RecoveredPartition { dir, segments });
    }
    sync_dir(logs).with_context(|| format!("cannot fsync {}", logs.display()))?;
    partitions.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(partitions)
}

/// Reads every `<20-digit base offset>.log` file of a partition in full.
fn read_segments(dir: &Path) -> anyhow::Result<Vec<RecoveredSegment>> {
    let mut segments = Vec::new();
    let entries = fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        let is_file = entry
            .file_type()
            .with_context(|| format!("cannot stat {}", path.display()))?
            .is_file();
        let base_offset = entry.file_name().to_str().and_then(parse_segment_name);
        let Some(base_offset) = base_offset.filter(|_| is_file) else {
            warn!(path = %path.display(), "not a segment file; ignored");
            continue;
        };
        // Read, then fsync: bytes a crashed process wrote but never synced
        // are in the page cache and read back like any others, and the core
        // serves recovered data as durable (found by the simulator: a crash,
        // a restart, then a power cut lost acknowledged records).
        let mut file =
            fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        file.sync_all()
            .with_context(|| format!("cannot fsync {}", path.display()))?;
        segments.push(RecoveredSegment {
            base_offset,
            bytes: Bytes::from(bytes),
        });
    }
    segments.sort_by_key(|s| s.base_offset);
    Ok(segments)
}

/// The inverse of `doze_core::io::segment_file_name`.
fn parse_segment_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use doze_core::io::segment_file_name;

    #[test]
    fn segment_names_round_trip() {
        for base in [0, 1, 42, i64::MAX] {
            assert_eq!(parse_segment_name(&segment_file_name(base)), Some(base));
        }
        assert_eq!(parse_segment_name("00000000000000000000.index"), None);
        assert_eq!(parse_segment_name("0.log"), None);
        assert_eq!(parse_segment_name("99999999999999999999.log"), None);
    }

    #[test]
    fn load_finds_meta_and_segments() {
        let root = std::env::temp_dir().join(format!("doze-boot-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let data = DataDir::open(&root).unwrap();
        let part = data.logs_dir().join("orders-3");
        fs::create_dir_all(&part).unwrap();
        fs::write(part.join(segment_file_name(10)), b"later").unwrap();
        fs::write(part.join(segment_file_name(0)), b"first").unwrap();
        fs::write(part.join("notes.txt"), b"ignored").unwrap();
        fs::create_dir_all(data.logs_dir().join("not a partition")).unwrap();
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
        assert_eq!(boot.state.partitions.len(), 1);
        let p = &boot.state.partitions[0];
        assert_eq!(p.dir, PartitionDir::new("orders", 3));
        let segs: Vec<_> = p
            .segments
            .iter()
            .map(|s| (s.base_offset, &s.bytes[..]))
            .collect();
        assert_eq!(segs, vec![(0, &b"first"[..]), (10, &b"later"[..])]);
        drop(boot);
        drop(data);
        fs::remove_dir_all(&root).unwrap();
    }
}
