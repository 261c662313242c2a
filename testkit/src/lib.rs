//! doze-testkit: what the Rust tests of every crate share, so that each
//! thing is written once: `core/tests` (through `core/tests/support`),
//! `net/tests`, and the simulator's clients (`sim/src/client/wire.rs`).
//!
//! A crate of its own because those three cannot share a module otherwise:
//! `doze-core` is the broker's sans-IO state machine (no client code in it),
//! and `doze-sim` depends on the core, so the core's tests cannot reach into
//! it without building the whole simulator.

pub mod frame;
