//! The request budget: the memory request frames may hold, charged from the
//! first byte.
//!
//! A connection's reader reads a frame's 4-byte size, and before it
//! allocates the frame's buffer or reads a byte of it, charges the whole
//! declared size here (`RequestBudget::charge`). The charge travels with
//! the frame to the broker task (`server::Event::Frame`) and is given back
//! once the core has taken the frame; what the core keeps of it (appends)
//! is counted from then on by the storage's `Backlog`. A reader whose
//! charge does not fit waits, reading nothing more from its socket: the
//! client waits in its own socket buffers, as a connection Kafka mutes
//! waits for its memory pool (`queued.max.request.bytes`). So frames
//! declared and never sent, or sent slowly, cost at most the budget, not
//! their number times their size.
//!
//! The budget has shares, so that one kind of hostile client cannot starve
//! the others (each share a tokio `Semaphore` of bytes, fair: the first
//! waiter is served first, and a release wakes only whom it satisfies):
//!
//! - `main`: every authenticated frame (`QUEUED_REQUEST_BYTES_MAX`).
//! - `large`: frames of `LARGE_REQUEST_BYTES_MIN` or more are charged here
//!   first, then to `main`, so that large frames held half-sent leave the
//!   rest of `main` to requests of a usual size.
//! - `small`: a frame of at most `SMALL_REQUEST_BYTES_MAX` that finds no
//!   room in `main` may take this reserve instead, so Metadata, heartbeats
//!   and small produces go on while large frames fill `main`.
//! - `unauthenticated`: frames of connections on a SASL listener that have
//!   not authenticated are charged here alone (and are at most
//!   `sasl.server.max.receive.size`, checked by the reader).
//!
//! A charge is always taken whole and in one order (`large` before
//! `main`), so no reader holds part of what it needs while waiting for the
//! rest held by others.

use std::sync::Arc;

use doze_core::limits;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which connections a frame comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Authenticated,
    /// On a SASL listener, before its authentication succeeded.
    Unauthenticated,
}

/// Bytes of request frames held, by share.
pub struct RequestBudget {
    main: Arc<Semaphore>,
    large: Arc<Semaphore>,
    small: Arc<Semaphore>,
    unauthenticated: Arc<Semaphore>,
    /// What `main` started with (the tests read what is held).
    #[cfg(test)]
    main_bytes_max: usize,
}

/// Bytes charged for one frame, given back when dropped.
#[derive(Default)]
pub struct Charge {
    permits: Vec<OwnedSemaphorePermit>,
}

impl Charge {
    /// A frame that costs nothing (the broker's own connections).
    pub fn none() -> Self {
        Self::default()
    }

    /// Bytes charged, counted once (a large frame's bytes are charged to
    /// two shares, one inside the other).
    pub fn bytes(&self) -> usize {
        self.permits.last().map_or(0, |p| p.num_permits())
    }
}

impl Default for RequestBudget {
    fn default() -> Self {
        Self::new(limits::QUEUED_REQUEST_BYTES_MAX)
    }
}

impl RequestBudget {
    /// A budget of `main_bytes_max` (`queued.max.request.bytes`), at least
    /// `REQUEST_BYTES_MAX` so that any frame accepted can be charged.
    pub fn new(main_bytes_max: usize) -> Self {
        assert!(
            main_bytes_max >= limits::REQUEST_BYTES_MAX,
            "a request budget below the largest request would never fit one"
        );
        let large_bytes_max = limits::LARGE_REQUESTS_QUEUED_BYTES_MAX.min(main_bytes_max);
        assert!(large_bytes_max >= limits::REQUEST_BYTES_MAX);
        Self {
            main: Arc::new(Semaphore::new(main_bytes_max)),
            large: Arc::new(Semaphore::new(large_bytes_max)),
            small: Arc::new(Semaphore::new(limits::SMALL_REQUESTS_QUEUED_BYTES_MAX)),
            unauthenticated: Arc::new(Semaphore::new(limits::UNAUTHENTICATED_QUEUED_BYTES_MAX)),
            #[cfg(test)]
            main_bytes_max,
        }
    }

    /// Charges a frame of `bytes` (its declared size, already checked
    /// against the largest frame its connection may send), waiting until
    /// its share has room.
    pub async fn charge(&self, bytes: usize, lane: Lane) -> Charge {
        assert!(bytes > 0, "frames are never empty");
        assert!(bytes <= limits::REQUEST_BYTES_MAX, "frame size not checked");
        let n = u32::try_from(bytes).expect("at most REQUEST_BYTES_MAX");
        let acquire = |share: &Arc<Semaphore>| {
            let share = Arc::clone(share);
            async move {
                share
                    .acquire_many_owned(n)
                    .await
                    .expect("the budget's semaphores are never closed")
            }
        };
        let mut permits = Vec::with_capacity(2);
        match lane {
            Lane::Unauthenticated => {
                assert!(bytes <= limits::UNAUTHENTICATED_QUEUED_BYTES_MAX);
                permits.push(acquire(&self.unauthenticated).await);
            }
            Lane::Authenticated if bytes >= limits::LARGE_REQUEST_BYTES_MIN => {
                permits.push(acquire(&self.large).await);
                permits.push(acquire(&self.main).await);
            }
            Lane::Authenticated if bytes <= limits::SMALL_REQUEST_BYTES_MAX => {
                // Whichever has room first; the other's wait is dropped
                // (and gives back whatever it had been assigned).
                let permit = tokio::select! {
                    biased;
                    p = acquire(&self.main) => p,
                    p = acquire(&self.small) => p,
                };
                permits.push(permit);
            }
            Lane::Authenticated => permits.push(acquire(&self.main).await),
        }
        Charge { permits }
    }

