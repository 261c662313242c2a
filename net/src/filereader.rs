//! Production `FrameReader`: reads the file parts of response frames with
//! pread, on tokio's blocking pool, so neither the broker task nor a
//! connection's async writer ever waits on the disk.
//!
//! Descriptors are cached (a few, least recently used out) because a
//! consumer at the tail reads the same active segment over and over. A cached
//! descriptor must never outlive its file's name: a deleted segment or
//! partition can come back under the same name (a topic deleted and created
//! again starts at segment 0), and an old descriptor would serve the old
//! bytes. So the disk worker calls `forget_*` as it deletes, and a descriptor
//! opened while a deletion ran is not cached (`generation`). What is already
//! being read keeps its descriptor and finishes: the bytes it was asked for
//! are the ones that existed when the core answered.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use doze_core::{FileRange, FramePart, IoError, PartitionDir, SegmentFile};

use crate::datadir::segment_path;
use crate::storage::{assemble_frame, FrameFuture, FrameReadError, FrameReader};

/// Descriptors the reader keeps open: enough for the active segments of the
/// partitions being consumed at once; a miss costs one open(2).
const READER_OPEN_FILES_MAX: usize = 64;

type FileKey = (PartitionDir, i64, SegmentFile);

#[derive(Clone)]
pub struct FileReader(Arc<Shared>);

struct Shared {
    logs_dir: PathBuf,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    files: HashMap<FileKey, CachedFile>,
    uses: u64,
    /// Bumped by every `forget_*`: a descriptor opened across a bump may name
    /// a deleted file and is used once, not cached.
    generation: u64,
}

struct CachedFile {
    file: Arc<File>,
    last_use: u64,
}

impl FileReader {
    pub fn new(logs_dir: PathBuf) -> Self {
        Self(Arc::new(Shared {
            logs_dir,
            cache: Mutex::default(),
        }))
    }

    /// The disk worker is deleting this segment's files.
    pub fn forget_segment(&self, dir: &PartitionDir, segment_base: i64) {
        let mut cache = self.lock();
        cache.generation += 1;
        cache
            .files
            .retain(|(d, base, _), _| !(d == dir && *base == segment_base));
    }

    /// The disk worker is deleting this partition's directory.
    pub fn forget_partition(&self, dir: &PartitionDir) {
        let mut cache = self.lock();
        cache.generation += 1;
        cache.files.retain(|(d, _, _), _| d != dir);
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // A panic while holding the lock leaves nothing half done: the map
        // holds whole entries only.
        self.0.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self, range: &FileRange) -> Result<Arc<File>, IoError> {
        let key = (range.dir.clone(), range.segment_base, range.file);
        let generation = {
            let mut cache = self.lock();
            cache.uses += 1;
            let uses = cache.uses;
            if let Some(cached) = cache.files.get_mut(&key) {
                cached.last_use = uses;
                return Ok(Arc::clone(&cached.file));
            }
            cache.generation
        };
        let path = segment_path(&self.0.logs_dir, &range.dir, range.segment_base, range.file)?;
        let file = File::open(&path)
            .map(Arc::new)
            .map_err(|e| IoError(format!("cannot open {}: {e}", path.display())))?;
        let mut cache = self.lock();
        if cache.generation == generation {
            if cache.files.len() >= READER_OPEN_FILES_MAX {
                let oldest = cache
                    .files
                    .iter()
                    .min_by_key(|(_, cached)| cached.last_use)
                    .map(|(key, _)| key.clone());
                if let Some(oldest) = oldest {
                    cache.files.remove(&oldest);
                }
            }
            let last_use = cache.uses;
            cache.files.insert(
                key,
                CachedFile {
                    file: Arc::clone(&file),
                    last_use,
                },
            );
        }
        Ok(file)
    }

    /// Reads exactly `buf.len()` bytes of `range` (a short file is an error).
    fn read_range(&self, range: &FileRange, buf: &mut [u8]) -> Result<(), IoError> {
        let file = self.open(range)?;
        file.read_exact_at(buf, range.position).map_err(|e| {
            IoError(format!(
                "cannot read {} bytes at {} of {}/{}: {e}",
                range.len,
                range.position,
                range.dir.dir_name(),
                range.file.file_name(range.segment_base)
            ))
        })
    }
}

impl FrameReader for FileReader {
    fn read_frame(&self, parts: Vec<FramePart>) -> FrameFuture {
        let reader = self.clone();
        Box::pin(async move {
            let read = move || assemble_frame(&parts, |range, buf| reader.read_range(range, buf));
            tokio::task::spawn_blocking(read)
                .await
                .unwrap_or_else(|e| Err(FrameReadError::Frame(format!("the read stopped: {e}"))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::fs;

    fn range(dir: &PartitionDir, base: i64, position: u64, len: u64) -> FileRange {
        FileRange {
            dir: dir.clone(),
            segment_base: base,
            file: SegmentFile::Log,
            position,
            len,
        }
    }

    #[tokio::test]
    async fn frames_read_files_and_forget_deleted_ones() {
        let logs =
            std::env::temp_dir().join(format!("doze-filereader-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&logs);
        let p = PartitionDir::new("t", 0);
        fs::create_dir_all(logs.join("t-0")).unwrap();
        let seg0 = logs.join("t-0").join(SegmentFile::Log.file_name(0));
        fs::write(&seg0, b"0123456789").unwrap();
        let reader = FileReader::new(logs.clone());

        let parts = vec![
            FramePart::Bytes(Bytes::from_static(b"head")),
            FramePart::File(range(&p, 0, 2, 3)),
            FramePart::Bytes(Bytes::from_static(b"tail")),
        ];
        let frame = reader.read_frame(parts).await.unwrap();
        assert_eq!(&frame[..], b"\0\0\0\x0bhead234tail");

        // Past the end of the file, or a file that is not there: the range
        // that failed is named.
        for bad in [range(&p, 0, 8, 3), range(&p, 100, 0, 1)] {
            let parts = vec![FramePart::File(bad.clone())];
            match reader.read_frame(parts).await {
                Err(FrameReadError::Part { range, .. }) => assert_eq!(range, bad),
                other => panic!("{other:?}"),
            }
        }

        // The segment is deleted and made again under the same name: the new
        // bytes are read, not the cached descriptor's.
        reader.forget_partition(&p);
        fs::remove_file(&seg0).unwrap();
        fs::write(&seg0, b"abcdefghij").unwrap();
        let frame = reader
            .read_frame(vec![FramePart::File(range(&p, 0, 0, 2))])
            .await
            .unwrap();
        assert_eq!(&frame[..], b"\0\0\0\x02ab");
        fs::remove_dir_all(&logs).unwrap();
    }
}
