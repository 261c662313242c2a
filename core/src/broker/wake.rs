//! What each completion the driver reports lets go on, in order: the core's
//! own steps, and between them the parked requests they wake.

use bytes::Bytes;

use crate::api::{self, Cx};
use crate::core_state::MetaDone;
use crate::io::{ConnId, IoError, IoId};
use crate::produce_checks::ProduceChecks;

/// A request frame: it waits while start-up runs, else it is handled now.
pub(super) fn frame(cx: &mut Cx, conn: ConnId, frame: Bytes, checks: Option<ProduceChecks>) {
    assert!(cx.core.is_booted(), "a request arrived before Input::Boot");
    if cx.core.is_booting() {
        cx.core.park_early_frame((conn, frame, checks));
    } else {
        api::handle_frame(cx, conn, frame, checks);
    }
}

/// Start-up is done: the frames that waited for it run, in order.
pub(super) fn run_early_frames(cx: &mut Cx) {
    for (conn, frame, checks) in cx.core.take_early_frames() {
        api::handle_frame(cx, conn, frame, checks);
    }
}

/// A sync completed: the writes it made durable are answered (or, if it
/// failed, the writes cut back fail), then whatever waited for it.
pub(super) fn sync_done(cx: &mut Cx, io: IoId, result: Result<(), IoError>) {
    let done = cx.core.sync_done(io, result);
    if !done.ok {
        cx.fail_undurable_writes();
    }
    if done.boot {
        cx.core.boot_sync_done(done.ok);
        run_early_frames(cx);
    }
    if cx.core.removals_synced(io, done.ok) {
        api::create_topics::removals_synced(cx);
    }
    cx.complete_durable_writes();
    cx.core.after_sync(io, done.ok);
    api::fetch::wake(cx, true);
    // What was appended meanwhile rides the next sync (the calls above may
    // have started it already).
    cx.core.request_sync();
}

/// A meta.db write completed: its owner finishes, then the requests that
/// waited for a meta.db change run again, in arrival order.
pub(super) fn meta_done(cx: &mut Cx, io: IoId, result: Result<(), IoError>) {
    match cx.core.meta_done(io, result) {
        MetaDone::Done => run_early_frames(cx),
        MetaDone::Request { stored } => {
            let write = cx.take_write(io);
            api::apply_meta(cx, write, stored);
        }
        MetaDone::IdBlock { stored } => {
            let waiting = cx.take_init_waiting();
            api::init_producer_id::block_stored(cx, waiting, stored);
        }
    }
    cx.run_deferred();
}

/// A read completed: start-up's, or one that parked requests wait for.
pub(super) fn read_done(cx: &mut Cx, io: IoId, result: Result<Bytes, IoError>) {
    if cx.core.is_boot_read(io) {
        cx.core.boot_read_done(io, result);
        return run_early_frames(cx);
    }
    assert!(
        cx.core.is_request_read(io),
        "ReadDone for a read nobody issued"
    );
    let ready = cx.request_read_done(io, result);
    api::reads::resume(cx, ready);
}
