use std::collections::VecDeque;

use crate::config::BrokerConfig;
use crate::io::{Input, Output};

/// The broker state machine. See the crate docs.
pub struct Broker {
    config: BrokerConfig,
    outputs: VecDeque<Output>,
}

impl Broker {
    pub fn new(config: BrokerConfig) -> Self {
        Self { config, outputs: VecDeque::new() }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn handle(&mut self, now_ms: i64, input: Input) {
        let _ = (now_ms, input);
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The absolute time (ms) at which the driver must send `Input::Tick`.
    pub fn poll_timeout(&self) -> Option<i64> {
        None
    }
}
