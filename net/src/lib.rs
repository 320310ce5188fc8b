//! Squadron's cluster network: how processes reach each other and move
//! record batches between them.
//!
//! - `tls/`: certificates, rustls settings, accepted connections, coalesced
//!   socket writes, a development CA
//! - `client`: cached channels to peers
//! - `stream/`: Flight encoding of batches, end-of-stream markers, fetching
//!   a task's stream from a peer, stream secrets
//! - `zero_copy_do_get`: DoGet answered without re-encoding batches

pub mod client;
pub mod stream;
pub mod tls;
pub mod zero_copy_do_get;