    /// Bytes charged to every share now, each counted once.
    #[cfg(test)]
    fn held_bytes(&self) -> [usize; 4] {
        [
            self.main_bytes_max - self.main.available_permits(),
            limits::LARGE_REQUESTS_QUEUED_BYTES_MAX.min(self.main_bytes_max)
                - self.large.available_permits(),
            limits::SMALL_REQUESTS_QUEUED_BYTES_MAX - self.small.available_permits(),
            limits::UNAUTHENTICATED_QUEUED_BYTES_MAX - self.unauthenticated.available_permits(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const WAIT: Duration = Duration::from_millis(50);
    const MIB: usize = 1024 * 1024;

    async fn charged_within(
        budget: &Arc<RequestBudget>,
        bytes: usize,
        lane: Lane,
    ) -> Option<Charge> {
        tokio::time::timeout(WAIT, budget.charge(bytes, lane))
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_charge_is_held_until_dropped() {
        let budget = Arc::new(RequestBudget::default());
        let charge = budget.charge(1000, Lane::Authenticated).await;
        assert_eq!(charge.bytes(), 1000);
        assert_eq!(budget.held_bytes(), [1000, 0, 0, 0]);
        drop(charge);
        assert_eq!(budget.held_bytes(), [0, 0, 0, 0]);
    }

    #[tokio::test]
    async fn large_frames_fill_their_share_and_wait_while_usual_ones_go_on() {
        let budget = Arc::new(RequestBudget::default());
        // One 32 MiB frame takes the whole large share...
        let first = charged_within(&budget, 32 * MIB, Lane::Authenticated)
            .await
            .expect("room");
        assert_eq!(first.bytes(), 32 * MIB);
        assert_eq!(budget.held_bytes(), [32 * MIB, 32 * MIB, 0, 0]);
        // ...so the next large one waits, holding nothing,
        let waiting = tokio::spawn({
            let budget = Arc::clone(&budget);
            async move { budget.charge(4 * MIB, Lane::Authenticated).await }
        });
        tokio::time::sleep(WAIT).await;
        assert!(!waiting.is_finished(), "the large share is spent");
        assert_eq!(budget.held_bytes(), [32 * MIB, 32 * MIB, 0, 0]);
        // while frames of a usual size take the rest of the main share.
        let mut usual = Vec::new();
        for _ in 0..32 {
            usual.push(
                charged_within(&budget, MIB, Lane::Authenticated)
                    .await
                    .expect("room in main"),
            );
        }
        assert_eq!(budget.held_bytes(), [64 * MIB, 32 * MIB, 0, 0]);
        assert!(
            charged_within(&budget, MIB, Lane::Authenticated)
                .await
                .is_none(),
            "the main share is spent"
        );
        // A small frame still goes, from the reserve.
        let small = charged_within(&budget, 100, Lane::Authenticated)
            .await
            .expect("the small reserve");
        assert_eq!(budget.held_bytes(), [64 * MIB, 32 * MIB, 100, 0]);
        drop(small);
        // The large frame done: the waiting one is charged.
        drop(usual);
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("charged once there is room")
            .unwrap();
        assert_eq!(second.bytes(), 4 * MIB);
        assert_eq!(budget.held_bytes(), [4 * MIB, 4 * MIB, 0, 0]);
    }

    #[tokio::test]
    async fn the_small_reserve_is_bounded_too() {
        let budget = Arc::new(RequestBudget::default());
        let mut held = Vec::new();
        // 64 MiB of main and 8 MiB of reserve in 64 KiB frames.
        for _ in 0..(72 * 16) {
            held.push(
                charged_within(&budget, 64 * 1024, Lane::Authenticated)
                    .await
                    .expect("room"),
            );
        }
        assert_eq!(budget.held_bytes(), [64 * MIB, 0, 8 * MIB, 0]);
        assert!(charged_within(&budget, 1, Lane::Authenticated)
            .await
            .is_none());
    }

    #[tokio::test]
    async fn unauthenticated_frames_have_a_budget_of_their_own() {
        let budget = Arc::new(RequestBudget::default());
        let max = limits::SASL_SERVER_MAX_RECEIVE_BYTES;
        let mut held = Vec::new();
        for _ in 0..(limits::UNAUTHENTICATED_QUEUED_BYTES_MAX / max) {
            held.push(
                charged_within(&budget, max, Lane::Unauthenticated)
                    .await
                    .expect("room"),
            );
        }
        assert!(charged_within(&budget, 1, Lane::Unauthenticated)
            .await
            .is_none());
        // Logged-in clients do not notice.
        let main = charged_within(&budget, MIB, Lane::Authenticated)
            .await
            .expect("room in main");
        assert_eq!(
            budget.held_bytes(),
            [MIB, 0, 0, limits::UNAUTHENTICATED_QUEUED_BYTES_MAX]
        );
        drop(main);
    }
}
