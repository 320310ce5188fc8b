//! The queries PollFlightInfo started (`poll`), kept until their DoGet
//! takes the rows or they expire.

use std::sync::Mutex;
use std::time::Duration;

use arrow_flight::FlightInfo;

use super::handles::HandleMap;
use squadron_coordinator::output::JobStream;

pub const POLL_TTL: Duration = Duration::from_secs(300);
pub const POLL_CAPACITY: usize = 256;

/// A query started by PollFlightInfo.
pub struct Polled {
    info: FlightInfo,
    /// The running query's rows until its DoGet takes them.
    stream: Mutex<Option<JobStream>>,
}

pub type PollStore = HandleMap<Polled>;

pub fn new_poll_store() -> PollStore {
    HandleMap::new("polled queries", POLL_TTL, POLL_CAPACITY)
}

impl Polled {
    pub fn new(info: FlightInfo, stream: JobStream) -> Self {
        Self {
            info,
            stream: Mutex::new(Some(stream)),
        }
    }

    /// What PollFlightInfo answered for it.
    pub fn info(&self) -> &FlightInfo {
        &self.info
    }

    /// The rows of the query, for its one DoGet.
    pub fn take_stream(&self) -> Option<JobStream> {
        self.stream.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
