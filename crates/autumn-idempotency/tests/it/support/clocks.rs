//! A clock that models a host, unlike `ManualClock`: it follows the system
//! clock, off by a fixed offset, so a shared store built with it decides
//! expiry by its own time, as in production.

use std::time::Duration;

use autumn_idempotency::clock::{Clock, SystemClock};

/// This host's clock, running `offset` ahead of the system's.
#[derive(Debug, Clone, Copy)]
pub struct AheadClock {
    offset: u64,
}

impl AheadClock {
    /// A clock `by` ahead of the system's.
    pub fn by(by: Duration) -> Self {
        Self {
            offset: u64::try_from(by.as_millis()).expect("an offset in range"),
        }
    }
}

impl Clock for AheadClock {
    fn now_millis(&self) -> u64 {
        SystemClock.now_millis() + self.offset
    }
}
