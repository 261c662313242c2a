//! The clean-shutdown file: a clean stop leaves it, and a start that finds
//! it trusts the segment files as they are (no `DiskOp::Adopt`, so no boot
//! sync of files recovery did not write itself), as Kafka skips log
//! recovery when it finds `.kafka_cleanshutdown` (apache/kafka
//! `core/src/main/scala/kafka/log/LogManager.scala`, `loadLogs` deletes it
//! and sets `hadCleanShutdown`; `shutdown` writes it through
//! `CleanShutdownFileHandler` after the logs are flushed and checkpointed).
//! Unlike Kafka, doze fsyncs the directory after both the write and the
//! removal, and writes nothing before the removal is durable.
//!
//! What the file claims: **every segment file and directory under `logs/`
//! is durable as a listing shows it.** That holds if no segment-file write
//! was issued since a point where everything was durable (P), which is
//! what the core keeps:
//! - the write (`DiskOp::WriteCleanShutdown`) is emitted only at P:
//!   `check_stopped` found no sync in flight, nothing dirty (index appends
//!   included), every checkpoint stored, no cleaner job and no meta.db
//!   write in flight; from then on the outbox is sealed (a disk op or a
//!   meta.db write emitted after it is a panic, `Outbox::seal`) and no
//!   timer runs; `Output::Stopped` follows the completion, and the process
//!   exits;
//! - at start-up the removal (`DiskOp::RemoveCleanShutdown`: unlink, then
//!   fsync of `logs/`) is the core's first output, and it emits nothing else
//!   (no recovery op, no meta.db write; requests wait) until the removal is
//!   reported durable. A failed removal is tried again, never skipped.
//!
//! A power cut (or a kill -9) at each point:
//! - before the write is issued: no file; the next start recovers as after
//!   a crash (adopts, boot sync). Nothing is trusted.
//! - between the write and its fsyncs: the file may survive, whole, empty
//!   or not at all. Its presence alone is the claim, and the claim is true:
//!   P was reached before the write and nothing was written after it.
//!   Absent, the next start recovers as after a crash.
//! - after the write is durable (and the process exited): the claim holds
//!   until a start removes it.
//! - at a start, before the removal is issued, or after the unlink and
//!   before the fsync of `logs/` completes: the file may come back. Nothing
//!   was written since P (the core waited), so the claim is still true, and
//!   the next start trusts the files again, rightly.
//! - after the removal is durable: writes (recovery's repairs, then
//!   requests) may follow; the file is durably gone, so the next start
//!   recovers as after a crash: whatever this process wrote and did not
//!   sync is adopted or cut, and an acknowledged write was fsynced before
//!   its answer, as always.
//!
//! So no start trusts a file that a write since P touched, and an
//! acknowledged write is never taken back nor served undurable. meta.db is
//! apart: each of its writes is durable when reported, with or without the
//! file.

use super::{recovery, Core};
use crate::boundary::Output;
use crate::io::{BootState, DiskOp, IoError, IoId};

/// `Input::Boot`: with the file found, its removal first; recovery once it
/// is durable (`done`).
pub(crate) fn boot(b: &mut Core, state: BootState) {
    if !state.clean_shutdown {
        return recovery::start(b, state);
    }
    tracing::info!("the last stop was clean: the segment files are trusted as listed");
    let io = emit_removal(b);
    b.booting = Some(recovery::Boot::removing_clean_shutdown(io, state));
}

fn emit_removal(b: &mut Core) -> IoId {
    let io = b.outbox.take_io();
    b.outbox
        .push(Output::Disk(DiskOp::RemoveCleanShutdown { io }));
    io
}

/// At the stop's point P (`Core::check_stopped`): the write, after which
/// nothing more is written.
pub(crate) fn write(b: &mut Core) {
    assert!(b.clean_shutdown_io.is_none(), "one clean-shutdown write");
    let io = b.outbox.take_io();
    b.outbox
        .push(Output::Disk(DiskOp::WriteCleanShutdown { io }));
    b.outbox.seal();
    b.clean_shutdown_io = Some(io);
}

/// `Input::CleanShutdownDone`.
pub(crate) fn done(b: &mut Core, io: IoId, result: Result<(), IoError>) {
    if b.clean_shutdown_io == Some(io) {
        // Written, or not: either way the stop is complete. A failed write
        // may have left the file; what it claims is still true (P).
        if let Err(e) = result {
            tracing::error!(
                "clean-shutdown file not written ({}); the next start recovers as after a crash",
                e.0
            );
        }
        b.stopped = true;
        b.outbox.push(Output::Stopped);
        return;
    }
    let boot = b
        .booting
        .as_mut()
        .expect("a removal completes while booting");
    let state = boot.take_clean_shutdown_removal(io);
    match result {
        Ok(()) => recovery::start(b, state),
        Err(e) => {
            // Recovering without trust while the file may still be there
            // would let a later start trust what this one writes: the
            // removal is tried again, and requests keep waiting.
            tracing::error!("clean-shutdown file not removed: {}; trying again", e.0);
            let io = emit_removal(b);
            let boot = b.booting.as_mut().expect("booting");
            boot.await_clean_shutdown_removal(io, state);
        }
    }
}
