//! Responses written to a plain TCP socket where the core produced them,
//! when the connection's writer has nothing to write.
//!
//! Why: a response otherwise goes through the connection's writer task,
//! and when the core ran on a storage worker's thread (a commit answered
//! once its markers are durable, `Completions::deliver`) that hand-off is
//! a wake-up of a tokio worker from outside the runtime, which then makes
//! the same `sendmsg`: about 15 µs of one producer's commit at the median
//! on the bench's machine (two busy cores; 33 µs from the core's answer to
//! the socket through the writer, 16 µs written here). So the first
//! response a worker's completion lets go (`limits::
//! RESPONSE_DIRECT_WRITES_PER_COMPLETION_MAX`) leaves from that thread.
//! The broker task does not write directly: waking a writer from inside
//! the runtime is cheap, and the writers make their system calls on the
//! runtime's threads in parallel, off the core's.
//!
//! Order: a connection's responses leave in the order the core gave them.
//! A response is written here only while the writer is idle: nothing
//! queued, nothing buffered, every earlier response handed to the socket.
//! The state says so, and both sides change it under its lock: the driver
//! queues a response for the writer (making it busy) under the lock, and
//! the writer becomes idle only under the lock with its queue empty. A
//! direct write that the socket does not take whole (its buffer full)
//! queues the rest for the writer, which then finishes the frame first.
//!
//! Not for TLS (the bytes go through rustls on the writer's task), the
//! in-process connections, or madsim's sockets: they have no descriptor
//! here, and their responses always go through the writer.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use doze_core::limits::RESPONSE_DIRECT_WRITE_BYTES_MAX;

/// A plain TCP connection's socket for direct writes, and whether the
/// writer is idle.
pub struct DirectWrite {
    /// The socket's own descriptor (dup(2)): never a number the connection
    /// has closed and the kernel reused. Non-blocking, as the descriptor
    /// it was duplicated from (one open file description).
    fd: OwnedFd,
    state: Mutex<WriterState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterState {
    /// Nothing queued or buffered: a response may be written directly.
    Idle,
    /// Responses queued or being written: the next one is queued too.
    Busy,
    /// The writer has ended: responses are queued (and find its queue
    /// closed), none is written here.
    Closed,
}

/// What a direct write did.
pub enum Written {
    /// The whole frame is with the socket.
    Whole,
    /// The socket took this much less than the frame: the rest (size
    /// prefix included in what was sent) is for the writer.
    Rest(Bytes),
    /// Nothing was written (the socket's buffer is full, or it failed:
    /// the writer finds out writing it).
    Nothing,
}

impl DirectWrite {
    pub fn new(fd: OwnedFd) -> Self {
        Self {
            fd,
            state: Mutex::new(WriterState::Idle),
        }
    }

    /// The writer's state, locked: hold it while deciding and while
    /// queueing a response.
    pub fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a response of `frame_bytes` (without its size prefix) may
    /// be written directly: a small one only, as it is written under the
    /// core's lock.
    pub fn fits(frame_bytes: usize) -> bool {
        frame_bytes <= RESPONSE_DIRECT_WRITE_BYTES_MAX
    }

    /// Writes the frame (its size prefix, then `frame`) as far as the
    /// socket takes it without waiting. The caller holds the lock and saw
    /// `Idle`.
    pub fn write(&self, _idle: &MutexGuard<'_, WriterState>, frame: &[u8]) -> Written {
        let Ok(size) = i32::try_from(frame.len()) else {
            return Written::Nothing; // the writer refuses it
        };
        let prefix = size.to_be_bytes();
        let total = prefix.len() + frame.len();
        let mut sent = 0;
        while sent < total {
            match self.send_from(&prefix, frame, sent) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock, or a failure the writer meets
            }
        }
        if sent == total {
            return Written::Whole;
        }
        if sent == 0 {
            return Written::Nothing;
        }
        let mut rest = BytesMut::with_capacity(total - sent);
        if sent < prefix.len() {
            rest.extend_from_slice(&prefix[sent..]);
            rest.extend_from_slice(frame);
        } else {
            rest.extend_from_slice(&frame[sent - prefix.len()..]);
        }
        Written::Rest(rest.freeze())
    }

    /// One sendmsg(2) of what is left from byte `sent` of prefix + frame,
    /// without waiting; a closed peer is an EPIPE, not a SIGPIPE.
    fn send_from(&self, prefix: &[u8], frame: &[u8], sent: usize) -> io::Result<usize> {
        let (head, body) = if sent < prefix.len() {
            (&prefix[sent..], frame)
        } else {
            (&prefix[..0], &frame[sent - prefix.len()..])
        };
        socket2::SockRef::from(&self.fd).send_vectored_with_flags(
            &[io::IoSlice::new(head), io::IoSlice::new(body)],
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    }

    /// The writer has written and flushed everything it was given: idle,
    /// if its queue is still empty (`queue_empty`, asked under the lock,
    /// where responses are queued).
    pub fn writer_idle(&self, queue_empty: impl FnOnce() -> bool) {
        let mut state = self.lock();
        if *state == WriterState::Busy && queue_empty() {
            *state = WriterState::Idle;
        }
    }

    /// The writer has ended.
    pub fn writer_closed(&self) {
        *self.lock() = WriterState::Closed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn pair() -> (std::net::TcpStream, DirectWrite) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let fd = server.as_fd().try_clone_to_owned().unwrap();
        (client, DirectWrite::new(fd))
    }

    #[test]
    fn a_frame_is_written_whole_with_its_size_prefix() {
        let (mut client, direct) = pair();
        let state = direct.lock();
        assert_eq!(*state, WriterState::Idle);
        assert!(matches!(direct.write(&state, b"hello"), Written::Whole));
        let mut got = [0u8; 9];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\0\0\0\x05hello");
    }

    #[test]
    fn what_a_full_socket_does_not_take_is_left_for_the_writer() {
        let (mut client, direct) = pair();
        let frame = vec![7u8; 8 * 1024 * 1024];
        let state = direct.lock();
        let rest = match direct.write(&state, &frame) {
            Written::Rest(rest) => rest,
            _ => panic!("a socket buffer takes less than 8 MiB"),
        };
        drop(state);
        // What was sent, then the rest, is the whole frame.
        let sent = 4 + frame.len() - rest.len();
        let mut got = vec![0u8; sent];
        client.read_exact(&mut got).unwrap();
        got.extend_from_slice(&rest);
        let mut want = (frame.len() as i32).to_be_bytes().to_vec();
        want.extend_from_slice(&frame);
        assert_eq!(got, want);
        // A full socket next time: nothing written.
        let mut filled = direct.lock();
        loop {
            match direct.write(&filled, &frame) {
                Written::Nothing => break,
                _ => continue,
            }
        }
        *filled = WriterState::Busy;
    }

    #[test]
    fn the_writer_goes_idle_only_with_its_queue_empty() {
        let (_client, direct) = pair();
        *direct.lock() = WriterState::Busy;
        direct.writer_idle(|| false);
        assert_eq!(*direct.lock(), WriterState::Busy);
        direct.writer_idle(|| true);
        assert_eq!(*direct.lock(), WriterState::Idle);
        direct.writer_closed();
        direct.writer_idle(|| true);
        assert_eq!(*direct.lock(), WriterState::Closed);
    }
}
