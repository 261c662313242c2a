//! Sending a large response frame from the page cache: its byte parts
//! with send(2), its file parts with sendfile(2), on tokio's blocking pool,
//! to a descriptor of the connection's plain TCP socket of its own
//! (`conn::SpliceTarget`). See `filereader.rs` for why, and
//! `PinnedFrame::splice` for the contract.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use doze_core::{FileRange, FramePart, IoError};

use crate::filereader::{pinned_file, read_failed, Pinned};
use crate::storage::{frame_size, FrameReadError};

/// Why a spliced frame did not go out whole.
#[derive(Debug)]
pub enum SpliceError {
    /// A file part could not be read, or the frame cannot be sent at all.
    Read(FrameReadError),
    /// The socket failed, or the writer stopped waiting for it.
    Socket(io::Error),
}

/// Sends `parts` (the frame, size prefix included) to `socket`; see
/// `PinnedFrame::splice`.
pub(crate) async fn send_frame(
    parts: Vec<FramePart>,
    pinned: Pinned,
    socket: OwnedFd,
) -> Result<(), SpliceError> {
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(Arc::clone(&stop));
    let send = move || {
        let out = SpliceOut {
            socket: &socket,
            stop: &stop,
        };
        out.frame(&parts, &pinned)
    };
    tokio::task::spawn_blocking(send).await.unwrap_or_else(|e| {
        Err(SpliceError::Read(FrameReadError::Frame(format!(
            "the send stopped: {e}"
        ))))
    })
}

/// `range` could not be read, or not whole: the frame fails on that part.
fn part_failed(range: &FileRange, error: IoError) -> SpliceError {
    SpliceError::Read(FrameReadError::Part {
        range: range.clone(),
        error,
    })
}

/// Sets its flag when dropped: the splice's future went away.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// How long a splice waits for the socket between looks at its stop flag.
const SPLICE_POLL_MS: libc::c_int = 100;

/// One frame's way out to a non-blocking socket, on a blocking-pool thread.
struct SpliceOut<'a> {
    socket: &'a OwnedFd,
    stop: &'a AtomicBool,
}

impl SpliceOut<'_> {
    fn frame(&self, parts: &[FramePart], pinned: &Pinned) -> Result<(), SpliceError> {
        let size = frame_size(parts).map_err(SpliceError::Read)?;
        for part in parts {
            if let FramePart::File(range) = part {
                let file = pinned_file(pinned, range).map_err(|e| part_failed(range, e))?;
                let file_len = file
                    .metadata()
                    .map_err(|e| part_failed(range, read_failed(range, e)))?
                    .len();
                if range.position.saturating_add(range.len) > file_len {
                    let short = io::Error::from(io::ErrorKind::UnexpectedEof);
                    return Err(part_failed(range, read_failed(range, short)));
                }
            }
        }
        // No read-ahead hints of our own (POSIX_FADV_WILLNEED of the ranges
        // and of the consumer's next ones, which doze used to give):
        // sendfile's reads of each partition's file are sequential, so the
        // kernel's readahead already reads the next window of every
        // partition while the client takes this frame in, in large I/Os;
        // hints in 128 KiB pieces split that into small ones. Measured on
        // this VM, cold reads of 8 partitions by doze-bench, hinted and not
        // alternated, 9 reads each: 517 MiB median 1,440 -> 1,816 MB/s
        // (read_ahead_kb 8192) and 1,292 -> 1,526 (read_ahead_kb 128);
        // 4.6 GB 1,500-1,710 -> 1,449-2,498. Kafka gives none either. The
        // cost seen since: make bench's re-read of 20 GiB, only partly
        // cached on a 23 GB machine, went from 3,498 to 1,655-1,693 MB/s;
        // hinting only what is not resident is untried.
        self.send(&size.to_be_bytes(), !parts.is_empty())?;
        for (i, part) in parts.iter().enumerate() {
            match part {
                FramePart::Bytes(bytes) => self.send(bytes, i + 1 < parts.len())?,
                FramePart::File(range) => {
                    let file = pinned_file(pinned, range).map_err(|e| part_failed(range, e))?;
                    self.send_file(file, range)?;
                }
            }
        }
        Ok(())
    }

    /// All of `bytes`; `more` tells TCP that more of the frame follows, so
    /// that a part header and the records after it share packets.
    fn send(&self, mut bytes: &[u8], more: bool) -> Result<(), SpliceError> {
        let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
        while !bytes.is_empty() {
            self.check_stop()?;
            // SAFETY: `bytes` is readable for its length.
            let n = unsafe {
                libc::send(
                    self.socket.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    flags,
                )
            };
            if n < 0 {
                self.retry(io::Error::last_os_error())?;
                continue;
            }
            bytes = &bytes[n as usize..];
        }
        Ok(())
    }

    /// All of `range`, from the page cache to the socket.
    fn send_file(&self, file: &File, range: &FileRange) -> Result<(), SpliceError> {
        let failed = |e: io::Error| part_failed(range, read_failed(range, e));
        let end = range.position.saturating_add(range.len);
        let mut at = libc::off_t::try_from(range.position)
            .map_err(|_| failed(io::ErrorKind::InvalidInput.into()))?;
        while (at as u64) < end {
            self.check_stop()?;
            // At most 1 GiB per call, as Linux sends at most about 2 GiB.
            let want = (end - at as u64).min(1 << 30) as usize;
            // SAFETY: plain descriptors; `at` is a valid off_t sendfile(2)
            // advances by what it sent.
            let n =
                unsafe { libc::sendfile(self.socket.as_raw_fd(), file.as_raw_fd(), &mut at, want) };
            if n < 0 {
                let e = io::Error::last_os_error();
                // The socket's failures end the connection; any other is
                // the file's (EIO).
                let socket_gone = matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ETIMEDOUT)
                );
                if socket_gone {
                    return Err(SpliceError::Socket(e));
                }
                match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => self.retry(e)?,
                    _ => return Err(failed(e)),
                }
                continue;
            }
            if n == 0 {
                // The file ended before the range did: cut since the check.
                return Err(failed(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        Ok(())
    }

    /// After a failed call: waits for the socket to take more if it was
    /// full (or returns at once if interrupted); any other error is the
    /// socket's, and ends the frame.
    fn retry(&self, e: io::Error) -> Result<(), SpliceError> {
        match e.kind() {
            io::ErrorKind::Interrupted => Ok(()),
            io::ErrorKind::WouldBlock => self.wait_writable(),
            _ => Err(SpliceError::Socket(e)),
        }
    }

    /// The writer stopped waiting (its future was dropped): nothing more
    /// of the frame goes out, and the descriptor closes.
    fn check_stop(&self) -> Result<(), SpliceError> {
        if self.stop.load(Ordering::Acquire) {
            return Err(SpliceError::Socket(io::Error::other(
                "the connection's writer stopped",
            )));
        }
        Ok(())
    }

    fn wait_writable(&self) -> Result<(), SpliceError> {
        loop {
            self.check_stop()?;
            let mut poll = libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut poll, 1, SPLICE_POLL_MS) };
            if n > 0 {
                // Writable, or failed: the next call says which.
                return Ok(());
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(SpliceError::Socket(e));
                }
            }
        }
    }
}
